#!/usr/bin/env bash
# One H200 session of tunetable (run by the lead through the device tool, from the repo root):
#   install the carried wheels, grid + compile the table, pytest -m gpu, bench every configuration
#   x every default shape (+ cuBLAS baselines) with the cuda backend, export the recording.
# Every log lands under $OUT (at most 8 files come back: see the list at the end).
#
#   bash scripts/device_session.sh [all|tests|bench|trust]      (default: all)
#   trust = bench, then the same shards again in a separate process + benchmarks/bench_trust.py
#   env: TABLE (gemm_mma), RECORDING (h200_gemm_mma), SHAPES ("M,N,K M,N,K": instead of --all-shapes),
#        SHAPES_FILE (a CSV with an M,N,K header and '#' comments, e.g. data/validation_shapes.csv),
#        GPU_TESTS (pytest paths, default tests/gpu), TEST_TIMEOUT_S (300), BENCH_TIMEOUT_S (560),
#        FIGURES_CMD (a command run after the bench, writing under results/figures),
#        TUNETABLE_GIT_REV (the commit measured: the device's copy of the tree has no .git, so pass
#        TUNETABLE_GIT_REV=$(git rev-parse --short=12 HEAD) in the device command)
set -uo pipefail
STAGE=${1:-all}
TABLE=${TABLE:-gemm_mma}
RECORDING=${RECORDING:-h200_gemm_mma}
OUT=${OUT:-/tmp/tunetable-out}
mkdir -p "$OUT"
LOG="$OUT/session.log"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
note() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG" "$SUMMARY"; }
step() {  # step NAME LOGFILE CMD...: run, tee to its log, record the exit status
  local name=$1 logfile=$2; shift 2
  note "start $name: $*"
  local t0=$SECONDS
  "$@" 2>&1 | tee -a "$logfile" >>"$LOG"
  local rc=${PIPESTATUS[0]}
  note "end $name: rc=$rc in $((SECONDS - t0)) s"
  return "$rc"
}

source scripts/device_env.sh >>"$LOG" 2>&1
[ -n "${TUNETABLE_GIT_REV:-}" ] || note "WARNING: TUNETABLE_GIT_REV is not set: rows will say git_rev=unknown"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ nvidia-smi; nvidia-smi -q -d CLOCK,POWER,TEMPERATURE | head -80; nvcc --version; python3 --version;
  python3 -c "import pycuda, pynvml, pandas, pyarrow, yaml; print('pycuda', pycuda.VERSION_TEXT)"; } >>"$LOG" 2>&1

step grid "$OUT/build.log" python3 -m tunetable grid --table "$TABLE"
step compile "$OUT/build.log" python3 -m tunetable compile --table "$TABLE" --workers "$(nproc)"

if [ "$STAGE" = all ] || [ "$STAGE" = tests ]; then
  step pytest-gpu "$OUT/pytest_gpu.log" timeout "${TEST_TIMEOUT_S:-300}" \
    python3 -m pytest -m gpu -p no:cacheprovider -q -rA ${GPU_TESTS:-tests/gpu}
fi

if [ -n "${SHAPES_FILE:-}" ]; then
  SHAPES=$(grep -v '^#' "$SHAPES_FILE" | tail -n +2 | tr -d ' \r' | tr '\n' ' ')
fi
if [ -n "${SHAPES:-}" ]; then
  SHAPE_ARGS=(); for s in $SHAPES; do SHAPE_ARGS+=(--shape "$s"); done
else
  SHAPE_ARGS=(--all-shapes)
fi
content_key() {
  python3 -c "
from tunetable.params import load_params, table_spec
from tunetable.measurement_plan import shard_key
p = load_params('params.yaml'); print(shard_key(p, table_spec(p, '$TABLE'), 'cuda'))"
}

measured_shards() {  # the shard files of this call's shapes (SHAPES, or the table's in params.yaml) that exist
  python3 -c "
import sys
from tunetable.params import load_params, table_spec
from tunetable.paths import raw_shard
spec = table_spec(load_params('params.yaml'), '$TABLE')
given = [tuple(int(v) for v in s.split(',')) for s in sys.argv[2:]]
for m, n, k in given or spec.shapes():
    path = raw_shard('$TABLE', sys.argv[1], m, n, k)
    if path.exists():
        print(path)
" "$1" ${SHAPES:-}
}

if [ "$STAGE" = all ] || [ "$STAGE" = bench ] || [ "$STAGE" = trust ]; then
  step bench "$OUT/bench.log" timeout "${BENCH_TIMEOUT_S:-560}" \
    python3 -m tunetable bench --table "$TABLE" --backend cuda "${SHAPE_ARGS[@]}"
  KEY=$(content_key)
  note "content key $KEY"
  # This call's shapes only: a warm machine keeps the shards of an earlier call under the same key.
  mapfile -t SHARDS < <(measured_shards "$KEY")
  note "${#SHARDS[@]} shards measured"
  if [ "${#SHARDS[@]}" -gt 0 ]; then
    step record "$OUT/bench.log" python3 -m tunetable record --table "$TABLE" --name "$RECORDING" "${SHARDS[@]}"
    cp data/recordings/"$RECORDING".parquet data/recordings/"$RECORDING".json "$OUT"/ 2>>"$LOG"
  fi
fi

if [ "$STAGE" = trust ]; then
  # The same shards measured again in a separate process: winner agreement and relative IQR
  # (benchmarks/bench_trust.py); the rerun and its figures travel in results.tar.gz (results/rerun).
  mkdir -p results/rerun && cp -r results/grid results/compile results/rerun/
  step bench-rerun "$OUT/bench.log" timeout "${BENCH_TIMEOUT_S:-560}" \
    python3 -m tunetable bench --table "$TABLE" --backend cuda "${SHAPE_ARGS[@]}" --results-root results/rerun
  step record-rerun "$OUT/bench.log" python3 -m tunetable record --table "$TABLE" --name "${RECORDING}_rerun" \
    --out-dir results/rerun/recordings results/rerun/raw/"$TABLE"/"$(content_key)"/*.pkl
  step trust "$SUMMARY" python3 benchmarks/bench_trust.py data/recordings/"$RECORDING".parquet \
    results/rerun/recordings/"${RECORDING}_rerun".parquet --out results/rerun/bench_trust.json
fi

if [ -n "${FIGURES_CMD:-}" ]; then
  # Benchmark figures measured in the same call (e.g. benchmarks/gemm_vs_cublas.py --out results/figures);
  # they travel in results.tar.gz.
  mkdir -p results/figures
  step figures "$OUT/bench.log" bash -c "$FIGURES_CMD"
fi

tar czf "$OUT/results.tar.gz" results/grid results/compile results/raw results/rerun results/figures 2>>"$LOG"
note "files: $(cd "$OUT" && ls | tr '\n' ' ')"
# Back from $OUT (<= 8 files): session.log (device facts first) summary.txt build.log pytest_gpu.log bench.log
#   results.tar.gz and the recording (RECORDING.parquet + .json) when the bench ran.
