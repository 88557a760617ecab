"""PNG plots that answer "where does a table beat cuBLAS, by how much, across M?".

Per (N, K), one row of two panels against M on a log2 axis: the speedup over cuBLAS (cuBLAS time /
the table's time, a line at 1.0), and the TFLOP/s of the table and of cuBLAS under the roofline
(DESIGN.md's floor, max(bytes / 4.13 TB/s, flops / 800 TFLOP/s): the H200's measured ceilings, labelled
as such). A change of a table (``tunetable audit --plot``) is drawn per (N, K) against M as well.

The bytes are deterministic: fixed fonts and sizes, no timestamp or software tag in the PNG, so the
main job rewrites the committed files byte for byte.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunetable.atomic import atomic_write_bytes
from tunetable.errors import TuneTableError
from tunetable.device_tables import split_device_table
from tunetable.kernels.families.devices import Ceilings, DeviceSpec
from tunetable.kernels.perfmodel import DEVICE_FLOPS, HBM_BYTES_PER_S, roofline_floor_s

# At most this many (N, K) rows of panels; more (N, K) (scale fixtures, a model's shapes) share one row.
MAX_NK_ROWS = 8
PANEL_INCHES = (6.0, 2.9)
HEADER_INCHES = 1.0      # the title and the legends above the panels
# Fixed margins around the panels (inches), what tight_layout found for the tables' figures (two-line y labels:
# 1.05 on the left) with a little room; tight_layout measured every tick label again: half of a figure's time.
MARGIN_INCHES = {"left": 1.1, "right": 0.15, "bottom": 0.6, "top": 0.67}   # top: below the header band
PANEL_SPACING = {"wspace": 0.14, "hspace": 0.39}   # between panels, as fractions of a panel (matplotlib's units)
DPI = 100
# axes.titley fixed: matplotlib places a title by measuring every tick label of the axes again at each draw (a fifth of
# a figure's time); the tables' axes have no labels above them, so the title lands where it did (same PNG bytes).
STYLE = {"font.family": "DejaVu Sans", "font.size": 10.0, "axes.titlesize": 10.5, "axes.titley": 1.0,
         "legend.fontsize": 8.5, "svg.hashsalt": "tunetable", "path.simplify": False}
REFERENCE_DEVICE = "h200"   # whose ceilings perfmodel's constants are (DESIGN.md): a device declaring none
# One colour per table of a dispatch list (and per revision of a change), in a fixed order.
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


@dataclass(frozen=True)
class PlotPoint:
    """One shape's times (ms) under a table and under cuBLAS; ``table`` names a dispatch list's serving table."""

    m: int
    n: int
    k: int
    tuned_ms: float | None
    cublas_ms: float | None
    table: str | None = None

    @property
    def speedup(self) -> float | None:
        """cuBLAS time / the table's time (> 1 beats cuBLAS); None where either is unmeasured."""
        return self.cublas_ms / self.tuned_ms if self.tuned_ms and self.cublas_ms else None

    def tflops(self, ms: float | None) -> float | None:
        """The shape's TFLOP/s at a time of ``ms``."""
        return 2.0 * self.m * self.n * self.k / (ms * 1e-3) / 1e12 if ms else None


def points_from_rows(rows: Sequence[Mapping[str, Any]]) -> list[PlotPoint]:
    """Plot points from plot-CSV rows (``results/plots/<name>.csv``: M, N, K, tuned_ms, cublas_ms[, table])."""

    def number(value: Any) -> float | None:
        return float(value) if value not in (None, "") else None

    return [PlotPoint(m=int(row["M"]), n=int(row["N"]), k=int(row["K"]), tuned_ms=number(row.get("tuned_ms")),
                      cublas_ms=number(row.get("cublas_ms")), table=(row.get("table") or None))
            for row in rows]


