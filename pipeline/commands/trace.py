"""``tunetable trace``: from a generated table, dispatch-list or selector entry down to the measurements behind it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from tunetable import paths
from tunetable import selector_trace
from tunetable import trace as tracing
from tunetable.console_table import ConsoleTable, print_table
from tunetable.device_tables import split_device_table, with_present_device_tables
from tunetable.errors import TuneTableError
from tunetable.numbers import number_cell
from tunetable.kernels.runtime.selector_serve import BIAS_NK_SCALE, cell_points, nearest_cell
from tunetable.commands.suggest import parse_shape
from tunetable.kernels.families.common import cublas_measured_faster
from tunetable.kernels.families.devices import DeviceSpec, device_of_name
from tunetable.params import device_specs, dispatch_specs, load_params, selector_specs, table_spec, table_specs
from tunetable.select_winners import entry_speedup

EPILOG = """\b
Examples:
  tunetable trace gemm_mma 3                     entry 3 of table gemm_mma
  tunetable trace kernels/tuning_configs.py:57   the entry holding line 57
  tunetable trace gemm_dispatch 2                entry 2 of the dispatch list: each candidate
                                                 table's speedup over cuBLAS, then the chosen
                                                 table's entry
  tunetable trace gemm_selector 12               entry 12 of the shape selector: its bias at
                                                 both ends of its M range, from each recorded
                                                 (N, K) against the perf model
  tunetable trace gemm_selector 12 --shape 200,5120,5120
                                                 ... and each (N, K)'s share on that shape
