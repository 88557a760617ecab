#!/usr/bin/env bash
# One H200 call for issue 20 (every shape a user has), under 9 minutes on one GPU:
#   pytest -m gpu tests/gpu/test_selector_gpu.py  (gemm() on the 30 validation shapes, correct and warning
#       once where no table holds the shape; online tuning among the selector's top 8, cached, read back),
#   benchmarks/runtime_gemm.py --sets validation  (gemm() untuned / exhaustive best / online-tuned / cuBLAS),
#   benchmarks/tune_new_shapes.py                 (24 new shapes: budgeted search vs exhaustive, wall time).
# Run from the repo root through the device tool with carry [".whl", ".cache/cubins"] (the cubin cache
# saves compiling both grids there); logs and figures land under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/tunetable-out}
mkdir -p "$OUT"
source scripts/device_env.sh
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }

{ stamp start; nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
  for table in gemm_mma gemm_wgmma; do
    python3 -m tunetable grid --table "$table" >/dev/null && stamp "grid $table ok"
    python3 -m tunetable compile --table "$table" --workers "$(nproc)" | tail -2
  done
  stamp compile done; } >"$OUT/setup.log" 2>&1

stamp "pytest -m gpu tests/gpu/test_selector_gpu.py" >>"$OUT/setup.log"
timeout "${TEST_TIMEOUT_S:-150}" python3 -m pytest -m gpu -p no:cacheprovider -q -rA tests/gpu/test_selector_gpu.py \
  >"$OUT/pytest_gpu_selector.log" 2>&1
echo "pytest rc=$?" >>"$OUT/pytest_gpu_selector.log"

stamp "runtime_gemm validation" >>"$OUT/setup.log"
timeout "${RUNTIME_TIMEOUT_S:-120}" python3 benchmarks/runtime_gemm.py --sets validation --rounds 5 --out "$OUT" \
  >"$OUT/runtime_gemm_validation.log" 2>&1
echo "runtime_gemm rc=$?" >>"$OUT/runtime_gemm_validation.log"

stamp "tune_new_shapes" >>"$OUT/setup.log"
timeout "${TUNE_TIMEOUT_S:-330}" python3 benchmarks/tune_new_shapes.py --out "$OUT" >"$OUT/tune_new_shapes.log" 2>&1
echo "tune_new_shapes rc=$?" >>"$OUT/tune_new_shapes.log"
stamp end >>"$OUT/setup.log"
tail -n 8 "$OUT/pytest_gpu_selector.log"; tail -n 6 "$OUT/runtime_gemm_validation.log"; tail -n 4 "$OUT/tune_new_shapes.log"
tail -n 12 "$OUT/setup.log"
