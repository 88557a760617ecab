"""Probe lines (benchmarks/probes/*.txt) are commands gemm_vs_cublas.py accepts, and a committed probe variant
(benchmarks/versions/*.patch, or the kernel of a prepared adoption, *.diff, that a probe line runs) compiles
without spills for each probe line that runs it."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest
from bench_support import load_benchmark_script, written_variant

from tunetable.compile import compile_configs, main_function, parse_ptxas
from tunetable.kernels.families import FAMILIES

REPO = Path(__file__).resolve().parents[1]
VERSIONS = REPO / "benchmarks" / "versions"


def probe_lines() -> list[tuple[str, list[str]]]:
    """(probe file:line, arguments after the run's name) of every probe line."""
    found = []
    for probe in sorted((REPO / "benchmarks" / "probes").glob("*.txt")):
        for number, line in enumerate(probe.read_text().splitlines(), start=1):
            if line.strip() and not line.startswith("#"):
                found.append((f"{probe.name}:{number}", shlex.split(line)[1:]))
    return found


def probe_lines_of(patch: Path) -> list[tuple[str, list[str]]]:
    """(probe file:line, arguments) of every probe line whose --source is the patch's variant."""
    variant = f"__PWD__/benchmarks/versions/{patch.with_suffix('.cu').name}"
    return [(where, args) for where, args in probe_lines() if variant in args]


def parse_probe_line(*, where: str, args: list[str]) -> argparse.Namespace:
    """The line as gemm_vs_cublas.py reads it; a line it would reject fails the test with its message."""
    parser = load_benchmark_script("gemm_vs_cublas").build_parser()
    parser.exit_on_error = False
    try:
        return parser.parse_args(args)
    except (argparse.ArgumentError, SystemExit) as error:  # unknown arguments still exit
        pytest.fail(f"{where}: gemm_vs_cublas.py rejects the line: {error}")


def test_a_probe_line_gemm_vs_cublas_rejects_fails_with_its_place() -> None:
    # The swap cluster probe's first run (2026-12-04) lost its variant line this way: "-D..." read as an option.
    with pytest.raises(pytest.fail.Exception, match="x.txt:3: .*--nvcc-flag: expected one argument"):
        parse_probe_line(where="x.txt:3", args=["--family", "gemm_wgmma_swap", "--nvcc-flag", "-DSWAP_CLUSTER_M=2"])


@pytest.mark.parametrize(("where", "args"), probe_lines(), ids=[where for where, _ in probe_lines()])
def test_every_probe_line_is_a_command_gemm_vs_cublas_accepts(where: str, args: list[str]) -> None:
    parsed = parse_probe_line(where=where, args=args)
    assert parsed.config or parsed.table, f"{where}: no --config and no --table: the run would time nothing"


NO_PATCH = pytest.param(None, id="none", marks=pytest.mark.skip(
    reason="no probe patch is committed (adopted ones live in their kernels, the others in git history)"))
# Every probe patch (each must have a probe line), and each prepared adoption whose kernel a probe line runs.
VARIANTS = sorted(VERSIONS.glob("*.patch")) + [diff for diff in sorted(VERSIONS.glob("*.diff")) if probe_lines_of(diff)]


@pytest.mark.nvcc
@pytest.mark.parametrize("patch", [pytest.param(p, id=p.stem) for p in VARIANTS] or [NO_PATCH])
def test_a_committed_probe_variant_compiles_for_its_probe_lines(patch: Path, tmp_path: Path) -> None:
    source = written_variant(patch=patch, folder=tmp_path)
    lines = probe_lines_of(patch)
    assert lines, f"{patch.name}: no probe line (benchmarks/probes/*.txt) runs its variant"
    runner = load_benchmark_script("gemm_vs_cublas")  # its explicit_config and NVCC_FLAGS are what a probe runs
    for where, line in lines:
        args = parse_probe_line(where=where, args=line)
        configs = [runner.explicit_config(family=args.family, text=text, check_rules=False) for text in args.config]
        built = compile_configs(configs, kernel_path=source, flags=runner.NVCC_FLAGS + args.nvcc_flag,
                                arch="sm_90a", cache_dir=tmp_path / "cubins", workers=2)
        for config in configs:
            result = built[config.id]
            assert result.status == "ok", f"{where}: {config.label()}: {result.error}"
            main = main_function(parse_ptxas(result.ptxas_log), entry=FAMILIES[args.family].entry)
            assert main is not None and main.spill_stores + main.spill_loads + main.stack_bytes == 0, \
                f"{where}: {config.label()} spills or uses stack: {main}"