"""

SHARD_COLUMNS = ("status", "median_ms", "sm_clock_mhz", "power_w", "device", "driver", "backend", "time", "git_rev",
                 "measured_key")
CANDIDATE_COLUMNS = ("M", "table", "entry", "config_id", "median_ms", "cublas_ms", "speedup_vs_cublas",
                     "shard_cublas_ms", "shard_speedup", "measured_key")


def _cell(value: object) -> str:
    """A value as a table cell: '-' for None, floats at the one format of measured values (tunetable.numbers)."""
    return "-" if value is None else number_cell(value)


def _device_line(provenance: dict | None, *, devices: Sequence[DeviceSpec]) -> str | None:
    """'device: h200 (the measurement's NVIDIA H200)': which declared device an entry's measurements belong to."""
    name = str((provenance or {}).get("device") or "")
    if not name or not devices:
        return None
    key = device_of_name(name=name, devices=devices)
    return f"device: {key or 'none of params.yaml devices:'} (the measurement's {name})"


def _on_device(params: dict, *, params_path: Path, spec: Any) -> tuple[dict[str, Any], Any]:
    """The table specs a dispatch list's or selector's entries name, and the spec as they name its tables: a
    device's entries name base tables (``gemm_mma``), which are that device's (``gemm_mma.h100``) there."""
    tables = {table.name: table for table in table_specs(params, path=params_path)}
    if split_device_table(spec.name)[1] is None:
        return tables, spec
    bases = {split_device_table(name)[0]: tables[name] for name in spec.tables}
    return {**tables, **bases}, replace(spec, tables=tuple(bases))


def _print_trace(console: Console, result, *, devices: Sequence[DeviceSpec] = ()) -> None:
    """A table entry: generated lines, manifest entry, ranked rows per M, raw shards."""
    g = result.generated
    console.print(f"[bold]{result.table}[{g.index}][/bold] {result.target}:{g.first_line}-{g.last_line}")
    console.print(g.text, markup=False, highlight=False)
    entry = result.entry
    console.print(f"\n[bold]manifest[/bold] {result.manifest} params[{entry.index}]: "
                  f"M [{entry.m}, {entry.m_end}) N={entry.n} K={entry.k} config {entry.config_id}")
    values = ConsoleTable(show_header=False, boxed=False)
    values.add_column("key")
    values.add_column("value")
    for key, value in entry.values.items():
        values.add_row(str(key), _cell(value))
    print_table(console, values)
    if result.provenance:
        console.print("provenance: " + ", ".join(f"{k}={v}" for k, v in result.provenance.items()), markup=False)
        if _device_line(result.provenance, devices=devices):
            console.print(_device_line(result.provenance, devices=devices), markup=False)
    console.print(f"\n[bold]ranked[/bold] {result.ranked_path} ({result.ranked_note})", highlight=False)
    for at_m in result.ranked:
        rows = ConsoleTable(title=f"M={at_m.m} N={entry.n} K={entry.k}: entry's config ranks {at_m.picked_rank or '-'}")
        columns = list(at_m.rows[0]) if at_m.rows else ["config_id"]
        for column in columns:
            rows.add_column(column, justify="left" if column == "config_id" else "right")
        for row in at_m.rows:
            style = "bold" if row.get("config_id") == entry.config_id else None
            rows.add_row(*(_cell(row.get(c)) for c in columns), style=style)
        print_table(console, rows)

    folder = paths.raw_dir(result.table, result.content_key) if result.content_key else None
    console.print(f"\n[bold]raw shards[/bold] content key {result.content_key or '(unknown)'}"
                  + (f" in {folder}/" if folder else ""))
    shards = ConsoleTable()
    shards.add_column("file")
    for column in SHARD_COLUMNS:
        shards.add_column(column)
    for view in result.shards:
        cells = [_cell(view.row.get(c)) for c in SHARD_COLUMNS] if view.found else ["(missing: dvc pull)"] + [""] * (
            len(SHARD_COLUMNS) - 1)
        shards.add_row(Path(view.path).name, *cells)
    print_table(console, shards)
    if result.shards_note:
        console.print(f"source: {result.shards_note}", markup=False, highlight=False)


def _candidate_cells(decision, candidate) -> list[str]:
    """The cells of one dispatch-list candidate: M, table, entry, config, times, speedups, measured key.

    cublas_ms / speedup_vs_cublas: against the tables' shared yardstick (the list's basis); shard_*: against the
    same shard's cuBLAS row, what the shard alone says.
    """
    found = candidate.measured
    return [
        str(decision.m), candidate.table, "-" if candidate.entry_index is None else f"params[{candidate.entry_index}]",
        _cell(candidate.config_id), _cell(found and found.median_ms), _cell(found and found.cublas_ms),
        f"{found.speedup:.3f}x" if found else "(not measured)", _cell(found and found.shard_cublas_ms),
        f"{found.shard_speedup:.3f}x" if found else "-", _cell(found and found.measured_key),
    ]


def _source_line(result, source) -> str:
    """Where a candidate table's rows were read, and whether they are the rows the list was selected from."""
    if source.kind == "none":
        return (f"{source.table}: no ranked table, raw shards or recording in the working tree "
                f"(`snakemake rank_all`, or `dvc pull`)")
    how = {"ranked": "ranked table", "raw": "raw shards, ranked here", "recording": "recording, ranked here"}
    selected = result.selected_hash(source.table)
    verdict = ("the rows the list was selected from" if source.data_hash == selected
               else f"OTHER rows than the list was selected from ({selected or 'unknown'})")
    return f"{source.table}: {source.path} ({how[source.kind]}), data hash {source.data_hash}: {verdict}"


def _speedup_line(result) -> str | None:
    """The entry's SPEEDUP_VS_CUBLAS and the PyTorch operator's route it decides (None: an entry without it)."""
    recorded = result.entry.values.get("SPEEDUP_VS_CUBLAS")
    if recorded is None:
        return None
    faster = cublas_measured_faster(speedup=recorded)
    route = ("below 1: the PyTorch operator hands the range to torch's matmul" if faster
             else "the PyTorch operator runs tunetable's kernel")
    return f"speedup over cuBLAS at its first measured M: {recorded}x (SPEEDUP_VS_CUBLAS; {route})"


