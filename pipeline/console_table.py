"""The one renderer for every table the CLI prints: values are never split, on a terminal or in a pipe.

A table that fits the width is printed as a rich table with every cell on its natural lines. One
that does not fit folds its widest columns *between* values (after ``, `` or a space, or between
the ``NAME=value`` pairs of a ``/``-joined spec), never inside one; when even that cannot fit, the
table becomes one record per line (``name=value  name=value``). The width is the terminal's; in a
pipe it is ``$COLUMNS`` when set, else unlimited (one row per line, so ``grep`` sees whole rows).
Titles print on their own line. Cells are plain text: rich markup in a value is never interpreted.

``ConsoleTable`` takes rich's ``add_column`` / ``add_row`` calls; ``add_gap(n)`` marks ``n`` rows
left out of a bounded view. The layout decision (``plan_layout``) is a pure function of the cells.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from rich import box as rich_box
from rich.console import Console
from rich.segment import Segments
from rich.table import Table
from rich.text import Text

Justify = Literal["left", "right", "center"]
# Zero-width fold points: after ", " / "," / a space, and between the NAME=value pairs of "A=1/B=2".
FOLD_POINT = re.compile(r"(?<=,)|(?<= )|(?<=/)(?=\$?[A-Za-z_][A-Za-z0-9_]*=)")
# Where a fold is preferred: between list items and NAME=value pairs; spaces inside an item only when it must.
ITEM_POINT = re.compile(r"(?<=,)|(?<=/)(?=\$?[A-Za-z_][A-Za-z0-9_]*=)")
# A header is a name, not a value: it may also fold after an underscore (BLOCK_ / M).
HEADER_FOLD_POINT = re.compile(FOLD_POINT.pattern + r"|(?<=_)(?=[A-Za-z0-9])")
GAP_MARK = "…"


@dataclass(frozen=True)
class Column:
    """A column: its header, justification and optional rich style."""

    name: str
    justify: Justify = "left"
    style: str | None = None


@dataclass
class ConsoleTable:
    """Rows of plain-text cells under named columns; print with ``print_table``."""

    title: str | None = None
    show_header: bool = True
    boxed: bool = True
    columns: list[Column] = field(default_factory=list)
    rows: list[tuple[tuple[str, ...], str | None]] = field(default_factory=list)
    gaps: dict[int, int] = field(default_factory=dict)

    def add_column(self, name: str, *, justify: Justify = "left", style: str | None = None) -> None:
        """Append a column."""
        self.columns.append(Column(name=str(name), justify=justify, style=style))

    def add_row(self, *cells: object, style: str | None = None) -> None:
        """Append a row; ``None`` prints as an empty cell, anything else as ``str(value)``."""
        if len(cells) != len(self.columns):
            raise ValueError(f"row has {len(cells)} cells for {len(self.columns)} columns")
        self.rows.append((tuple("" if c is None else str(c) for c in cells), style))

    def add_gap(self, count: int) -> None:
        """Mark ``count`` rows left out here (a bounded view); nothing when ``count`` is 0."""
        if count > 0:
            self.gaps[len(self.rows)] = self.gaps.get(len(self.rows), 0) + count


@dataclass(frozen=True)
class Layout:
    """How a table prints: ``table`` with these column widths and folded cells, or ``records``."""

    mode: Literal["table", "records"]
    widths: tuple[int, ...] = ()
    headers: tuple[str, ...] = ()
    cells: tuple[tuple[str, ...], ...] = ()


def overhead(*, columns: int, boxed: bool) -> int:
    """Characters a rich table adds beyond its cells: one space of padding each side, plus the borders."""
    return 3 * columns + 1 if boxed else 2 * columns


def tokens(text: str, *, points: re.Pattern[str] = FOLD_POINT) -> list[str]:
    """A cell's unbreakable pieces: split only at fold points, so no value is ever cut."""
    return [piece for line in text.split("\n") for piece in points.split(line) if piece]


def fold(text: str, *, width: int, points: re.Pattern[str] = FOLD_POINT) -> str:
    """Pack a cell into lines of at most ``width``: whole items first (``a: 1 -> 2, b: 3``), an item's words
    only when the item alone is wider (a piece longer than ``width`` keeps its own line)."""
    lines: list[str] = []
    for paragraph in text.split("\n"):
        items = [p for p in ITEM_POINT.split(paragraph) if p] if points is FOLD_POINT else [paragraph]
        pieces = [piece for item in items
                  for piece in ([item] if len(item.strip()) <= width else [p for p in points.split(item) if p])]
        current = ""
        for piece in pieces:
            if current and len((current + piece).rstrip()) > width:
                lines.append(current.rstrip())
                current = piece.lstrip()
            else:
                current += piece
        lines.append(current.rstrip())
    return "\n".join(lines)


def longest_line(text: str) -> int:
    """The length of a cell's longest line."""
    return max((len(line) for line in text.split("\n")), default=0)


