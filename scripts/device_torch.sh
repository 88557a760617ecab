#!/usr/bin/env bash
# Issue 50's GPU run, one device call of about 3-4 minutes (budget 300 s): the PyTorch-runtime GPU tests, the
# Llama client and the host overhead. Each step's output goes to $OUT/<step>.log and all of it to $OUT/log;
# the figures to $OUT (llama_client.json / .md, runtime_gemm_host.json / .md, new.xml); at the end all but log go
# into $OUT/results.tgz (the device tool returns only a few files).
#
#   cd <repo> && source scripts/device_env.sh && bash scripts/device_torch.sh [ext|new|client|host|tables|validation|
#                                                                             slowstate|suite ...]
#   carry the repo copy with .whl/ and .cache/cubins (a cubin cache compiled here with the same nvcc).
#
# Expected on an H100 / H200 (git 6adb683's run, plus this change's additions):
#   ext     builds the operator's C++ kernel (kernels/runtime/torch_fast.cpp) into the cache and prints whether it
#           loaded and its build time                      ~20 s  (limit EXT_TIMEOUT_S, 120)
#   new     tests/gpu/test_torch_gpu.py, 43 tests           ~60 s  (limit NEW_TIMEOUT_S, 120)
#   client  benchmarks/llama_client.py, fp32 reference too  ~70 s  (limit CLIENT_TIMEOUT_S, 150; needs ~50 GB)
#   host    benchmarks/runtime_gemm_host.py, 3 shapes       ~25 s  (limit HOST_TIMEOUT_S, 60)
#   tables  benchmarks/runtime_gemm.py --sets tables: tunetable.gemm on every table's 70 shapes with the GPU's own
#           tables, the other recorded device's choice beside it, the PyTorch operator, cuBLAS in the same rounds
#           (issue 49's figure; ~35 s on an H100 at b087676: limit TABLES_TIMEOUT_S, 240; rows are written as they come)
#   validation  benchmarks/runtime_gemm.py --sets validation: the 30 validation shapes (never tuned on): gemm() (the
#           selector's choice), the exhaustive best, online tuning, the PyTorch operator, cuBLAS
#           (~40 s on an H100 at 7d83673, online tuning included: limit VALIDATION_TIMEOUT_S, 180)
#   slowstate  benchmarks/runtime_slow_state.py at 250 x 18944 x 3584 (the H100's slow state, notes_gemm_wgmma.md):
#           the pick 256 x 176 and 256 x 144, each with RASTER 1 and 0, on every operand set in turn, the first set
#           timed again at the end; then the uniform set first (not timed yet: limit SLOWSTATE_TIMEOUT_S, 200 each; the
#           RASTER 0 twins compile on the device if the carried cubin cache lacks them)
# (scripts/device_env.sh's installs come before, ~10-20 s)
#   suite   the rest of `pytest -m gpu` (not a default step: ~180 s on its own; what is left of CALL_BUDGET_S)
set -uo pipefail
OUT=${OUT:-/tmp/tunetable-out}
mkdir -p "$OUT"
STEPS=${*:-ext new client host}
START=$(date +%s)   # the suite gets what is left of CALL_BUDGET_S (the device call's limit, less a margin)
export TUNETABLE_GIT_REV=${TUNETABLE_GIT_REV:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
  for step in $STEPS; do
    echo "== $step $(date -u +%H:%M:%S)"
    case $step in
      ext) command -v c++ g++ || echo "no c++ or g++ on PATH"
           timeout "${EXT_TIMEOUT_S:-120}" python3 -c 'import time; started = time.perf_counter()
import tunetable.torch
from tunetable.kernels.runtime import torch_ops
found = torch_ops.fast_path()
print(found["summary"])
print(f"import of tunetable.torch: {time.perf_counter() - started:.1f} s")' 2>&1 | tee "$OUT/ext.log" ;;
      new) timeout "${NEW_TIMEOUT_S:-120}" python3 -m pytest -m gpu tests/gpu/test_torch_gpu.py -q -p no:cacheprovider \
             -rs --junitxml "$OUT/new.xml" 2>&1 | tee "$OUT/new.log" ;;
      client) timeout "${CLIENT_TIMEOUT_S:-150}" python3 benchmarks/llama_client.py --out "$OUT" 2>&1 \
                | tee "$OUT/client.log" ;;
      host) timeout "${HOST_TIMEOUT_S:-60}" python3 benchmarks/runtime_gemm_host.py --out "$OUT" 2>&1 \
              | tee "$OUT/host.log" ;;
      tables) timeout "${TABLES_TIMEOUT_S:-240}" python3 benchmarks/runtime_gemm.py --sets tables --out "$OUT" 2>&1 \
                | tee "$OUT/tables.log" ;;
      validation) timeout "${VALIDATION_TIMEOUT_S:-180}" python3 benchmarks/runtime_gemm.py --sets validation \
                    --out "$OUT" 2>&1 | tee "$OUT/validation.log" ;;
      slowstate) c=BLOCK_K=64,STAGES=4,CONSUMERS=2,CLUSTER_M=1,CLUSTER_N=1,GROUP_M=8,SPLIT_K=1,TAIL_SPLIT=0
           args=(--family gemm_wgmma --shape 250x18944x3584 --out "$OUT")
           for tile in BLOCK_M=256,BLOCK_N=176 BLOCK_M=256,BLOCK_N=144; do for raster in 1 0; do
             args+=(--config "$tile,RASTER=$raster,$c"); done; done
           timeout "${SLOWSTATE_TIMEOUT_S:-200}" python3 benchmarks/runtime_slow_state.py "${args[@]}" 2>&1 \
             | tee "$OUT/slowstate.log"
           timeout "${SLOWSTATE_TIMEOUT_S:-200}" python3 benchmarks/runtime_slow_state.py "${args[@]}" --data uniform \
             --data randn --data "first set again" 2>&1 | tee "$OUT/slowstate_uniform_first.log" ;;
      suite) left=$(( ${CALL_BUDGET_S:-570} - ($(date +%s) - START) ))
             if [ "$left" -lt 30 ]; then echo "suite skipped: ${left} s of the call's budget left"; else
               timeout "$left" python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider \
                 --ignore tests/gpu/test_torch_gpu.py 2>&1 | tee "$OUT/suite.log"; fi ;;
      *) echo "unknown step $step" ;;
    esac
    rc=${PIPESTATUS[0]}
    echo "== $step done: rc $rc $(date -u +%H:%M:%S) ($(( $(date +%s) - START )) s since the start)"
  done
} 2>&1 | tee "$OUT/log"
# The device tool brings back about eight files from $OUT: everything but the log travels in one archive.
( cd "$OUT" && files=() && for f in *; do case $f in log|results.tgz) ;; *) [ -e "$f" ] && files+=("$f") ;; esac; done
  [ ${#files[@]} -gt 0 ] && tar czf results.tgz "${files[@]}" && rm -f "${files[@]}" )
