"""``tunetable select``: winners of a ranked table into manifests/<table>.yaml (byte-stable)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from pipeline.atomic import atomic_write_text
from pipeline.errors import TuneTableError


def _table_settings(params_path: Path, table: str) -> tuple[str, float]:
    """The table's kernel family and select.tie_tolerance from params.yaml (defaults when absent)."""
    from pipeline.params import load_params, table_spec
    from pipeline.select import DEFAULT_TIE_TOLERANCE

    if not params_path.is_file():
        return table, DEFAULT_TIE_TOLERANCE
    params = load_params(params_path)
    spec = table_spec(params, table, path=params_path)
    return spec.family, float((params.get("select") or {}).get("tie_tolerance", DEFAULT_TIE_TOLERANCE))


@click.command("select")
@click.option("--table", required=True, help="Table name (as in params.yaml).")
@click.option("--ranked", "ranked_path", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="Manifest YAML to write.")
@click.option("--tie-tolerance", type=float, default=None, help="Relative near-tie tolerance (default: params.yaml).")
@click.option("--params", "params_path", type=click.Path(dir_okay=False, path_type=Path), default=Path("params.yaml"),
              show_default=True)
def command(table: str, ranked_path: Path, out: Path, tie_tolerance: float | None, params_path: Path) -> None:
    """Per (N, K), the fastest ok config per M range, near-ties going to the config winning more neighbours."""
    from pipeline.rank import read_ranked
    from pipeline.select import build_manifest

    kernel, tolerance = _table_settings(params_path, table)
    if tie_tolerance is not None:
        tolerance = tie_tolerance
    if tolerance < 0:
        raise TuneTableError(f"tie tolerance must be >= 0, got {tolerance}", where="--tie-tolerance")
    ranked = read_ranked(path=ranked_path, required=("M", "N", "K", "config_id", "median_ms", "status"))
    text = build_manifest(table=table, kernel=kernel, ranked=ranked, tolerance=tolerance)
    if "params:\n  - " not in text:
        raise TuneTableError("no ok configuration to select", path=ranked_path)
    atomic_write_text(out, text)
    Console(stderr=True, soft_wrap=True).print(f"wrote {out} ({text.count('<<: *defaults')} entries)", markup=False)