@dataclass(frozen=True)
class Roofline:
    """The device a plot's roofline is drawn for and its measured ceilings (None: perfmodel's, the H200's)."""

    device: str = REFERENCE_DEVICE
    ceilings: Ceilings | None = None

    def label(self) -> str:
        """'roofline (H100 ceilings: 3.04 TB/s, 782 TFLOP/s)'."""
        copy_tb_s, tflops = ((HBM_BYTES_PER_S / 1e12, DEVICE_FLOPS / 1e12) if self.ceilings is None
                             else (self.ceilings.copy_tb_s, self.ceilings.tflops))
        device = self.device if self.ceilings is not None else REFERENCE_DEVICE
        return f"roofline ({device.upper()} ceilings: {copy_tb_s:.2f} TB/s, {tflops:.0f} TFLOP/s)"

    def tflops(self, *, m: int, n: int, k: int) -> float:
        """The TFLOP/s a GEMM reaches at its roofline floor on this device (the attainable ceiling at this shape)."""
        return 2.0 * m * n * k / roofline_floor_s(m=m, n=n, k=k, ceilings=self.ceilings) / 1e12


def table_roofline(*, name: str, devices: Sequence[DeviceSpec], primary: str | None) -> Roofline:
    """The roofline of table ``name``'s device: ``gemm_mma.h100`` the h100's, an undecorated name the primary
    device's (params.yaml ``devices:``); a device declaring no ceilings, or none declared: perfmodel's."""
    device = split_device_table(name)[1] or primary
    spec = next((item for item in devices if item.key == device), None)
    return Roofline() if spec is None else Roofline(device=spec.key, ceilings=spec.ceilings)


def nk_groups(points: Sequence[PlotPoint]) -> list[tuple[tuple[int, int], str, list[PlotPoint]]]:
    """((N, K), title, points sorted by M) per (N, K), in (N, K) order; past MAX_NK_ROWS the rest pooled in one
    group, keyed (0, 0)."""
    by_nk: dict[tuple[int, int], list[PlotPoint]] = {}
    for point in points:
        by_nk.setdefault((point.n, point.k), []).append(point)
    keys = sorted(by_nk)
    shown = keys if len(keys) <= MAX_NK_ROWS else keys[:MAX_NK_ROWS - 1]
    groups = [((n, k), f"N = {n}, K = {k}", sorted(by_nk[(n, k)], key=lambda p: p.m)) for n, k in shown]
    rest = [p for key in keys[len(shown):] for p in by_nk[key]]
    if rest:
        groups.append(((0, 0), f"{len(keys) - len(shown)} other (N, K), pooled",
                       sorted(rest, key=lambda p: (p.m, p.n, p.k))))
    return groups


def table_png(*, name: str, points: Sequence[PlotPoint], roofline: Roofline = Roofline()) -> bytes:
    """The table against cuBLAS: per (N, K), speedup over M and TFLOP/s under ``roofline`` (PNG bytes)."""
    groups = nk_groups(points)
    with _pyplot() as plt:
        fig, axes = _figure(plt, rows=max(1, len(groups)))
        tables = sorted({p.table for p in points if p.table})
        for row, (_, title, group) in enumerate(groups):
            _speedup_panel(axes[row][0], title=title, series=_table_series(name=name, group=group, tables=tables))
            _roofline_panel(axes[row][1], title=title, group=group, label=name, roofline=roofline)
        if not groups:
            axes[0][0].set_title(f"{name}: no measured shape")
        fig.suptitle(f"{name}: the tuned table against cuBLAS (same harness, same shards), per (N, K)",
                     fontsize=12, y=1 - 0.1 / fig.get_figheight(), va="top")
        _legends(fig, axes[0])
        return _png(plt, fig)