def _dispatch_notes(result) -> list[str]:
    """Where the rows read here disagree with the dispatch entry (another selected config, another pick, another
    speedup at its first M)."""
    notes = []
    recorded = result.entry.values.get("SPEEDUP_VS_CUBLAS")
    for position, decision in enumerate(result.decisions):
        chosen = next(c for c in decision.candidates if c.table == result.table)
        # The entry holds its first M's speedup: only that decision's rows are compared with it.
        if position == 0 and recorded is not None and chosen.measured is not None:
            measured = entry_speedup(speedup=chosen.measured.speedup)
            if measured != recorded:
                notes.append(f"M={decision.m}: these rows measure {measured}x cuBLAS's speed, the list holds "
                             f"{recorded}x: re-run `tunetable select --dispatch {result.name}`")
        if chosen.config_id not in (None, result.config_id):
            notes.append(f"M={decision.m}: table {result.table} now selects {chosen.config_id}, the list names "
                         f"{result.config_id}: re-run `tunetable select --dispatch {result.name}`")
        if decision.rule_pick not in (None, result.table):
            notes.append(f"M={decision.m}: these rows pick {decision.rule_pick}, the list names {result.table}")
    return notes


def _print_generated(console: Console, result) -> None:
    """The generated lines of a traced entry, under its name, index, file and line range."""
    g = result.generated
    console.print(f"[bold]{result.name}[{g.index}][/bold] {result.target}:{g.first_line}-{g.last_line}")
    console.print(g.text, markup=False, highlight=False)


def _print_dispatch(console: Console, result, *, devices: Sequence[DeviceSpec] = ()) -> None:
    """A dispatch entry: generated lines, the decision, each candidate's speedup per measured M, the chosen entry."""
    entry = result.entry
    _print_generated(console, result)
    console.print(f"\n[bold]dispatch[/bold] {result.manifest} params[{entry.index}]: M [{entry.m}, {entry.m_end}) "
                  f"N={entry.n} K={entry.k} -> table {result.table}, config {result.config_id}")
    speedup = _speedup_line(result)
    if speedup:
        console.print(speedup, markup=False)
    tie = f"within {result.tie_tolerance:g} (relative)" if result.tie_tolerance else "exact ties"
    console.print(f"rule: per measured shape, the highest cuBLAS yardstick (every table's row pooled, in each "
                  f"recording's session scale) / selected winner median; {tie} go to the first of "
                  f"{', '.join(result.tables)}", markup=False)
    if result.provenance:
        console.print("provenance: " + ", ".join(f"{k}={v}" for k, v in result.provenance.items()), markup=False)
        if _device_line(result.provenance, devices=devices):
            console.print(_device_line(result.provenance, devices=devices), markup=False)
    console.print("\n[bold]measurements[/bold]")
    for source in result.sources:
        console.print(f"  {_source_line(result, source)}", markup=False)
    decisions = ConsoleTable(title=f"candidates at the measured Ms of [{entry.m}, {entry.m_end}) (* chosen)")
    for column in CANDIDATE_COLUMNS:
        decisions.add_column(column, justify="left" if column in ("table", "config_id") else "right")
    for decision in result.decisions:
        for candidate in decision.candidates:
            chosen = candidate.table == result.table
            cells = _candidate_cells(decision, candidate)
            cells[1] = f"{candidate.table} *" if chosen else candidate.table
            decisions.add_row(*cells, style="bold" if chosen else None)
    if result.decisions:
        print_table(console, decisions)
    else:
        console.print("  (no shape of params.yaml falls in this range)")
    for note in _dispatch_notes(result):
        console.print(f"note: {note}", markup=False)
    for table_trace in result.table_traces:
        console.print(f"\n[bold]chosen table[/bold] {result.table}: entry {table_trace.entry.index}")
        _print_trace(console, table_trace, devices=devices)


