"""The consumers' k-loops of a table's grid, read from the SASS (no GPU): instructions, HGMMA and R2UR per loop.

Every configuration the table's grid keeps is compiled (tunetable's nvcc flags, a content-addressed cache), listed
with cuobjdump (tunetable.sass: the CUDA toolkit's, or PyPI's nvidia-cuda-cuobjdump) and its innermost loops that
issue HGMMA are counted, beside ptxas's registers and spill bytes for the configuration. A variant source (a probe's,
benchmarks/versions/*.cu) with its own defines reads the same way, so that a kernel change is seen in the
instructions and the spills before it is timed (benchmarks/notes_gemm_wgmma.md, v16).
Prints a table and writes benchmarks/results/sass_loops_<name>.md and .json.

    python benchmarks/sass_loops.py --table gemm_wgmma
    python benchmarks/sass_loops.py --table gemm_wgmma_swap \\
        --source benchmarks/versions/<probe>.cu --nvcc-flag=-D<SWITCH>=1 --name <probe>
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from tunetable.atomic import atomic_write_text  # noqa: E402
from tunetable.compile import build_records, compile_configs, family_entry, resolve_workers  # noqa: E402
from tunetable.errors import TuneTableError  # noqa: E402
from tunetable.grid import DeviceLimits, load_table_grid  # noqa: E402
from tunetable.sass import cubin_loop_stats, find_cuobjdump  # noqa: E402

OPCODES = ("HGMMA", "R2UR", "SYNCS")
CACHE = REPO / ".cache" / "cubins"


def config_label(*, params: dict[str, Any]) -> str:
    """The tunables as NAME=V/NAME=V, in the grid's order."""
    return "/".join(f"{name}={value}" for name, value in params.items())


def repo_relative(*, path: Path) -> str:
    """A path inside the repository relative to its root (reports stay the same on every machine), else absolute."""
    resolved = path.resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(resolved)


def loop_rows(*, cubin: Path, tool: Path) -> list[dict[str, int]]:
    """Each innermost HGMMA loop of one cubin: its instructions and the OPCODES counts."""
    return [{"instructions": stats.instructions, **{name.lower(): stats.count(name) for name in OPCODES}}
            for stats in cubin_loop_stats(cubin=cubin, tool=tool, issuing="HGMMA", opcodes=OPCODES)]


def summarise(*, configs: list[dict[str, Any]]) -> dict[str, Any]:
    """Over every configuration's k-loops: the mean instructions and R2UR per HGMMA; how many configurations spill."""
    per_hgmma = [(loop["instructions"] / loop["hgmma"], loop["r2ur"] / loop["hgmma"])
                 for config in configs for loop in config["loops"] if loop["hgmma"]]
    return {"configurations": len(configs), "loops": len(per_hgmma),
            "instructions_per_hgmma_mean": round(statistics.fmean(i for i, _ in per_hgmma), 2) if per_hgmma else None,
            "r2ur_per_hgmma_mean": round(statistics.fmean(r for _, r in per_hgmma), 3) if per_hgmma else None,
            "configurations_with_r2ur_in_a_k_loop": sum(any(loop["r2ur"] for loop in config["loops"])
                                                        for config in configs),
            "configurations_spilling": sum(bool(config.get("spill_bytes")) for config in configs)}


