#!/usr/bin/env bash
# A/B probes of kernel variants on the H200 in one device call, before a grid change is recorded:
# each line of the files in $PROBES (space-separated; default benchmarks/probes/current.txt) is
# "<name> <gemm_vs_cublas.py args>";
# every run writes <name>.json/.md and a log; benchmarks/compare_probes.py then sets the runs side by
# side. All of it is packed into one archive under $OUT (the device tool returns at most 8 files),
# and each run's timing table is echoed.
#
#   PROBES=benchmarks/probes/gemm_mma_v3.txt bash scripts/device_probe.sh
#   run with carry [".whl"]; needs pycuda (the wheel) and nvcc on the GPU machine.
set -uo pipefail
FINAL_OUT=${OUT:-/tmp/tunetable-out}
PROBES=${PROBES:-benchmarks/probes/current.txt}
WORK=/tmp/tunetable-probe
rm -rf "$WORK"  # a warm machine keeps /tmp: only this call's runs go into the archive and the comparison
mkdir -p "$FINAL_OUT" "$WORK"
for file in $PROBES; do  # a probe file that cannot be read stops the call before any device work
  [ -r "$file" ] || { echo "device_probe: $file: no such probe file"; exit 2; }
done
source scripts/device_env.sh
# Probe variants of a kernel are patches against it (benchmarks/versions/*.patch) or a prepared adoption's kernel
# (*.diff): write their sources.
shopt -s nullglob
patches=(benchmarks/versions/*.patch benchmarks/versions/*.diff)
shopt -u nullglob
if [ "${#patches[@]}" -gt 0 ]; then python3 scripts/apply_patch.py "${patches[@]}" || echo "a patch did not apply: its probe lines fail"; fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv | tee "$WORK/device.txt"
# shellcheck disable=SC2086  # $PROBES: several files, space-separated
while read -r name args; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  args=${args//__PWD__/$PWD}
  echo "== $name ($(date -u +%H:%M:%S))"
  # shellcheck disable=SC2086  # the line's arguments are split on purpose
  timeout "${PROBE_TIMEOUT_S:-150}" python3 benchmarks/gemm_vs_cublas.py $args --out "$WORK" --name "$name" \
    >"$WORK/$name.log" 2>&1
  echo "rc=$?" >>"$WORK/$name.log"
  grep -E "TFLOP/s|^timed|best |verify|FAILED|failed|rc=" "$WORK/$name.log"
done < <(cat $PROBES)
# The runs side by side, each by ratio to its own cuBLAS rows (compare.md / compare.json in the archive).
runs=("$WORK"/*.json)
if [ -e "${runs[0]}" ]; then
  python3 benchmarks/compare_probes.py "${runs[@]}" --out "$WORK/compare" || echo "compare_probes failed"
fi
tar czf "$FINAL_OUT/probe.tar.gz" -C "$WORK" .
