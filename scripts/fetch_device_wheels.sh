#!/usr/bin/env bash
# Fill .whl/ (git-ignored) with what the H200 machine (Python 3.12, no registry) needs beyond its image:
# pycuda and its dependencies (built there, from ../shared/wheels), the jsonschema set (params.yaml
# validation) and kernel_tuner (benchmarks/kt_vs_tunetable.py). Keep one version of each package.
# Then call the device tool with carry [".whl"] and start the command with
#   source scripts/device_env.sh   (the wheels and tunetable itself into /tmp/site)
# KT=0 leaves kernel_tuner and python-constraint2 (8.8 MB) out: the device tool carries at most 64 MiB, and the
# tracked files (27 MiB) with a cubin cache of every grid (28 MiB) and all wheels (11 MiB) are over it.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || grep -qx '/.whl/' .gitignore || echo /.whl/ >>.git/info/exclude
cp "${SHARED_WHEELS:-../shared/wheels}"/*.whl .whl/
KERNEL_TUNER=(kernel_tuner==1.5.0 python-constraint2==2.9.0 xmltodict==1.0.4)
[ "${KT:-1}" = 0 ] && KERNEL_TUNER=() && rm -f .whl/kernel_tuner-*.whl .whl/python_constraint2-*.whl .whl/xmltodict-*.whl
for pkg in jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 \
           "${KERNEL_TUNER[@]}"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$pkg"
done
ls .whl
