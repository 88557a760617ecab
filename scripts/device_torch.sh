#!/usr/bin/env bash
# Issue 50's GPU run, one device call: the new PyTorch-runtime tests, the Llama client, the host overhead
# through the torch operator, then the whole `pytest -m gpu` suite. Everything goes to $OUT/log.
#
#   cd <repo> && source scripts/device_env.sh && bash scripts/device_torch.sh [new|client|host|suite ...]
#   carry the repo copy with .whl/ and .cache/cubins (a cubin cache compiled here with the same nvcc).
set -uo pipefail
OUT=${OUT:-/tmp/tunetable-out}
mkdir -p "$OUT"
STEPS=${*:-new client host suite}
START=$(date +%s)   # the suite gets what is left of CALL_BUDGET_S (the device call's limit, less a margin)
export TUNETABLE_GIT_REV=${TUNETABLE_GIT_REV:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
  for step in $STEPS; do
    echo "== $step $(date -u +%H:%M:%S)"
    case $step in
      new) timeout ${NEW_TIMEOUT_S:-180} python3 -m pytest -m gpu tests/gpu/test_torch_gpu.py -x -q -p no:cacheprovider ;;
      client) timeout ${CLIENT_TIMEOUT_S:-300} python3 benchmarks/llama_client.py --out "$OUT" ;;
      host) timeout ${HOST_TIMEOUT_S:-90} python3 benchmarks/runtime_gemm.py --host-only --out "$OUT" ;;
      suite) left=$(( ${CALL_BUDGET_S:-570} - ($(date +%s) - START) ))
             if [ "$left" -lt 30 ]; then echo "suite skipped: ${left} s of the call's budget left"; else
               timeout "$left" python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider \
                 --ignore tests/gpu/test_torch_gpu.py; fi ;;
      *) echo "unknown step $step" ;;
    esac
    rc=$?
    echo "== $step done: rc $rc $(date -u +%H:%M:%S)"
  done
} 2>&1 | tee "$OUT/log"
