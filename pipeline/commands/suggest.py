"""``tunetable suggest``: per shape, the family and configuration gemm() runs, and its expected time vs cuBLAS."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
from rich.console import Console

from tunetable.console_table import ConsoleTable, print_table
from tunetable.device_tables import device_table_name
from tunetable.errors import TuneTableError
from tunetable.kernels.families import FAMILIES
from tunetable.kernels.runtime.decide import UnknownDeviceError, dispatcher, serving_device, shape_selector
from tunetable.kernels.runtime.devices import TableDevice, gpu_ceilings
from tunetable.kernels.runtime.selector_serve import SELECTOR
from tunetable.numbers import number_cell
from tunetable.params import TableSpec, load_params, selector_specs, table_spec
from tunetable.selector_fit import cublas_seconds, selector_model
from tunetable.selector_measurements import selector_tables, shared_yardstick
from tunetable.shapes import ShapeCount, read_workload
from tunetable.decision_preview import coverage_shapes, measured_times, smallest_recorded, suggest, workload_totals

EPILOG = """\b
Examples:
  tunetable suggest --shape 200,5120,5120 --shape 1,4096,4096
  tunetable suggest --shapes shapes/llama.csv     M,N,K[,count] rows (tunetable shapes import)
  tunetable suggest --device h100 --shape 1,4096,4096   what an H100 runs (its tables, else its fallback's)
A "selector" row is a prediction for a shape no table holds (measured where a coverage recording holds the
shape): `tunetable trace gemm_selector INDEX` shows the measurements behind it; add the shape to a table
(params.yaml) to tune it.
"""


def device_recording(spec: TableSpec, *, device: str) -> TableSpec:
    """``spec`` with ``device``'s recording (params.yaml ``devices:``; unchanged without devices)."""
    found = dict(spec.recordings)
    return dataclasses.replace(spec, recording=found[device]) if device in found else spec


def parse_shape(text: str, *, index: int) -> tuple[int, int, int]:
    """``M,N,K`` as three integers >= 1 (one error naming the option otherwise)."""

    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3 or not all(p.isdigit() for p in parts) or min(int(p) for p in parts) < 1:
        raise TuneTableError(f"expected M,N,K (three integers >= 1), got {text!r}", where=f"--shape[{index}]")
    m, n, k = (int(p) for p in parts)
    return m, n, k


def _us(seconds: float | None) -> str:
    """Seconds as microseconds at the one format of measured values (tunetable.numbers: 3 decimals; '-' unknown)."""
    return "-" if seconds is None else number_cell(seconds * 1e6)


def render(suggestions, *, console: Console, selector: str,
           smallest: tuple[tuple[int, int, int], float] | None = None) -> None:
    """One table row per shape, then the cannot-run reasons and the workload's count-weighted totals."""

    table = ConsoleTable(title="what gemm() runs per shape (speedup vs cuBLAS = cuBLAS time / time; > 1 is faster)")
    counted = any(s.count != 1 for s in suggestions)
    columns = ["M", "N", "K", *(["count"] if counted else []), "family", "config", "from", "time µs", "cuBLAS µs",
               "speedup vs cuBLAS", "times"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("family", "config", "from", "times") else "right")
    for s in suggestions:
        where = {"table": f"table {s.where}", "selector": f"selector {s.where}",
                 "fallback": f"fallback of {s.table}", "cannot run": "cannot run"}[s.source]
        basis = "-" if s.seconds is None else (
            "measured (coverage)" if s.coverage else "measured" if s.measured
            else "extrapolated" if s.extrapolated else "predicted, below floor" if s.below_floor else "predicted")
        speedup = s.speedup_vs_cublas
        table.add_row(*(str(v) for v in s.shape), *([str(s.count)] if counted else []), s.family or "-",
                      s.config_id or "-", where, _us(s.seconds), _us(s.cublas_seconds),
                      "-" if speedup is None else f"{speedup:.3f}", basis)
    print_table(console, table)
    for s in suggestions:
        if s.reason is not None:
            console.print(f"M={s.shape[0]}, N={s.shape[1]}, K={s.shape[2]}: cannot run: {s.reason}", markup=False)
    totals = workload_totals(suggestions)
    if totals is not None and len(suggestions) > 1:
        ours, cublas = totals
        guessed = sum(s.extrapolated for s in suggestions)
        console.print(f"workload (count x time): {ours * 1e3:.4g} ms against cuBLAS {cublas * 1e3:.4g} ms "
                      f"(speedup vs cuBLAS {cublas / ours:.3f})"
                      + (f", {guessed} of its {len(suggestions)} shapes extrapolated" if guessed else ""), markup=False)
    if smallest is not None and any(s.extrapolated for s in suggestions):
        (m, n, k), floor = smallest
        console.print(f"extrapolated rows: smaller than any recorded shape (roofline floor below {floor * 1e6:.3g} µs, "
                      f"that of {m}x{n}x{k}); a call's fixed cost, which no recording measured there, dominates, "
                      "so their times and speedups are the model's guess: measure them before relying on them",
                      markup=False)
    if any(s.below_floor and not s.extrapolated for s in suggestions):
        console.print("predicted, below floor rows: faster than the shape's roofline floor on this device's measured "
                      "ceilings (params.yaml devices:): not credible; gemm() runs the pick, the PyTorch operator "
                      "torch's matmul", markup=False)
    for recording, shapes in coverage_shapes(suggestions).items():
        named = ", ".join("x".join(map(str, shape)) for shape in shapes)
        console.print(f"measured (coverage) rows: the selector's pick as the coverage recording {recording} measured "
                      f"it at {named} (recorded for the selector's fit only; cuBLAS: that recording's rows on the "
                      "yardstick table rows use)", markup=False)
    if any(s.source == "selector" and not s.measured for s in suggestions):
        console.print(f"predicted rows: shapes no table holds (the shape selector; `tunetable trace {selector} INDEX` "
                      "shows its measurements); tune them by adding the shapes to a table in params.yaml",
                      markup=False)


@click.command("suggest", epilog=EPILOG)
@click.option("--shape", "shapes", multiple=True, help="M,N,K (repeatable).")
@click.option("--shapes", "shapes_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A workload: M,N,K[,count] CSV or a PyTorch profiler trace (as `tunetable shapes import` reads).")
@click.option("--params", "params_path", type=click.Path(dir_okay=False, path_type=Path), default=Path("params.yaml"),
              show_default=True)
@click.option("--device", default=None, help="A device of params.yaml `devices:` (default: the primary one): what "
              "gemm() runs there, from its tables or, without them, its fallback device's.")
def command(shapes: tuple[str, ...], shapes_file: Path | None, params_path: Path, device: str | None) -> None:
    """Per shape: the family and configuration gemm() runs (table entry or prediction), its time and cuBLAS's."""

    wanted = [ShapeCount(m=m, n=n, k=k) for m, n, k in (parse_shape(t, index=i) for i, t in enumerate(shapes))]
    if shapes_file is not None:
        wanted += read_workload(shapes_file)
    if not wanted:
        raise TuneTableError("give --shape M,N,K (repeatable) or --shapes FILE", where="suggest")
    params = load_params(params_path)
    try:
        serving = serving_device(device)
    except UnknownDeviceError as exc:
        raise TuneTableError(str(exc), where="--device") from None
    root = params_path.resolve().parent
    specs = selector_specs(params, path=params_path)
    names = list(dict.fromkeys(t for spec in specs for t in spec.tables)) or list(params["tables"])
    served = [device_recording(table_spec(params, name, path=params_path), device=serving) for name in names]
    # The selector's view of the recordings (coverage merged in where recorded); `select` says when there is none.
    found = selector_tables(root=root, specs=[spec for spec in served
                                              if spec.recording and (root / spec.recording).is_file()],
                            coverage=specs[0].coverage if specs else None)
    tables = list(shared_yardstick(found.tables))  # measured speedups against the yardstick the selector uses
    model = selector_model(tables=tables) if tables else None
    families = [FAMILIES[name] for name in sorted({spec.family for spec in map(
        lambda t: table_spec(params, t, path=params_path), params["tables"])}) if name in FAMILIES]
    # Floors on the device's measured ceilings (its own, else the serving device's), as the runtime judges them.
    ceilings = gpu_ceilings(TableDevice(device=serving, identified=device or serving))
    smallest = smallest_recorded(tables, ceilings=ceilings)
    results = [suggest(shape=w.shape, count=w.count, dispatcher=dispatcher(device=serving), families=families,
                       model=model, measured=measured_times(tables), selector_name=SELECTOR,
                       selector_entries=shape_selector(SELECTOR, device=serving).candidates,
                       cublas=lambda shape: cublas_seconds(tables=tables, shape=shape) if tables else None,
                       smallest_floor_s=None if smallest is None else smallest[1], ceilings=ceilings)
               for w in wanted]
    console = Console()
    if device is not None:
        whose = "its own tables" if serving == device else f"no tables of its own: {serving}'s tables serve it"
        console.print(f"device {device}: {whose}", markup=False)
    other = None if serving == serving_device() else serving     # another device's tables: their own names
    render([dataclasses.replace(s, where=_traced_as(s.where, device=other)) for s in results], console=console,
           selector=_traced_as(SELECTOR, device=other), smallest=smallest)


def _traced_as(where: str | None, *, device: str | None) -> str | None:
    """A row's place as `tunetable trace` takes it: ``gemm_mma[0]``, on another device ``gemm_mma.h100[0]``."""
    if where is None or device is None:
        return where
    name, bracket, index = where.partition("[")
    return f"{device_table_name(base=name, device=device)}{bracket}{index}"