def _print_recordings(console: Console, result) -> None:
    """The recordings a selector entry's measurements were read from (its table's, its coverage recording), each
    against the data hash the selector was built from."""
    selected = result.selected_hash
    verdict = ("the rows the selector was built from" if result.data_hash == selected
               else f"OTHER rows than the selector was built from ({selected or 'unknown'})")
    console.print(f"  {result.recording} (recording, ranked here), data hash {result.data_hash}: {verdict}",
                  markup=False)
    if result.coverage is not None or result.selected_coverage_hash is not None:
        path, found = result.coverage or ("no coverage recording here", None)
        built = result.selected_coverage_hash
        said = ("the rows the selector was built from" if found == built else
                f"OTHER rows than the selector was built from ({built or 'built without coverage'})")
        console.print(f"  {path} (coverage recording: its (N, K) feed the fit only), data hash {found or '-'}: "
                      f"{said}", markup=False)


def _print_selector(console: Console, result, *, devices: Sequence[DeviceSpec] = ()) -> None:
    """A selector entry: generated lines, the candidate, and each (N, K)'s term of its bias at both range ends."""
    g, entry = result.generated, result.entry
    _print_generated(console, result)
    console.print(f"\n[bold]selector[/bold] {result.manifest} candidates[{g.index}]: "
                  f"M [{entry['M']}, {entry['M_END']}) candidate {entry['RANK']}: table {entry['TABLE']}, "
                  f"config {entry['CONFIG_ID']}")
    runs = [tuple(run) for run in entry.get("CELLS") or ()]
    cells = cell_points(runs)
    if cells:
        listed = "; ".join(f"N={n}: K={first}..{last}" for n, first, last in runs)
        console.print(f"on the shortlist of {len(cells)} (N, K) lattice points (a shape is scored on the shortlist of "
                      f"the point nearest its (N, K)): {listed}", markup=False)
    console.print("predicted log(time / cuBLAS) = log(perf model / roofline floor) + bias, the bias linear in "
                  "log M between the range's ends; at each end, on a shape's (N, K), the mean of the (N', K') terms "
                  f"below, each weighted by weight x e^(-d / {BIAS_NK_SCALE}), d the octaves from (N, K) to (N', K')",
                  markup=False)
    if result.provenance:
        console.print("provenance: " + ", ".join(f"{k}={v}" for k, v in result.provenance.items()), markup=False)
        if _device_line(result.provenance, devices=devices):
            console.print(_device_line(result.provenance, devices=devices), markup=False)
    console.print("\n[bold]measurements[/bold]")
    _print_recordings(console, result)
    console.print("  resid = log(median / cuBLAS) - log(model / floor); term: the (N, K)'s residual at M "
                  "(linear in log M between its measured Ms)", markup=False)
    for anchor in result.anchors:
        rows = ConsoleTable(title=f"bias terms at M={anchor.m} (weight: e^-1 per octave of M beyond the (N, K)'s "
                                  "measured Ms); times in ms")
        for column in ("N", "K", "M", "median", "cuBLAS", "model", "resid", "term", "weight", "manifest"):
            rows.add_column(column, justify="right")
        for term in anchor.terms:
            written = anchor.manifest_terms.get((term.n, term.k))
            for position, point in enumerate(term.points):
                first = position == 0
                rows.add_row(str(term.n) if first else "", str(term.k) if first else "", str(point.shape[0]),
                             _cell(point.median_ms), _cell(point.cublas_ms), _cell(point.model_ms),
                             f"{point.value:+.4f}", f"{term.value:+.4f}" if first else "",
                             f"{term.weight:.4f}" if first else "",
                             ("-" if written is None else f"{written[0]:+.4f} x {written[1]:.4f}") if first else "")
        print_table(console, rows)
        stale = anchor.stale()
        if stale:
            console.print(f"note: at M={anchor.m} these rows give other terms than the manifest for "
                          f"{'; '.join(stale)}: re-run `tunetable select --selector {result.name}`", markup=False)
    if result.on_shape is not None:
        _print_shape_bias(console, result.on_shape)
        if cells:
            _, n, k = result.on_shape.shape
            point = nearest_cell(n=n, k=k)
            console.print(f"N={n}, K={k} is nearest the lattice point {point[0]}x{point[1]}: this entry is "
                          + ("on" if point in cells else "NOT on") + " its shortlist", markup=False)


