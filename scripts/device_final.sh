#!/usr/bin/env bash
# One H200 call that checks and measures everything the CPU side cannot:
#   pytest -m gpu (kernel correctness, harness failure classes, runtime dispatch),
#   a second full-table measurement in a separate process (winner agreement and relative IQR
#   against the committed recording: benchmarks/bench_trust.py),
#   and the tuning-speed comparison with Kernel Tuner (benchmarks/kt_vs_tunetable.py).
# Run from the repo root through the device tool with carry [".whl"]; logs land under $OUT
# (8 files at most come back).
set -uo pipefail
OUT=${OUT:-/tmp/tunetable-out}
TABLE=gemm_mma
mkdir -p "$OUT"
source scripts/device_env.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }

{ stamp start; nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
  python3 -m tunetable grid --table "$TABLE" >/dev/null && stamp grid ok
  python3 -m tunetable compile --table "$TABLE" --workers "$(nproc)" | tail -3; stamp compile done; } \
  >"$OUT/bench.log" 2>&1

stamp "pytest -m gpu" >>"$OUT/bench.log"
timeout "${TEST_TIMEOUT_S:-240}" python3 -m pytest -m gpu -p no:cacheprovider -q -rA tests/gpu \
  >"$OUT/pytest_gpu.log" 2>&1
echo "pytest rc=$?" >>"$OUT/pytest_gpu.log"

# Second full measurement: its own results root, so nothing from the first run is reused.
mkdir -p results/rerun && cp -r results/grid results/compile results/rerun/
{ stamp "bench rerun"
  timeout "${BENCH_TIMEOUT_S:-200}" python3 -m tunetable bench --table "$TABLE" --backend cuda --all-shapes \
    --results-root results/rerun
  KEY=$(python3 -c "
from tunetable.params import load_params, table_spec
from tunetable.measurement_plan import shard_key
p = load_params('params.yaml'); print(shard_key(p, table_spec(p, '$TABLE'), 'cuda'))")
  python3 -m tunetable record --table "$TABLE" --name h200_gemm_mma_rerun --out-dir "$OUT" \
    results/rerun/raw/"$TABLE"/"$KEY"/*.pkl
  python3 benchmarks/bench_trust.py data/recordings/h200_gemm_mma.parquet "$OUT/h200_gemm_mma_rerun.parquet" \
    --out "$OUT/bench_trust.json"
  stamp "bench rerun done"; } >>"$OUT/bench.log" 2>&1

stamp "kt_vs_tunetable" >>"$OUT/bench.log"
timeout "${KT_TIMEOUT_S:-420}" python3 benchmarks/kt_vs_tunetable.py --out "$OUT" >"$OUT/kt.log" 2>&1
echo "kt rc=$?" >>"$OUT/kt.log"
stamp end >>"$OUT/bench.log"
tail -n 25 "$OUT/pytest_gpu.log"; tail -n 30 "$OUT/bench.log"; tail -n 30 "$OUT/kt.log"
