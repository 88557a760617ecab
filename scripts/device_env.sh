#!/usr/bin/env bash
# Sourced by the device scripts (from the repo root): the carried wheels (.whl/, from
# scripts/fetch_device_wheels.sh) and tunetable itself (a regular, non-editable install: the one
# top-level name `tunetable`) go to /tmp/site; the repo root stays on the path for benchmarks/.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
  || echo "device_env: wheel install failed"
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site . \
  || echo "device_env: tunetable install failed"
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
# tunetable.gemm compiles into the project's cubin cache, where `tunetable compile` put the same keys.
export TUNETABLE_CUBIN_CACHE=$PWD/.cache/cubins
# The tunetable::gemm operator's C++ kernel, built on the first import of tunetable.torch, is cached here.
export TUNETABLE_TORCH_EXT_CACHE=$PWD/.cache/torch_ext
