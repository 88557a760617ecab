"""``tunetable profile FILES...``: kprofile's views (same flags) over shards, kbench pickles, ranked tables
and recordings, on polars.

What a person reads is bounded: a view longer than ``--max-rows`` prints its first and last rows
around a marked gap, with the count of rows left out; ``--all`` prints every row and ``--csv``
writes every view in full to ``--out-dir``. Every table goes through tunetable.console_table, so
no value is ever split across lines.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click
import polars as pl
from rich.console import Console

from tunetable import profile as views
from tunetable import resultset
from tunetable.atomic import atomic_write_bytes, atomic_write_text
from tunetable.commands.rank import load_with_progress
from tunetable.console_table import ConsoleTable, print_table
from tunetable.errors import TuneTableError
from tunetable.manifest import load_manifest, load_yaml_document
from tunetable.numbers import CORRELATION_DECIMALS, MEASURED_DECIMALS, number_cell
from tunetable.select_winners import manifest_text

RULE = "-" * 80
YAML_SUFFIXES = (".yaml", ".yml")
DEFAULT_MAX_ROWS = 20
# Columns every view needs besides the metric, the shape and the parameters (read from tables when present).
ROW_KEYS = ("mesh_idx", "config_id", "kind", "status", "name", "table")


@dataclass(frozen=True)
class Display:
    """How views print: at most ``max_rows`` rows each unless ``all_rows``; ``csv_dir`` gets every view in full."""

    console: Console
    max_rows: int
    all_rows: bool
    csv_dir: Path | None
    out_dir: Path


def cell(value: Any, *, decimals: int = MEASURED_DECIMALS) -> str:
    """A value as a table cell: empty for None, floats at ``decimals`` (kprofile's 3 for times and ratios)."""
    return number_cell(value, decimals=decimals)


def show(display: Display, frame: pl.DataFrame, *, title: str, bold: str | None = None,
         csv_name: str | None = None, total: int | None = None, decimals: int = MEASURED_DECIMALS) -> None:
    """Print a view (first and last rows beyond ``max_rows``) and, with --csv, write it whole.

    ``total``: the view's row count when ``frame`` already holds only its first and last rows (show_picked).
    ``decimals``: every float column's, on the terminal and in the CSV alike (CORRELATION_DECIMALS for tau).
    """
    total = frame.height if total is None else total
    bounded = not display.all_rows and total > display.max_rows
    head = frame.head(display.max_rows - display.max_rows // 2) if bounded else frame
    tail = frame.tail(display.max_rows // 2) if bounded else frame.clear()
    table = ConsoleTable(title=f"{title} ({total:,} rows)" if bounded else title)
    for name in frame.columns:
        numeric = frame.schema[name].is_numeric()
        table.add_column(name, justify="right" if numeric else "left", style="bold green" if name == bold else None)
    for row in head.iter_rows():
        table.add_row(*(cell(v, decimals=decimals) for v in row))
    table.add_gap(total - head.height - tail.height)
    for row in tail.iter_rows():
        table.add_row(*(cell(v, decimals=decimals) for v in row))
    print_table(display.console, table)
    written = None
    if display.csv_dir is not None and csv_name is not None:
        written = display.csv_dir / f"{csv_name}.csv"
        atomic_write_text(written, _csv_ready(frame).write_csv(float_precision=decimals))
    if bounded:
        where = f"; all of it is in {written}" if written else f"; --csv writes every view to {display.out_dir}/"
        display.console.print(f"({head.height + tail.height} of {total:,} rows shown: --all prints every row{where})",
                              markup=False, highlight=False, soft_wrap=True)
    elif written:
        display.console.print(f"wrote [{written}]", markup=False, highlight=False)


def show_picked(display: Display, frame: pl.DataFrame, ordering: views.Ordering, picked: pl.DataFrame, *,
                columns: tuple[str, ...], title: str, bold: str | None = None, csv_name: str | None = None) -> None:
    """Show the rows ``picked`` from an ordering; when the view is bounded only its first and last rows are read."""
    whole = display.all_rows or display.csv_dir is not None or picked.height <= display.max_rows
    if whole:
        show(display, views.rows_of(frame=frame, ordering=ordering, picked=picked, columns=columns), title=title,
             bold=bold, csv_name=csv_name)
        return
    ends = pl.concat([picked.head(display.max_rows - display.max_rows // 2), picked.tail(display.max_rows // 2)])
    show(display, views.rows_of(frame=frame, ordering=ordering, picked=ends, columns=columns), title=title,
         bold=bold, csv_name=csv_name, total=picked.height)


def _csv_ready(frame: pl.DataFrame) -> pl.DataFrame:
    """A frame CSV can hold: list columns (samples) joined by spaces."""
    lists = [name for name, dtype in frame.schema.items() if isinstance(dtype, pl.List)]
    return frame.with_columns(pl.col(n).cast(pl.List(pl.Utf8)).list.join(" ") for n in lists) if lists else frame


def _display(frame: pl.DataFrame, columns: tuple[str, ...] = ()) -> pl.DataFrame:
    """Only ``columns`` when given (those present), else every column but the bulky ones (samples)."""
    if columns:
        return frame.select([c for c in dict.fromkeys(columns) if c in frame.columns])
    return frame.drop([c for c in ("samples_ms", "error", "spec") if c in frame.columns])


def _kprofile_yaml(*, configs: list[dict[str, Any]], name: str,
                   source_file: str | None) -> tuple[str, list[str], list[str]]:
    """kprofile's output: ``name``, kbench's ``file``, ``common: &common`` (a list of one mapping), ``params``."""

    keys = list(dict.fromkeys(k for c in configs for k in c))
    filled = [{k: c.get(k) for k in keys} for c in configs]
    common = {k: filled[0][k] for k in keys if all(f[k] == filled[0][k] for f in filled)}
    own = [{k: v for k, v in f.items() if k not in common} for f in filled]
    top: dict[str, Any] = {"name": name}
    if source_file is not None:
        top["file"] = source_file
    text = manifest_text(header=["generated by `tunetable profile -o` (kprofile-compatible layout)"],
                         top=top, defaults=common, anchor="common", list_key="params",
                         entries=own, defaults_as_list=True)
    return text, list(common), [k for k in keys if k not in common]


def _best_configs(*, result: resultset.LoadedResult, chosen: pl.DataFrame,
                  shape: tuple[str, ...]) -> list[dict[str, Any]]:
    """One selected config per shape (the best spec, or the --top / --top-fraction common spec)."""
    return [{"name": result.name, **{p: row.get(p) for p in (*result.parameters, *shape)}}
            for row in chosen.iter_rows(named=True)]


def check_row_count(*, value: int, flag: str) -> None:
    """``--head``/``--tail`` take a row count >= 0, or -1 (the default: that view is off)."""
    if value < -1:
        raise TuneTableError(f"expected a row count >= 0, or -1 for off (the default), got {value}", where=flag)


def check_fraction(*, value: float, flag: str) -> None:
    """``--top-fraction`` takes a fraction of each shape's entries in (0, 1], or 0 (the default: off)."""
    if not 0 <= value <= 1:  # also refuses nan
        raise TuneTableError(f"expected a fraction in (0, 1], or 0 for off (the default), got {value:g}", where=flag)


def check_threshold(*, value: float, flag: str) -> None:
    """``--top`` takes kprofile's threshold T >= 0 (0, the default: off); nan and infinities are refused."""
    if not (value >= 0 and value != float("inf")):
        raise TuneTableError(f"expected a threshold >= 0 (0 for off, the default), got {value:g}", where=flag)


def _source_of_yaml(path: Path) -> tuple[str | None, str | None]:
    """A kprofile/kbench YAML's top-level ``name`` and ``file`` (None where absent)."""

    document = load_yaml_document(path)
    if not isinstance(document, dict):
        return None, None
    name, source = document.get("name"), document.get("file")
    return (str(name) if name is not None else None, str(source) if source is not None else None)


def _merge(display: Display, files: tuple[Path, ...], pivots: list[str], sort_pivots: list[str],
           query: str | None, verbose: bool) -> tuple[pl.DataFrame, str, str | None]:
    """The YAML manifests merged on the pivots (filtered by ``query``), the first file's name and ``file``."""

    bad = [f for f in files if f.suffix not in (".yaml", ".yml")]
    if bad:
        raise TuneTableError("--merge takes YAML manifests only", path=bad[0])
    manifests = [(str(f), views.expand_entries(entries=load_manifest(f), path=str(f))) for f in files]
    merged = views.merge_manifests(manifests=manifests, pivots=pivots, sort_pivots=sort_pivots)
    if query:
        display.console.print(f"Applying query: [{query}]", markup=False)
        merged = views.apply_query(frame=merged, query=query)
    if verbose:
        show(display, merged, title="merged")
    name, source = _source_of_yaml(files[0])
    return merged, name or files[0].stem, source


def _load_inputs(console: Console, files: tuple[Path, ...],
                 metric: str | None) -> tuple[list[resultset.LoadedResult], list[str], list[Path]]:
    """Readable inputs (pickles whole, tables with only the columns the views need), invalid and unsupported ones."""
    unsupported = [f for f in files if f.suffix not in resultset.READABLE]
    for path in unsupported:
        console.print(f"unsupported input: [{path}] (profile reads {resultset.readable_inputs()})", markup=False)
    pickles = list(dict.fromkeys(f for f in files if f.suffix == ".pkl"))   # each file read once
    results: list[resultset.LoadedResult] = []
    invalid: list[str] = []
    if pickles:
        try:
            report = load_with_progress(paths=pickles, console=console, keep_spec=False)
        except TuneTableError as exc:
            # Every pickle unreadable while tables were given too: list them and go on with the tables.
            # Any other error (a pickle refused for safety or integrity) stops the command.
            if len(pickles) == len(files) or not (exc.where or "").endswith("invalid"):
                raise
            report = resultset.LoadReport(results=(), invalid=tuple(resultset.InvalidFile(path=str(p), reason="")
                                                                     for p in pickles))
        by_path = {r.path: r for r in report.results}
        invalid += [item.path for item in report.invalid]
        for item in report.invalid:
            console.print(f"Invalid pkl [{item.path}]", markup=False)
            console.print(RULE)
    else:
        by_path = {}
    lean: dict[str, resultset.LoadedResult] = {}
    for path in files:
        if path.suffix == ".pkl":
            if str(path) in by_path:   # a file given twice (-d against itself) is one result shown twice
                results.append(lean.setdefault(str(path), _lean(by_path[str(path)])))
        elif path.suffix in (".parquet", ".csv"):
            if str(path) not in lean:
                lean[str(path)] = _load_table(path=path, metric=metric)
            results.append(lean[str(path)])
    if not results:
        raise TuneTableError(f"no readable result file ({len(unsupported)} unsupported, {len(invalid)} invalid); "
                             f"profile reads {resultset.readable_inputs()}", path=files[0])
    return results, invalid, unsupported


def _lean(result: resultset.LoadedResult) -> resultset.LoadedResult:
    """A pickle as the views need it: repeated strings as categories (its spec strings are dropped on load)."""
    return replace(result, frame=result.frame.with_columns(pl.col(pl.Utf8).cast(pl.Categorical)))


def _load_table(*, path: Path, metric: str | None) -> resultset.LoadedResult:
    """A ranked table or recording with only the metric, shape, parameters and row keys read."""
    table = resultset.describe_table_file(path=path)
    resolved = views.resolve_metric(frame=pl.DataFrame(schema=table.schema), requested=metric, path=table.path)
    return resultset.read_table_file(table=table, columns=[*table.shape, *table.parameters, resolved.name, *ROW_KEYS])


def _csv_name(result: resultset.LoadedResult, view: str) -> str:
    """The --csv file name of one view of one input."""
    return f"{Path(result.path).stem}.{view}"


def _check_limits(*, top: float, top_fraction: float, head: int, tail: int) -> None:
    """Refuse a bad --top, --top-fraction, --head or --tail, and --top given with --top-fraction."""
    check_threshold(value=top, flag="--top")
    check_fraction(value=top_fraction, flag="--top-fraction")
    if top and top_fraction:
        raise TuneTableError("give --top (kprofile's threshold) or --top-fraction, not both", where="--top")
    check_row_count(value=head, flag="--head")
    check_row_count(value=tail, flag="--tail")


def _merge_files(*, display: Display, console: Console, files: tuple[Path, ...], output: Path | None,
                 pivot_names: list[str], sort_names: list[str], query: str | None, verbose: bool) -> None:
    """--merge: show the merged entries, and write them to ``output`` when given."""
    merged, name, source = _merge(display, files, pivot_names, sort_names, query, verbose)
    show(display, merged.drop("source"), title=f"merged: {len(merged)} entries", csv_name="merged")
    if output is not None:
        entries = [{k: v for k, v in row.items() if v is not None and k != "source"}
                   for row in merged.iter_rows(named=True)]
        _write_yaml(console, output, entries, name, source)


def _print_invalid(*, console: Console, invalid: list[str], unsupported: list[Path], files: tuple[Path, ...],
                   verbose: bool) -> None:
    """kprofile's closing lines: how many inputs were invalid (each named with --verbose)."""
    console.print(f"num invalid pkls: {len(invalid) + len(unsupported)} out of num-files: {len(files)}",
                  markup=False)
    if verbose:
        for index, path in enumerate(invalid):
            console.print(f"invalid pkl [{index}]: [{path}]", markup=False)
    console.print(RULE)


@click.command("profile", context_settings={"help_option_names": ["-h", "-help", "--help"]})
@click.argument("files", nargs=-1, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the selected configs as kprofile-style YAML (suffix becomes .yaml; kbench's file: kept).")
@click.option("-t", "--top", type=float, default=0.0,
              help="kprofile's rule: most common values among entries below min + T*max of each shape "
                   "(mirrored, above max - T*max, for higher-is-better metrics). T >= 0; 0, the default: off.")
@click.option("--top-fraction", type=float, default=0.0,
              help="Most common values among the best fraction F of each shape's entries (0 < F <= 1; 0: off).")
@click.option("-r", "--ratio", is_flag=True, help="Print the sorted table with each entry's ratio to its shape's best.")
@click.option("--head", type=int, default=-1, help="Print the N best rows per shape (N >= 0; -1, the default: off).")
@click.option("--tail", type=int, default=-1, help="Print the N worst rows per shape (N >= 0; -1, the default: off).")
@click.option("-d", "--diff", is_flag=True, help="First file is the baseline: per shape current best / baseline best.")
@click.option("-m", "--metric", default=None,
              help=f"Metric name or unique prefix [default: '{views.DEFAULT_METRIC}', else median_ms].")
@click.option("-p", "--pivots", multiple=True, help="Shape columns: `[M] [N]` or `[M,N]`.")
@click.option("--sort-pivots", multiple=True, help="Sort/dedup keys for --merge (a subset of the pivots).")
@click.option("--merge", is_flag=True, help="Merge YAML manifests on the pivots.")
@click.option("--query", default=None,
              help="Filter after --merge with pandas query syntax: 'M > 64 & K < 1024', 'N.between(1024, 4096)', "
                   "'~SWAP_AB | M in [1, 8]' (never eval'd).")
@click.option("-c", "--correlation", "correlate", is_flag=True,
              help="Kendall correlation of parameters with the metric.")
@click.option("-v", "--verbose", is_flag=True, help="Also print unsorted tables and the --top subsets.")
@click.option("--max-rows", type=click.IntRange(min=2), default=DEFAULT_MAX_ROWS, show_default=True,
              help="Longest view printed: beyond it, its first and last rows and the count left out.")
@click.option("--all", "all_rows", is_flag=True, help="Print every row of every view.")
@click.option("--csv", "write_csv", is_flag=True, help="Also write every view in full as CSV under --out-dir.")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("results/profile"),
              show_default=True, help="Folder for --csv, diff CSVs and the correlation heatmap.")
def command(files: tuple[Path, ...], output: Path | None, top: float, top_fraction: float, ratio: bool, head: int,
            tail: int, diff: bool, metric: str | None, pivots: tuple[str, ...], sort_pivots: tuple[str, ...],
            merge: bool, query: str | None, correlate: bool, verbose: bool, max_rows: int, all_rows: bool,
            write_csv: bool, out_dir: Path) -> None:
    """Profile benchmark results (kprofile-compatible flags).

    FILES: raw shards and kbench pickles (.pkl), ranked tables (results/ranked/*.parquet or .csv) and
    recordings (data/recordings/*.parquet); YAML manifests with --merge.
    """
    _check_limits(top=top, top_fraction=top_fraction, head=head, tail=tail)
    console = Console(soft_wrap=True)
    display = Display(console=console, max_rows=max_rows, all_rows=all_rows,
                      csv_dir=out_dir if write_csv else None, out_dir=out_dir)
    if not files:
        raise TuneTableError("no files provided")
    pivot_names = views.parse_pivots(values=pivots)
    sort_names = views.parse_pivots(values=sort_pivots)
    if merge:
        _merge_files(display=display, console=console, files=files, output=output, pivot_names=pivot_names,
                     sort_names=sort_names, query=query, verbose=verbose)
        return
    if query:
        raise TuneTableError("--query applies to --merge only", where="--query")
    manifests = [f for f in files if f.suffix in YAML_SUFFIXES]
    others = tuple(f for f in files if f.suffix not in YAML_SUFFIXES)
    results, invalid, unsupported = _load_inputs(console, others, metric) if others else ([], [], [])
    for result in results:   # before any view is printed or -o written
        views.check_profilable(result=result, requested=metric)
    if diff:
        _diff(display, results, metric, pivot_names, verbose)
    else:
        configs, sources = [], [(r.source_file, r.path) for r in results]
        for path in manifests:   # kprofile prints a YAML's entries and writes them to -o with the rest
            entries, name, source = _yaml_entries(path)
            show(display, _entries_frame(entries), title=f"[{path}]", csv_name=f"{path.stem}.entries")
            configs += [{"name": name, **entry} if "name" not in entry else entry for entry in entries]
            sources.append((source, str(path)))
            console.print(RULE)
        for result in results:
            configs.extend(_default_view(display, result, metric, pivot_names, top, top_fraction, ratio, head, tail,
                                         verbose))
        if output is not None:
            name = results[0].name if results else _yaml_entries(manifests[0])[1]
            _write_yaml(console, output, configs, name, _one_source(sources))
    if correlate:
        _correlation(display, results, metric)
    _print_invalid(console=console, invalid=invalid, unsupported=unsupported, files=files, verbose=verbose)


def _entries_frame(entries: list[dict[str, Any]]) -> pl.DataFrame:
    """Manifest entries as a frame; a key whose values have no single type is shown as text."""
    keys = list(dict.fromkeys(k for entry in entries for k in entry))
    columns = []
    for key in keys:
        values = [entry.get(key) for entry in entries]
        try:
            columns.append(pl.Series(key, values, strict=False))
        except (TypeError, ValueError, pl.exceptions.PolarsError):
            columns.append(pl.Series(key, [None if v is None else str(v) for v in values], dtype=pl.Utf8))
    return pl.DataFrame(columns)


def _yaml_entries(path: Path) -> tuple[list[dict[str, Any]], str, str | None]:
    """A kbench/kprofile YAML's entries (list values expanded as kbench's grid), its ``name`` and ``file``."""

    name, source = _source_of_yaml(path)
    entries = views.expand_entries(entries=load_manifest(path), path=str(path))
    return entries, name or path.stem, source


def _one_source(pairs: list[tuple[str | None, str]]) -> str | None:
    """The kbench ``file`` the inputs share (None when none has one); two different ones are an error."""
    sources = {source: path for source, path in pairs if source is not None}
    if len(sources) > 1:
        (first, a), (second, b) = list(sources.items())[:2]
        raise TuneTableError(f"the inputs ran different kbench files ({first} in {a}, {second} in {b}); "
                             "-o writes one `file:`", where="-o")
    return next(iter(sources), None)


def _default_view(display: Display, result: resultset.LoadedResult, metric_name: str | None, pivots: list[str],
                  top: float, top_fraction: float, ratio: bool, head: int, tail: int,
                  verbose: bool) -> list[dict[str, Any]]:
    """Print one result's views (per shape or --top, sorted, head, tail); its selected configs."""
    console = display.console
    metric = views.resolve_metric(frame=result.frame, requested=metric_name, path=result.path)
    shape = tuple(pivots) or result.shape
    missing = [p for p in shape if p not in result.frame.columns]
    if missing:
        raise TuneTableError(f"pivot {missing[0]} is not a column", path=result.path, where="--pivots")
    ordering = views.order_rows(frame=result.frame, metric=metric, shape=shape)
    summary = views.summary(result=result, metric=metric, shape=shape, ordering=ordering)
    direction = "higher" if metric.higher_is_better else "lower"
    console.print(f"[{result.path}] metric [{metric.name}] ({direction} is better)", markup=False)
    left_out = views.left_out(frame=result.frame, metric=metric)
    reasons = ", ".join(f"{count:,} {reason}" for reason, count in left_out.items())
    console.print(f"- num entries: {result.frame.height:,} ({ordering.rows.height:,} compared"
                  + (f"; left out: {reasons})" if reasons else ")"), markup=False)
    compact = ("mesh_idx", "config_id", *shape, *result.parameters, metric.name, "ratio")
    chosen = summary
    if top > 0 or top_fraction > 0:
        if top > 0:
            subset = views.within_top(frame=result.frame, metric=metric, threshold=top, shape=shape,
                                      columns=compact, ordering=ordering)
            rule = (f"above max - {top:g}*max" if metric.higher_is_better else f"below min + {top:g}*max")
        else:
            subset = views.top_fraction(frame=result.frame, metric=metric, fraction=top_fraction, shape=shape,
                                        columns=compact, ordering=ordering)
            rule = f"the best {top_fraction:g} of each shape"
        chosen = views.common_spec(subset=subset, parameters=result.parameters, shape=shape)
        if verbose:
            show(display, subset, title=f"common subset: {rule}", csv_name=_csv_name(result, "subset"))
        show(display, chosen, title=f"most common values among entries {rule}", csv_name=_csv_name(result, "common"))
    else:
        show(display, summary.drop([*result.parameters, *shape]), title=f"{result.name}: per shape",
             csv_name=_csv_name(result, "per_shape"))
    if ratio:
        show_picked(display, result.frame, ordering, ordering.rows, columns=compact, title="sorted", bold="ratio",
                    csv_name=_csv_name(result, "sorted"))
    if head > 0:
        show_picked(display, result.frame, ordering, views.first_last(ordering=ordering, head=head, tail=0),
                    columns=compact, title=f"best {head}", bold="ratio", csv_name=_csv_name(result, f"head{head}"))
    if tail > 0:
        show_picked(display, result.frame, ordering, views.first_last(ordering=ordering, head=0, tail=tail),
                    columns=compact, title=f"worst {tail}", bold="ratio", csv_name=_csv_name(result, f"tail{tail}"))
    if verbose:
        console.print(RULE)
        show(display, _display(result.frame), title="unsorted", csv_name=_csv_name(result, "unsorted"))
    console.print(RULE)
    return _best_configs(result=result, chosen=chosen, shape=shape)


def _diff(display: Display, results: list[resultset.LoadedResult], metric_name: str | None, pivots: list[str],
          verbose: bool) -> None:
    """Print each result's per-shape diff against the first (the baseline) and write it as CSV."""
    if len(results) < 2:
        raise TuneTableError("Provide at least two pkl's for --diff option.", where="--diff")
    baseline = results[0]
    metric = views.resolve_metric(frame=baseline.frame, requested=metric_name, path=baseline.path)
    for index, current in enumerate(results[1:], start=1):
        shape = tuple(pivots) or tuple(p for p in baseline.shape if p in current.shape)
        table = views.diff_view(baseline=baseline, current=current, metric=metric, shape=shape)
        show(display, table, title=f"[{index}] {current.path} vs baseline {baseline.path}", bold="ratio")
        target = display.out_dir / f"diff_{index}_{Path(current.path).stem}.csv"
        atomic_write_text(target, table.write_csv(float_precision=MEASURED_DECIMALS))
        display.console.print(f"wrote [{target}]", markup=False)
        display.console.print(RULE)


def _correlation(display: Display, results: list[resultset.LoadedResult], metric_name: str | None) -> None:
    """Print the parameters' Kendall correlation with the metric; write it as CSV and a heatmap PNG."""
    frame = resultset.combine(results=results)
    metric = views.resolve_metric(frame=frame, requested=metric_name)
    parameters = resultset.union_names(groups=[r.parameters for r in results])
    table, matrix = views.correlation(frame=frame, metric=metric, parameters=parameters)
    show(display, table, title=f"Sorted Absolute Correlation: {metric.name}", decimals=CORRELATION_DECIMALS)
    show(display, matrix, title="Kendall correlation matrix", decimals=CORRELATION_DECIMALS)
    png = display.out_dir / "correlation.png"
    atomic_write_bytes(png, views.heatmap_png(matrix=matrix, title=f"Kendall correlation ({metric.name})"))
    atomic_write_text(display.out_dir / "correlation.csv", matrix.write_csv(float_precision=CORRELATION_DECIMALS))
    display.console.print(f"wrote [{png}]", markup=False)


def _write_yaml(console: Console, output: Path, configs: list[dict[str, Any]], name: str,
                source_file: str | None) -> None:
    """Write ``configs`` as kprofile-style YAML to ``output`` (suffix .yaml) and print a summary."""
    text, common, pivots = _kprofile_yaml(configs=configs, name=name, source_file=source_file)
    target = output.with_suffix(".yaml")
    atomic_write_text(target, text)
    console.print(f"common columns: {common}", markup=False)
    console.print(f"pivot columns: {pivots}", markup=False)
    console.print(f"num entries: [{len(configs)}]", markup=False)
    console.print(f"wrote results to [{target}]", markup=False)
    console.print(RULE)