def plan_layout(*, headers: Sequence[str], cells: Sequence[Sequence[str]], width: int | None,
                boxed: bool = True) -> Layout:
    """Natural widths when they fit ``width`` (None: unlimited); else fold the widest columns; else records."""
    count = len(headers)
    natural = [max([longest_line(headers[i]), *(longest_line(row[i]) for row in cells)]) for i in range(count)]
    extra = overhead(columns=count, boxed=boxed)
    if width is None or sum(natural) + extra <= width:
        return Layout(mode="table", widths=tuple(natural), headers=tuple(headers),
                      cells=tuple(tuple(row) for row in cells))
    least = [max(len(piece.strip()) for piece in [*tokens(headers[i], points=HEADER_FOLD_POINT),
                                                  *(p for row in cells for p in tokens(row[i])), ""])
             for i in range(count)]
    if sum(least) + extra > width:
        return Layout(mode="records")
    widths = list(natural)
    excess = sum(widths) + extra - width
    while excess > 0:
        widest = max((i for i in range(count) if widths[i] > least[i]), key=lambda i: (widths[i], -i))
        widths[widest] -= 1
        excess -= 1
    return Layout(mode="table", widths=tuple(widths),
                  headers=tuple(fold(h, width=w, points=HEADER_FOLD_POINT) for h, w in zip(headers, widths)),
                  cells=tuple(tuple(fold(c, width=w) for c, w in zip(row, widths)) for row in cells))


def available_width(console: Console) -> int | None:
    """The terminal's width; in a pipe ``$COLUMNS`` when set, else None (unlimited)."""
    if console.is_terminal:
        return console.width
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def record_line(*, headers: Sequence[str], cells: Sequence[str]) -> str:
    """One row as ``name=value`` pairs on one line (a cell's own line breaks become spaces)."""
    return "  ".join(f"{h}={' '.join(c.split(chr(10)))}" for h, c in zip(headers, cells))


def print_table(console: Console, table: ConsoleTable) -> None:
    """Print ``table`` whole: a rich table that fits, folded between values, or one record per line."""
    if table.title:
        console.print(Text(table.title, style="table.title"), soft_wrap=True)
    headers = [c.name for c in table.columns]
    cells = [row for row, _ in table.rows]
    layout = plan_layout(headers=headers, cells=cells, width=available_width(console), boxed=table.boxed)
    if layout.mode == "records":
        for index, (row, style) in enumerate(table.rows):
            _print_gap(console, table.gaps.get(index))
            console.print(Text(record_line(headers=headers, cells=row), style=style or ""), soft_wrap=True)
        _print_gap(console, table.gaps.get(len(table.rows)))
        return
    rich_table = Table(show_header=table.show_header, box=rich_box.HEAVY_HEAD if table.boxed else None,
                       expand=False, header_style="bold")
    for column, header, width in zip(table.columns, layout.headers, layout.widths):
        rich_table.add_column(Text(header), justify=column.justify, style=column.style, no_wrap=True,
                              min_width=width, max_width=width, overflow="fold")
    for index, ((_, style), row) in enumerate(zip(table.rows, layout.cells)):
        if index in table.gaps:
            rich_table.add_row(*gap_cells(count=table.gaps[index], widths=layout.widths), style="dim")
        rich_table.add_row(*(Text(cell) for cell in row), style=style)
    if len(table.rows) in table.gaps:
        rich_table.add_row(*gap_cells(count=table.gaps[len(table.rows)], widths=layout.widths), style="dim")
    printed = sum(layout.widths) + overhead(columns=len(layout.widths), boxed=table.boxed)
    # Rendered at the table's own width (a pipe may be wider than rich's default 80), then written uncropped.
    lines = console.render_lines(rich_table, console.options.update_width(max(printed, 1)), new_lines=True)
    console.print(Segments(itertools.chain.from_iterable(lines)), crop=False, end="")
    if any(len(gap_label(count)) > max(layout.widths) for count in table.gaps.values()):
        _print_gap(console, sum(table.gaps.values()))


def gap_cells(*, count: int, widths: Sequence[int]) -> list[Text]:
    """The marker row of left-out rows: ``… N rows`` in the widest column when it fits there, else ``…``."""
    label = gap_label(count)
    widest = max(range(len(widths)), key=lambda i: (widths[i], -i))
    return [Text(label if i == widest and len(label) <= widths[i] else GAP_MARK) for i in range(len(widths))]


def gap_label(count: int) -> str:
    """The in-table text for ``count`` left-out rows."""
    return f"{GAP_MARK} {count:,} rows"


def _print_gap(console: Console, count: int | None) -> None:
    """The records-mode line for left-out rows."""
    if count:
        console.print(f"{GAP_MARK} {count:,} rows not shown", markup=False, highlight=False, soft_wrap=True)
