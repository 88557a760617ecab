#!/usr/bin/env bash
# Fill .devpkgs/ (git-ignored) for device runs that need polars (benchmarks/tune_new_shapes.py: a
# seed_from_selector search ranks the recordings with polars). The H200 machine has no polars and no
# registry, and polars 2.x's wheels (55 MB) with .whl/ and the tree pass the 64 MiB a call carries, so the
# package installed in .venv (abi3: it runs on the device's Python 3.12) travels as an xz archive (33 MB),
# beside .whl/'s wheels without kernel_tuner's. Run scripts/fetch_device_wheels.sh first. Then:
#   carry [".devpkgs"], and begin the command with
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .devpkgs/*.whl &&
#   tar xJf .devpkgs/polars.tar.xz -C /tmp/site && python3 -m pip install -q --no-index --no-deps
#   --no-build-isolation --no-compile --target /tmp/site . && export PYTHONPATH=/tmp/site:$PWD
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.devpkgs/' .git/info/exclude 2>/dev/null || echo /.devpkgs/ >>.git/info/exclude
site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
rm -rf .devpkgs && mkdir -p .devpkgs
archive=$PWD/.devpkgs/polars.tar.xz
(cd "$site" && tar cJf "$archive" --exclude=__pycache__ \
  polars polars-*.dist-info _polars_runtime_32 polars_runtime_32-*.dist-info)
for wheel in .whl/*.whl; do
  case "$(basename "$wheel")" in kernel_tuner-*|python_constraint2-*|xmltodict-*) ;; *) cp "$wheel" .devpkgs/ ;; esac
done
du -sh .devpkgs
