"""A committed probe variant (benchmarks/versions/*.patch) compiles without spills for each probe line that runs it."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from bench_support import load_benchmark_script

from tunetable.compile import compile_configs, main_function, parse_ptxas
from tunetable.kernels.families import FAMILIES

pytestmark = pytest.mark.nvcc

REPO = Path(__file__).resolve().parents[1]
VERSIONS = REPO / "benchmarks" / "versions"


def probe_lines_of(patch: Path) -> list[tuple[str, list[str]]]:
    """(probe file:line, arguments) of every probe line whose --source is the patch's variant."""
    variant = f"__PWD__/benchmarks/versions/{patch.with_suffix('.cu').name}"
    found = []
    for probe in sorted((REPO / "benchmarks" / "probes").glob("*.txt")):
        for number, line in enumerate(probe.read_text().splitlines(), start=1):
            if line.strip() and not line.startswith("#") and variant in line:
                found.append((f"{probe.name}:{number}", shlex.split(line)[1:]))
    return found


@pytest.mark.parametrize("patch", sorted(VERSIONS.glob("*.patch")), ids=lambda p: p.stem)
def test_a_committed_probe_variant_compiles_for_its_probe_lines(patch: Path, tmp_path: Path) -> None:
    copy = tmp_path / patch.name
    copy.write_text(patch.read_text())
    applied = subprocess.run([sys.executable, str(REPO / "scripts" / "apply_patch.py"), str(copy)],
                             capture_output=True, text=True, check=False)
    assert applied.returncode == 0, applied.stderr
    lines = probe_lines_of(patch)
    assert lines, f"{patch.name}: no probe line (benchmarks/probes/*.txt) runs its variant"
    runner = load_benchmark_script("gemm_vs_cublas")  # its explicit_config and NVCC_FLAGS are what a probe runs
    for where, args in lines:
        family = args[args.index("--family") + 1]
        flags = [args[i + 1] for i, arg in enumerate(args) if arg == "--nvcc-flag"]
        configs = [runner.explicit_config(family=family, text=args[i + 1]) for i, arg in enumerate(args)
                   if arg == "--config"]
        built = compile_configs(configs, kernel_path=copy.with_suffix(".cu"), flags=runner.NVCC_FLAGS + flags,
                                arch="sm_90a", cache_dir=tmp_path / "cubins", workers=2)
        for config in configs:
            result = built[config.id]
            assert result.status == "ok", f"{where}: {config.label()}: {result.error}"
            main = main_function(parse_ptxas(result.ptxas_log), entry=FAMILIES[family].entry)
            assert main is not None and main.spill_stores + main.spill_loads + main.stack_bytes == 0, \
                f"{where}: {config.label()} spills or uses stack: {main}"