def change_png(*, name: str, title: str, ylabel: str, reference: str,
               curves: Sequence[tuple[str, Sequence[tuple[int, int, int, float | None]]]]) -> bytes:
    """A table's change: per (N, K), each curve (label, (M, N, K, value) per shape) against M, a line at 1.0
    labelled ``reference`` (PNG bytes); the first curve dashed, the second solid."""
    as_points = [[PlotPoint(m=m, n=n, k=k, tuned_ms=1.0 if value else None, cublas_ms=value)
                  for m, n, k, value in values] for _, values in curves]
    grouped = [{key: (heading, group) for key, heading, group in nk_groups(points)} for points in as_points]
    keys = sorted({key for groups in grouped for key in groups}, key=lambda key: (key == (0, 0), key))
    with _pyplot() as plt:
        fig, axes = _figure(plt, rows=max(1, math.ceil(len(keys) / 2)), columns=2)
        for index, key in enumerate(keys):
            heading = next(groups[key][0] for groups in grouped if key in groups)
            series = [(label, COLOURS[number % len(COLOURS)], ("o--", "s-")[number % 2], groups.get(key, ("", []))[1])
                      for number, ((label, _), groups) in enumerate(zip(curves, grouped))]
            ax = axes[index // 2][index % 2]
            _speedup_panel(ax, title=heading, series=series, reference=reference)
            ax.set_ylabel(ylabel)
            ax.set_title(heading)
        for index in range(len(keys), len(axes) * 2):
            axes[index // 2][index % 2].set_visible(False)
        fig.suptitle(f"{name}: {title}", fontsize=12, y=1 - 0.1 / fig.get_figheight(), va="top")
        _legends(fig, axes[0][:1])
        return _png(plt, fig)


def audit_png(*, item: Any, rev_a: str, rev_b: str) -> bytes | None:
    """The before/after plot of one audited table (a tunetable.audit TableAudit), None when no shape is listed:
    a dispatch list's speedup over cuBLAS at each revision; a table's time at REV_A over its time at REV_B."""
    if not item.shapes:
        return None
    if item.dispatch:
        curves = [(rev_a, [(s.m, s.n, s.k, s.speedup_before) for s in item.shapes]),
                  (rev_b, [(s.m, s.n, s.k, s.speedup_after) for s in item.shapes])]
        return change_png(name=item.table, title=f"speedup over cuBLAS per (N, K), {rev_a} against {rev_b}",
                          ylabel="speedup vs cuBLAS\n(cuBLAS time / table time)", reference="cuBLAS (1.0)",
                          curves=curves)
    curves = [(f"{rev_b} (time at {rev_a} / time at {rev_b})", [(s.m, s.n, s.k, s.speedup) for s in item.shapes])]
    return change_png(name=item.table, title=f"the table at {rev_b} against {rev_a}, per (N, K)",
                      ylabel=f"speedup vs {rev_a}\n(> 1: faster at {rev_b})", reference=f"{rev_a} (1.0)",
                      curves=curves)


def redraw_from_csv(*, folder: Path, roofline_of: Callable[[str], Roofline] = lambda name: Roofline()) -> list[Path]:
    """Redraw every ``<name>.png`` of ``folder`` from its ``<name>.csv`` (the plot data the metrics wrote), under
    ``roofline_of(name)``; only the PNGs whose bytes change are rewritten (atomically). The PNGs rewritten."""
    written = []
    for data in sorted(folder.glob("*.csv")):
        with data.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        try:
            png = table_png(name=data.stem, points=points_from_rows(rows), roofline=roofline_of(data.stem))
        except (KeyError, ValueError) as exc:
            raise TuneTableError(f"not plot data (M, N, K, tuned_ms, cublas_ms): {exc}", path=data) from exc
        target = data.with_suffix(".png")
        if not target.is_file() or target.read_bytes() != png:
            atomic_write_bytes(target, png)
            written.append(target)
    return written


def _table_series(*, name: str, group: Sequence[PlotPoint], tables: Sequence[str]
                  ) -> list[tuple[str, str, str, list[PlotPoint]]]:
    """One line through the table's points; a dispatch list's points also marked by the table serving them."""
    series = [(name, "#444444", "-", list(group))]
    for index, table in enumerate(tables):
        series.append((f"served by {table}", COLOURS[index % len(COLOURS)], "o",
                       [p for p in group if p.table == table]))
    if not tables:
        series[0] = (name, COLOURS[0], "o-", list(group))
    return series


def _speedup_panel(ax: Any, *, title: str, series: Sequence[tuple[str, str, str, Sequence[PlotPoint]]],
                   reference: str = "cuBLAS (1.0)") -> None:
    """Speedup over cuBLAS against M (log2), a line at 1.0; each series (label, colour, style, points)."""
    ax.axhline(1.0, color="black", linewidth=1.0, linestyle="--", label=reference)
    for label, colour, style, group in series:
        measured = [(p.m, p.speedup) for p in group if p.speedup is not None]
        if measured:
            ax.plot([m for m, _ in measured], [s for _, s in measured], style, color=colour, label=label,
                    markersize=5, linewidth=1.4)
    _m_axis(ax)
    ax.set_ylabel("speedup vs cuBLAS\n(cuBLAS time / table time)")
    ax.set_title(f"{title}: speedup (> 1 beats cuBLAS)")


def _roofline_panel(ax: Any, *, title: str, group: Sequence[PlotPoint], label: str, roofline: Roofline) -> None:
    """TFLOP/s of the table and of cuBLAS against M, under the roofline ceiling of the group's shapes."""
    ceiling = [(p.m, roofline.tflops(m=p.m, n=p.n, k=p.k)) for p in group]
    ax.plot([m for m, _ in ceiling], [t for _, t in ceiling], "-", color="#888888", linewidth=2.0,
            label=roofline.label())
    for series_label, colour, ms_of in ((label, COLOURS[0], lambda p: p.tuned_ms),
                                         ("cuBLAS", "black", lambda p: p.cublas_ms)):
        measured = [(p.m, p.tflops(ms_of(p))) for p in group if ms_of(p)]
        if measured:
            ax.plot([m for m, _ in measured], [t for _, t in measured], "o-", color=colour, label=series_label,
                    markersize=4, linewidth=1.2)
    _m_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel("TFLOP/s (log)")
    ax.set_title(f"{title}: TFLOP/s under the roofline")


def _m_axis(ax: Any) -> None:
    """M on a log2 axis with plain-integer ticks."""
    from matplotlib.ticker import LogLocator, ScalarFormatter  # lazy: matplotlib is heavy, only plots need it

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=2))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_xlabel("M (log2)")
    ax.grid(True, which="major", color="#dddddd", linewidth=0.6)


