"""``tunetable kt export`` / ``tunetable kt import``: our measurements as Kernel Tuner caches, and theirs as shards."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from tunetable.console_table import ConsoleTable, print_table
from tunetable.errors import TuneTableError
from tunetable.numbers import number_cell
from tunetable.atomic import atomic_write_text
from tunetable.inputs import finite_number, inside, safe_name
from tunetable.params import load_params, table_spec
from tunetable.paths import shape_name
from tunetable.results import write_shard
from tunetable.search.kt_interop import (
    IMPORTED_BACKEND,
    INVALID,
    entry_error,
    cache_file_name,
    kt_cache_documents,
    load_rows,
    parameter_names,
    read_kt_cache,
    rows_from_kt_cache,
)
from tunetable.search.replay import grid_parameter_names

EPILOG = """\b
Examples:
  tunetable kt export --table gemm_mma --out results/kt/gemm_mma
      one Kernel Tuner cache per shape from the table's recording (or --from FILE...), each with
      the tune_params and the restriction that make simulation mode search exactly what we measured
  tunetable kt import kt_runs/*.json --table gemm_mma
      Kernel Tuner caches as shards (results/imported/gemm_mma/), ranked by the median of `times`
"""

USAGE = """\
Kernel Tuner (simulation mode, any strategy):
    import json, kernel_tuner
    cache = json.load(open(FILE))
    results, env = kernel_tuner.tune_kernel(cache["kernel_name"], "", tuple(cache["problem_size"]), [],
        cache["tune_params"], restrictions=cache["restrictions"], cache=FILE, simulation_mode=True,
        strategy="brute_force")"""


# Summaries print at most this many shapes (the first and the last half); index.json / the shards hold all.
SHOWN_SHAPES = 20


def bounded_positions(*, count: int) -> set[int]:
    """The positions of a summary's rows that are printed: all of them, or the first and last SHOWN_SHAPES / 2."""
    if count <= SHOWN_SHAPES:
        return set(range(count))
    half = SHOWN_SHAPES // 2
    return set(range(half)) | set(range(count - half, count))


@click.group("kt", epilog=EPILOG)
def command() -> None:
    """Exchange measurements with Kernel Tuner (JSON cache files, simulation mode)."""


def _table_rows(*, table: str, params_path: Path, sources: tuple[Path, ...]) -> tuple[list[dict], str, list[str]]:
    """The table's rows (its recording, or ``sources``), its family and its tunables in grid order."""

    spec = table_spec(load_params(params_path), table, path=params_path)
    files = list(sources) or [Path(params_path).parent / spec.recording]   # params.yaml's paths are its folder's
    rows: list[dict] = []
    for path in files:
        found = load_rows(path)
        rows += [r for r in found if r.get("table", table) == table]
        if found and not any(r.get("table", table) == table for r in found):
            raise TuneTableError(f"no row of table {table} (its rows are of {found[0].get('table')})", path=path)
    if not rows:
        raise TuneTableError("no rows to export", path=files[0])
    names = grid_parameter_names(spec.grid) or [c for c in parameter_names(list(rows[0])) if c not in ("M", "N", "K")]
    absent = [name for name in names if name not in rows[0]]
    if absent:
        raise TuneTableError(f"rows lack the grid's parameter {absent[0]}", path=files[0])
    return rows, spec.family, names


@command.command("export", epilog=EPILOG)
@click.option("--table", required=True, help="Table declared in params.yaml.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the caches (one <table>_M<m>_N<n>_K<k>.json per shape) and index.json.")
@click.option("--from", "sources", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Recordings (.parquet) or raw shards (.pkl) to export [default: the table's recording].")
@click.option("--params", "params_path", default=Path("params.yaml"), show_default=True,
              type=click.Path(dir_okay=False, path_type=Path))
def export_command(table: str, out_dir: Path, sources: tuple[Path, ...], params_path: Path) -> None:
    """Write one Kernel Tuner cache per shape: tune_params, a restriction to what was measured, every sample."""

    rows, family, names = _table_rows(table=table, params_path=params_path, sources=sources)
    documents = kt_cache_documents(rows, names=names, kernel_name=family)
    console = Console(soft_wrap=True)
    summary = ConsoleTable(title=f"{table}: {len(documents)} Kernel Tuner caches in {out_dir}/ "
                                 f"(index.json lists every shape and its best)")
    for column in ("M", "N", "K", "configurations", "failed", "best config", "best median ms", "file"):
        summary.add_column(column, justify="right" if column in ("M", "N", "K", "configurations", "failed",
                                                                    "best median ms") else "left")
    index = []
    shown = bounded_positions(count=len(documents))
    for position, (shape, document) in enumerate(documents.items()):
        name = cache_file_name(table=table, shape=shape)
        inside(out_dir / name, folder=out_dir)
        # indent="" is Kernel Tuner's own layout; "cache" stays last (its reader looks for the closing "}\n}").
        atomic_write_text(out_dir / name, json.dumps(document, indent="") + "\n")
        measured = [e for e in document["cache"].values() if isinstance(e.get("time"), float)]
        best = min(measured, key=lambda e: (e["time"], e["tunetable_config_id"])) if measured else None
        index.append({"problem_size": list(shape), "file": name, "configurations": len(document["cache"]),
                      "best": None if best is None else {"config_id": best["tunetable_config_id"],
                                                         "params": {n: best[n] for n in names},
                                                         "median_ms": best["time"]}})
        if position in shown:
            summary.add_row(*shape, len(document["cache"]), len(document["cache"]) - len(measured),
                            best["tunetable_config_id"] if best else "-", _ms(best["time"] if best else None), name)
        elif position == SHOWN_SHAPES // 2:
            summary.add_gap(len(documents) - len(shown))
    atomic_write_text(out_dir / "index.json", json.dumps(
        {"table": table, "kernel_name": family, "tune_params_keys": names,
         "tune_params": next(iter(documents.values()))["tune_params"], "shapes": index}, indent=1) + "\n")
    print_table(console, summary)
    console.print(USAGE.replace("FILE", f'"{out_dir / index[0]["file"]}"'), markup=False, highlight=False)


@command.command("import", epilog=EPILOG)
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--table", default=None, help="Table declared in params.yaml (its family names the configurations).")
@click.option("--family", default=None, help="Kernel family, when the table is not declared in params.yaml.")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the shards [default: results/imported/<table or family>/].")
@click.option("--params", "params_path", default=Path("params.yaml"), show_default=True,
              type=click.Path(dir_okay=False, path_type=Path))
def import_command(files: tuple[Path, ...], table: str | None, family: str | None, out_dir: Path | None,
                   params_path: Path) -> None:
    """Read Kernel Tuner caches into shards (one per shape) ranked by the median of each entry's `times`."""

    if (table is None) == (family is None):
        raise TuneTableError("give --table (declared in params.yaml) or --family, one of them", where="kt import")
    if table is not None:

        family = table_spec(load_params(params_path), table, path=params_path).family
    name = safe_name(table or str(family), what="table or family", path=None, where="--table/--family")
    target = out_dir or Path("results") / "imported" / name
    by_shape: dict[tuple[int, int, int], list[dict[str, Any]]] = {}
    sources: dict[tuple[int, int, int], tuple[str, list[str], dict[tuple, float]]] = {}
    without_times = 0
    for path in files:
        rows = rows_from_kt_cache(path, family=str(family))
        document = read_kt_cache(path)
        names = list(document["tune_params_keys"])
        # rows_from_kt_cache checked every entry but the InvalidConfig ones (skipped here too).
        means = {tuple(e[n] for n in names): float(e["time"]) for e in document["cache"].values()
                 if finite_number(e.get("time")) and entry_error(e) != INVALID}
        without_times += sum(1 for e in document["cache"].values()
                             if isinstance(e.get("time"), (int, float)) and not e.get("times"))
        for shape in {(r["M"], r["N"], r["K"]) for r in rows}:
            if shape in sources:
                raise TuneTableError(f"shape M={shape[0]} N={shape[1]} K={shape[2]} is also in {sources[shape][0]}",
                                     path=path)
            sources[shape] = (str(path), names, means)
        for row in rows:
            by_shape.setdefault((row["M"], row["N"], row["K"]), []).append(row)
    console = Console(soft_wrap=True)
    summary = ConsoleTable(title=f"{name}: {len(by_shape)} shapes from {len(files)} Kernel Tuner caches "
                                 f"into {target}/ (ranked by the median of `times`)")
    for column in ("M", "N", "K", "entries", "failed", "best config", "median ms", "KT mean ms", "samples"):
        summary.add_column(column, justify="left" if column == "best config" else "right")
    shown = bounded_positions(count=len(by_shape))
    # Shard names come from the checked int32 shapes only; each must land in the output folder (checked
    # for all before the first is written).
    shard_paths = {shape: inside(target / f"{shape_name(*shape)}.pkl", folder=target) for shape in by_shape}
    for position, shape in enumerate(sorted(by_shape)):
        rows = by_shape[shape]
        source, names, means = sources[shape]
        write_shard(shard_paths[shape], table=name, rows=rows, build_rows=[],
                    provenance={"backend": IMPORTED_BACKEND, "source": source, "table": name})
        ok = [r for r in rows if r["status"] == "ok"]
        best = min(ok, key=lambda r: (r["median_ms"], r["config_id"])) if ok else None
        label = "/".join(f"{n}={best[n]}" for n in names) if best else "-"
        mean = means.get(tuple(best[n] for n in names)) if best else None
        if position in shown:
            summary.add_row(*shape, len(rows), len(rows) - len(ok), label, _ms(best and best["median_ms"]),
                            _ms(mean), len(best["samples_ms"]) if best else 0)
        elif position == SHOWN_SHAPES // 2:
            summary.add_gap(len(by_shape) - len(shown))
    print_table(console, summary)
    if without_times:
        console.print(f"note: {without_times} entries have no `times`: their single `time` (Kernel Tuner's mean) "
                      "stands in for the median", markup=False)


def _ms(value: float | None) -> str:
    """A time in ms at the one format of measured values (tunetable.numbers: 3 decimals), '-' when absent."""
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else number_cell(value)