def render_markdown(*, report: dict[str, Any]) -> str:
    """The report as Markdown: the summary line, then one row per configuration and k-loop."""
    summary = report["summary"]
    out = [f"# k-loops in the SASS: {report['table']} ({report['source']} {' '.join(report['nvcc_flags'])})", "",
           f"{summary['configurations']} configurations, {summary['loops']} k-loops: "
           f"{summary['instructions_per_hgmma_mean']} instructions and {summary['r2ur_per_hgmma_mean']} R2UR per HGMMA "
           f"(mean over the loops); {summary['configurations_with_r2ur_in_a_k_loop']} configurations with an R2UR "
           f"in a k-loop; {summary['configurations_spilling']} configurations spill.", "",
           "| config | params | registers | spill bytes | instructions | HGMMA | R2UR | SYNCS |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for config in report["configs"]:
        for loop in config["loops"]:
            out.append(f"| {config['id']} | {config['params']} | {config.get('registers')} | "
                       f"{config.get('spill_bytes')} | {loop['instructions']} | {loop['hgmma']} | "
                       f"{loop['r2ur']} | {loop['syncs']} |")
    return "\n".join(out) + "\n"


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="a table of params.yaml (its grid and family)")
    parser.add_argument("--source", type=Path, help="a variant of the family's kernel [default: the family's own]")
    parser.add_argument("--nvcc-flag", action="append", default=[], help="an extra nvcc flag (use --nvcc-flag=-DX=1)")
    parser.add_argument("--name", help="the report's name [default: the table's]")
    parser.add_argument("--workers", type=int, default=None, help="nvcc processes [default: CPU count]")
    parser.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Compile the grid, count its k-loops, print and write the report."""
    args = build_parser().parse_args(argv)
    console = Console(width=160)
    tool = find_cuobjdump()
    if tool is None:
        print("sass_loops: cuobjdump not found (the CUDA toolkit's, or pip install nvidia-cuda-cuobjdump "
              "nvidia-cuda-nvdisasm)", file=sys.stderr)
        return 2
    try:
        grid = load_table_grid(params_path=REPO / "params.yaml", table=args.table)
        source = args.source or grid.kernel_path
        flags = [str(flag) for flag in (grid.params.get("compile") or {}).get("nvcc_flags") or []] + args.nvcc_flag
        configs = list(grid.result.kept)
        with console.status(f"compiling {len(configs)} configurations of {args.table}"):
            results = compile_configs(configs, kernel_path=source, flags=flags, arch=grid.spec.arch, cache_dir=CACHE,
                                      workers=resolve_workers(requested=args.workers, configured=None))
        failed = [config.id for config in configs if results[config.id].status != "ok"]
        if failed:
            raise TuneTableError(f"{len(failed)} configurations did not compile (first: {failed[0]})", path=source)
        records = build_records(configs, results=results, limits=DeviceLimits.from_params(grid.params),
                                entry=family_entry(grid.spec.family))
        rows = [{"id": config.id, "params": config_label(params=dict(config.params)),
                 "registers": record.registers, "spill_bytes": record.spill_bytes,
                 "loops": loop_rows(cubin=Path(results[config.id].cubin), tool=tool)}
                for config, record in zip(configs, records)]
    except TuneTableError as exc:
        print(f"sass_loops: {exc}", file=sys.stderr)
        return 2
    report = {"table": args.table, "source": repo_relative(path=Path(source)), "nvcc_flags": flags,
              "cuobjdump": repo_relative(path=tool),
              "summary": summarise(configs=rows), "configs": rows}
    names = "/".join(name for name, _ in configs[0].params) if configs else ""
    console.print(f"k-loops of {args.table}; values are {names}")
    table = Table()
    for column in ("config", "values", "registers", "spills", "instructions", "HGMMA", "R2UR"):
        table.add_column(column, no_wrap=True, justify="left" if column in ("config", "values") else "right")
    for config, row in zip(configs, rows):
        values = "/".join(str(value) for _, value in config.params)
        for loop in row["loops"]:
            table.add_row(row["id"], values, str(row["registers"]), str(row["spill_bytes"]), str(loop["instructions"]),
                          str(loop["hgmma"]), str(loop["r2ur"]))
    console.print(table)
    console.print(render_markdown(report=report).splitlines()[2])
    name = args.name or args.table
    out = args.out_dir / f"sass_loops_{name}"
    atomic_write_text(out.with_suffix(".md"), render_markdown(report=report))
    atomic_write_text(out.with_suffix(".json"), json.dumps(report, indent=1) + "\n")
    console.print(f"wrote {out.with_suffix('.md')} and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