def _figure(plt: Any, *, rows: int, columns: int = 2) -> tuple[Any, list[list[Any]]]:
    """A figure of ``rows`` x ``columns`` panels of a fixed size each (and a band on top for the title and the
    legends), the axes as a list of rows."""
    width, height = PANEL_INCHES
    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows + HEADER_INCHES), dpi=DPI,
                             squeeze=False)
    return fig, [list(row) for row in axes]


def _legends(fig: Any, first_row: Sequence[Any]) -> None:
    """One legend per column, in the band under the title: every panel of a column draws the same series."""
    for index, ax in enumerate(first_row):
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles))
        fig.legend(list(unique.values()), list(unique), loc="upper center", ncol=3 if len(unique) > 4 else 2,
                   bbox_to_anchor=((index + 0.5) / 2, 1 - 0.42 / fig.get_figheight()), frameon=False)


def _png(plt: Any, fig: Any) -> bytes:
    """The figure as PNG bytes without a timestamp or software tag (deterministic)."""
    width, height = fig.get_figwidth(), fig.get_figheight()
    fig.subplots_adjust(left=MARGIN_INCHES["left"] / width, right=1 - MARGIN_INCHES["right"] / width,
                        bottom=MARGIN_INCHES["bottom"] / height,
                        top=1 - (HEADER_INCHES + MARGIN_INCHES["top"]) / height, **PANEL_SPACING)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


class _pyplot:
    """``with _pyplot() as plt``: matplotlib's Agg pyplot under the fixed style (imported lazily: it is heavy)."""

    def __enter__(self) -> Any:
        import matplotlib  # lazy: heavy, and only a plot needs it (the CLI and the build import this module)

        matplotlib.use("Agg")
        from matplotlib import pyplot  # (lazy, with matplotlib)

        self._context = pyplot.rc_context(STYLE)
        self._context.__enter__()
        return pyplot

    def __exit__(self, *exc: object) -> None:
        self._context.__exit__(*exc)
