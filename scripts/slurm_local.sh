#!/usr/bin/env bash
# A real single-node SLURM cluster on localhost (Debian's slurm-wlm: munged + slurmctld + slurmd),
# for tests/test_slurm.py and for trying profiles/slurm by hand. Everything it writes (munge key and
# socket, slurm.conf, state, spool, logs, pid files) lives under one private folder, except one link:
# /etc/slurm/slurm.conf -> DIR/slurm.conf. The Snakemake SLURM plugin removes every SLURM_* variable
# (SLURM_CONF too) before the `srun` inside each job, so srun only finds a config at the compiled-in
# default path. The link is made only where no slurm.conf exists (a host's own SLURM is never touched)
# and removed by `stop`. The daemons use ports of their own (16817/16818), not SLURM's 6817/6818.
#
#   bash scripts/slurm_local.sh install        # apt-get install slurm-wlm munge (root), if absent
#   bash scripts/slurm_local.sh start DIR      # start the daemons; prints `export SLURM_CONF=DIR/slurm.conf`
#   bash scripts/slurm_local.sh stop DIR       # stop the daemons it started (by their pid files)
#
# The node has every CPU and all but 1 GB of the memory of this machine, in two partitions: `cpu`
# (the default) and `gpu`. It has no GRES, so only jobs that ask for no GPU run (replay, rank, ...).
# Accounting is off (no slurmdbd): finished jobs stay visible to squeue for an hour (MinJobAge), which
# is how the Snakemake executor plugin follows them (--slurm-status-command squeue).
set -euo pipefail

SYSTEM_CONF=/etc/slurm/slurm.conf
MARK="Written by scripts/slurm_local.sh"

usage() { echo "usage: $0 install | start DIR | stop DIR" >&2; exit 2; }

install() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
        echo "slurm-wlm and munge are installed: $(slurmctld -V)"
        return
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends slurm-wlm munge >/dev/null
    echo "installed: $(slurmctld -V)"
}

start() {
    local dir node cpus memory port
    dir=$(mkdir -p "$1" && cd "$1" && pwd)
    node=$(hostname -s)
    cpus=$(nproc)
    memory=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))
    # Ports of our own (not 6817/6818), so that a system SLURM on this host is left alone.
    port=${TUNETABLE_SLURM_PORT:-16817}
    mkdir -p "$dir"/{munge,state,spool,log}
    chmod 700 "$dir/munge"
    if [ ! -f "$dir/munge/munge.key" ]; then
        dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
        chmod 600 "$dir/munge/munge.key"
    fi
    munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munge.seed"
    cat > "$dir/slurm.conf" <<EOF
# $MARK: a single-node cluster on localhost for tests.
ClusterName=tunetable-local
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=3600
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=cpu Nodes=$node Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$node Default=NO MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF="$dir/slurm.conf"
    # Only a dangling link of ours may be replaced (left by a run that died: its folder is gone). A live
    # one is another cluster of this script (one at a time: the ports are fixed); a file is the host's SLURM.
    if [ -L "$SYSTEM_CONF" ] && ! [ -e "$SYSTEM_CONF" ]; then
        rm -f "$SYSTEM_CONF"
    elif [ -e "$SYSTEM_CONF" ] && [ "$(readlink "$SYSTEM_CONF")" != "$SLURM_CONF" ]; then
        if head -1 "$SYSTEM_CONF" | grep -q "$MARK"; then
            echo "error: a local cluster runs already ($(readlink "$SYSTEM_CONF")): stop it first" >&2
        else
            echo "error: $SYSTEM_CONF exists (a SLURM of this host): not replacing it" >&2
        fi
        stop "$dir"
        exit 1
    fi
    mkdir -p "$(dirname "$SYSTEM_CONF")"
    ln -sfn "$SLURM_CONF" "$SYSTEM_CONF"
    slurmctld -f "$SLURM_CONF"
    slurmd -f "$SLURM_CONF"
    local waited=0
    until [ "$(sinfo -h -n "$node" -p cpu -o %t 2>/dev/null)" = "idle" ]; do
        if [ "$waited" -ge 60 ]; then
            echo "error: the SLURM node did not come up within 60 s; logs in $dir/log" >&2
            tail -n 5 "$dir"/log/*.log >&2 || true
            stop "$dir"
            exit 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
    echo "export SLURM_CONF=$SLURM_CONF"
}

stop() {
    local dir pidfile
    dir=$(cd "$1" && pwd)
    if [ "$(readlink "$SYSTEM_CONF" 2>/dev/null)" = "$dir/slurm.conf" ]; then
        rm -f "$SYSTEM_CONF"
    fi
    for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
        if [ -f "$pidfile" ]; then
            kill "$(cat "$pidfile")" 2>/dev/null || true
        fi
    done
}

case "${1:-}" in
    install) install ;;
    start) [ $# -eq 2 ] || usage; start "$2" ;;
    stop) [ $# -eq 2 ] || usage; stop "$2" ;;
    *) usage ;;
esac
