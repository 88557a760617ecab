"""``tunetable compile``: nvcc every configuration of a table (parallel, cached), write results/compile/T.json."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tunetable import paths
from tunetable.atomic import atomic_write_text
from tunetable.compile import (
    CompileRecord,
    CompileResult,
    build_records,
    compile_configs,
    compile_document,
    family_entry,
    resolve_workers,
)
from tunetable.config import KernelConfig
from tunetable.console_table import ConsoleTable, print_table
from tunetable.errors import TuneTableError
from tunetable.grid import DeviceLimits, load_table_grid
from tunetable.keys import kernel_source_hash, nvcc_version

EPILOG = """\b
Examples:
  tunetable compile --table gemm_mma
  tunetable compile --table gemm_mma --workers 8 --filter BLOCK_M=128
  TUNETABLE_COMPILE_WORKERS=4 tunetable compile --table gemm_mma
"""


def _text(value: object) -> str:
    """A table cell: '-' for missing values."""
    return "-" if value is None else str(value)


def summary_table(records: list[CompileRecord], *, title: str) -> ConsoleTable:
    """Per-configuration status, resources and compile time."""
    table = ConsoleTable(title=title)
    table.add_column("config id")
    table.add_column("status")
    for column in ("regs", "smem B", "spill B", "stack B", "sec"):
        table.add_column(column, justify="right")
    table.add_column("note")
    for record in records:
        note = record.reason or (record.error.splitlines()[0] if record.error else "")
        if record.cached and not note:
            note = "cached"
        table.add_row(
            record.config_id, record.status, _text(record.registers), _text(record.smem_bytes),
            _text(record.spill_bytes), _text(record.stack_bytes), _text(record.compile_s), note,
        )
    return table


@click.command(epilog=EPILOG)
@click.option("--table", "table_name", required=True, help="Table declared under 'tables:' in params.yaml.")
@click.option("--params", "params_path", default="params.yaml", show_default=True, type=click.Path(dir_okay=False))
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Parallel nvcc processes [default: $TUNETABLE_COMPILE_WORKERS, compile.workers, "
                   "else the CPU count].")
@click.option("--param", "param_options", multiple=True, metavar="NAME=V1,V2",
              help="Replace NAME's value list in every group that has it (repeatable).")
@click.option("--filter", "filter_options", multiple=True, metavar="NAME=VALUE",
              help="Keep configurations with NAME=VALUE (repeatable).")
@click.option("--no-cache", is_flag=True, help="Recompile everything (the fresh results still go into the cache).")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Report to write [default: results/compile/<table>.json].")
def command(
    table_name: str,
    params_path: str,
    workers: int | None,
    param_options: tuple[str, ...],
    filter_options: tuple[str, ...],
    no_cache: bool,
    out: str | None,
) -> None:
    """Compile every configuration of a table to a cubin; never touches the GPU."""
    console = Console()
    grid = load_table_grid(
        params_path=params_path, table=table_name, param_options=param_options, filter_options=filter_options
    )
    if shutil.which("nvcc") is None:
        raise TuneTableError("nvcc not found on PATH (install the CUDA toolkit to compile)", where="compile")
    if not grid.kernel_path.is_file():
        raise TuneTableError("kernel source not found", path=grid.kernel_path, where=f"tables.{table_name}.kernel")
    settings = dict(grid.params.get("compile") or {})
    flags = [str(flag) for flag in settings.get("nvcc_flags") or []]
    cache_dir = grid.root / str(settings.get("cache_dir") or ".cache/cubins")
    pool_size = resolve_workers(requested=workers, configured=settings.get("workers"))
    configs = list(grid.result.kept)
    statuses: Counter[str] = Counter()

    with Progress(
        TextColumn("[bold]compile {task.fields[table]}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[summary]}"), TimeElapsedColumn(), console=console, transient=False,
    ) as progress:
        task = progress.add_task("compile", total=len(configs), table=table_name, summary="")

        def advance(config: KernelConfig, result: CompileResult) -> None:
            """Count one compile result by status and advance the progress bar."""
            statuses["cached" if result.cached else result.status] += 1
            progress.update(task, advance=1, summary=" ".join(f"{k}={v}" for k, v in sorted(statuses.items())))

        results = compile_configs(
            configs, kernel_path=grid.kernel_path, flags=flags, arch=grid.spec.arch, cache_dir=cache_dir,
            workers=pool_size, use_cache=not no_cache, on_result=advance,
        )
    records = build_records(
        configs, results=results, limits=DeviceLimits.from_params(grid.params), entry=family_entry(grid.spec.family),
        grid_pruned=grid.result.pruned, relative_to=grid.root,
    )
    document = compile_document(
        records, table=table_name, kernel_hash=kernel_source_hash(grid.kernel_path), nvcc=nvcc_version(),
        arch=grid.spec.arch, flags=flags,
    )
    target = Path(out) if out else paths.compile_report(table_name)
    atomic_write_text(target, json.dumps(document, indent=1) + "\n")
    counts = Counter(record.status for record in records)
    print_table(console, summary_table(records, title=f"compile {table_name} ({pool_size} workers)"))
    console.print(
        f"wrote {target}: " + ", ".join(f"{counts[status]} {status}" for status in ("ok", "build", "pruned"))
    )