def _print_shape_bias(console: Console, found) -> None:
    """How the entry's (N', K') terms count on one shape: distance, share, the bias at both ends and at M."""
    m, n, k = found.shape
    console.print(f"\n[bold]on M={m}, N={n}, K={k}[/bold]: share = weight x e^(-d / {found.scale}) over the end's sum",
                  markup=True)
    for anchor, terms, bias in found.ends:
        rows = ConsoleTable(title=f"bias at M={anchor} on this (N, K): {bias:+.4f}")
        for column in ("N'", "K'", "d (octaves)", "term", "weight", "share"):
            rows.add_column(column, justify="right")
        for term in terms:
            rows.add_row(str(term.n), str(term.k), f"{term.octaves:.3f}", f"{term.value:+.4f}", f"{term.weight:.4f}",
                         f"{term.share:.4f}")
        print_table(console, rows)
    console.print(f"bias at M={m}: {found.bias:+.4f} (log position {found.position:.3f} between the ends)",
                  markup=False)
    start, end = found.ends[0][0], found.ends[1][0]
    if not found.span[0] <= m < found.span[1]:
        console.print(f"note: M={m} is outside the entry's range [{found.span[0]}, {found.span[1]}) (anchors {start}, "
                      f"{end}): gemm() scores it for M in that range only (online tuning: also next to it)",
                      markup=False)


@click.command("trace", epilog=EPILOG)
@click.argument("what")
@click.argument("index", required=False, type=int)
@click.option("--params", "params_path", type=click.Path(dir_okay=False, path_type=Path), default=Path("params.yaml"),
              show_default=True)
@click.option("--shape", "shape", default=None, metavar="M,N,K",
              help="A selector entry only: also how each recorded (N, K)'s term counts on this shape.")
def command(what: str, index: int | None, params_path: Path, shape: str | None) -> None:
    """WHAT is a TABLE, dispatch list or selector (then INDEX), or FILE:LINE inside a generated region."""

    params = load_params(params_path)
    root = params_path.resolve().parent
    params = with_present_device_tables(params, root=root)   # docs/devices.md
    devices = device_specs(params, path=params_path)
    dispatch = {spec.name: spec for spec in dispatch_specs(params, path=params_path)}
    selectors = {spec.name: spec for spec in selector_specs(params, path=params_path)}
    location = tracing.parse_location(what)
    if location is not None and index is None:
        name, index = tracing.entry_at_line(root=root, specs=[*table_specs(params, path=params_path),
                                                              *dispatch.values(), *selectors.values()],
                                            file=location[0], line=location[1])
    elif index is None:
        raise TuneTableError("give TABLE INDEX, DISPATCH INDEX, SELECTOR INDEX or FILE:LINE", where="trace")
    else:
        name = what
    tracing.check_traceable(name=name, tables=list(params["tables"]), dispatch=list(dispatch), path=params_path,
                            selectors=list(selectors))
    if shape is not None and name not in selectors:
        raise TuneTableError(f"--shape applies to a selector entry ('{name}' is no selector)", where="--shape")
    on_shape = None if shape is None else parse_shape(shape, index=0)
    console = Console()
    owner = split_device_table(name)[1]
    if owner is not None:   # a device's table, dispatch list or selector: its measurements are that device's
        devices = tuple(spec for spec in devices if spec.key == owner)
    if name in selectors:
        tables, spec = _on_device(params, params_path=params_path, spec=selectors[name])
        _print_selector(console, selector_trace.trace_selector(root=root, spec=spec, tables=tables,
                                                               index=index, shape=on_shape), devices=devices)
    elif name in dispatch:
        tables, spec = _on_device(params, params_path=params_path, spec=dispatch[name])
        _print_dispatch(console, tracing.trace_dispatch(root=root, spec=spec, tables=tables, index=index),
                        devices=devices)
    else:
        _print_trace(console, tracing.trace(root=root, spec=table_spec(params, name, path=params_path), index=index),
                     devices=devices)
