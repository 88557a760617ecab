#!/usr/bin/env bash
# Record every table of params.yaml on whichever Hopper GPU this runs on (made for the H100's first
# session, docs/devices.md): the device is recognised from what the driver reports (params.yaml
# `devices:`, kernels/families/devices.py) and names the recordings, <device>_<table> for the default
# shapes and <device>_<set>_<table> for data/<set>_shapes.csv (validation, coverage), as the H200's are named.
# An unrecognised GPU stops the script before any GPU time (add it to params.yaml `devices:` first).
#
#   TUNETABLE_GIT_REV=$(git rev-parse --short=12 HEAD) bash scripts/device_record_h100.sh
#   env: TABLES (default: every table of params.yaml), SETS ("default validation"; also "coverage"), BENCH_TIMEOUT_S per
#        table and set (device_session.sh's default); a device call lasts at most 10 minutes, so split a
#        full recording over calls with TABLES=... and SETS=... (the cubin cache makes the later ones cheap)
#   carry [".whl", ".cache/cubins"]: wheels for pycuda and friends, and a cubin cache compiled here
# Back from $OUT: device.txt (the device key, then the GPU as the driver reports it), the recordings (a .parquet
# and its .json per table and set), one logs archive (every table's session.log, summary.txt, build.log,
# bench.log), summary.txt.
set -uo pipefail
FINAL_OUT=${OUT:-/tmp/tunetable-out}
mkdir -p "$FINAL_OUT"
LOGS=/tmp/tunetable-record
mkdir -p "$LOGS"
source scripts/device_env.sh >>"$FINAL_OUT/summary.txt" 2>&1
DEVICE=$(python3 -c "
from tunetable.bench.devices import gpu_report, recognised_device
from tunetable.params import load_params
print(recognised_device(load_params('params.yaml')) or '', '|', gpu_report().describe())" 2>>"$FINAL_OUT/summary.txt")
KEY=${DEVICE%% |*}
echo "device: $DEVICE" | tee "$FINAL_OUT/device.txt"
if [ -z "$KEY" ]; then
  echo "this GPU is none of params.yaml's devices: add it under devices: (docs/devices.md)" | tee -a "$FINAL_OUT/summary.txt"
  exit 2
fi
TABLES=${TABLES:-$(python3 -c "from tunetable.params import load_params; print(' '.join(load_params('params.yaml')['tables']))")}
for set in ${SETS:-default validation}; do
  for table in $TABLES; do
    if [ "$set" = default ]; then rec="${KEY}_$table"; shapes=""
    else rec="${KEY}_${set}_$table"; shapes="data/${set}_shapes.csv"; fi
    # Another device than the primary measures its device table (gemm_mma.h100): its grid, with the groups
    # params.yaml gives that device only; `record` writes the rows under the base table's name.
    measured=$(python3 -c "from tunetable.device_tables import table_on_device; from tunetable.params import \
load_params; print(table_on_device(load_params('params.yaml'), base='$table', device='$KEY'))")
    OUT="$LOGS/$set/$table" TABLE="$measured" RECORDING="$rec" SHAPES_FILE="$shapes" \
      bash scripts/device_session.sh bench
    cp "$LOGS/$set/$table/$rec".parquet "$LOGS/$set/$table/$rec".json "$FINAL_OUT"/ \
      || echo "no recording for $table ($set)" | tee -a "$FINAL_OUT/summary.txt"
    rm -f "$LOGS/$set/$table/$rec".parquet "$LOGS/$set/$table/$rec".json "$LOGS/$set/$table/results.tar.gz"
    { echo "== $KEY $set $table"; cat "$LOGS/$set/$table/summary.txt"; } >>"$FINAL_OUT/summary.txt"
  done
done
tar czf "$FINAL_OUT/record_logs.tar.gz" -C "$LOGS" .
tail -n 40 "$FINAL_OUT/summary.txt"
