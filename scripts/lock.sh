#!/usr/bin/env bash
# Refresh the lock files: one hash-pinned requirements file per supported Python (3.11: this project's CPU
# machines and CI; 3.12: the GPU machine), covering pyproject.toml's dev, slurm and docs extras. uv resolves
# for a Python version that need not be installed here (`--python-version`), so both files come from one
# machine. Review the diff, run the tests from a fresh venv (docs/setup.md), then commit requirements/.
#   bash scripts/lock.sh            # keep every pin that still satisfies pyproject.toml, add what is new
#   bash scripts/lock.sh --upgrade  # take the newest versions pyproject.toml allows
set -euo pipefail
cd "$(dirname "$0")/.."
command -v uv >/dev/null || python3 -m pip install -q 'uv>=0.5,<1'
for version in 3.11 3.12; do
    out="requirements/lock-py${version/./}.txt"
    uv pip compile pyproject.toml --extra dev --extra slurm --extra docs --generate-hashes \
        --python-version "$version" --python-platform x86_64-unknown-linux-gnu --no-header \
        --custom-compile-command "bash scripts/lock.sh" "$@" -o "$out" --quiet
    echo "wrote $out ($(grep -c '==' "$out") packages, Python $version, Linux x86_64)"
done
