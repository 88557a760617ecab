"""``tunetable shapes import``: a workload's GEMM shapes (CSV or PyTorch profiler trace) as ``M,N,K,count`` rows."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console

from tunetable.atomic import atomic_write_text
from tunetable.shapes import csv_text, read_workload

EPILOG = """\b
Examples:
  tunetable shapes import trace.json --out shapes/llama.csv   a torch.profiler chrome trace
                                                              (record_shapes=True)
  tunetable shapes import shapes.csv                          M,N,K[,count] rows, to stdout
  tunetable shapes import recorded.csv --out shapes/mine.csv  what TUNETABLE_RECORD_SHAPES=recorded.csv
                                                              recorded while a model ran
Then: `tunetable suggest --shapes shapes/llama.csv` (what runs untuned), or a table's
`shapes: {list: shapes/llama.csv}` in params.yaml to tune exactly those shapes.
"""


@click.group("shapes")
def command() -> None:
    """A workload's GEMM shapes."""


@command.command("import", epilog=EPILOG)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="CSV to write (M,N,K,count; sorted by N, K, M; duplicates summed) [default: stdout].")
def import_command(file: Path, out: Path | None) -> None:
    """Read FILE (M,N,K[,count] CSV, or a PyTorch profiler trace .json) and write its shapes as M,N,K,count."""

    shapes = read_workload(file)   # any bad row or event: one error line, nothing written
    text = csv_text(shapes)
    if out is None:
        sys.stdout.write(text)
    else:
        atomic_write_text(out, text)
    total = sum(s.count for s in shapes)
    where = f"wrote {out}" if out is not None else "wrote stdout"
    Console(stderr=True, soft_wrap=True).print(f"{where}: {len(shapes)} shapes, {total} GEMM calls from {file}",
                                               markup=False)
