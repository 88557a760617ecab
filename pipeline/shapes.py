"""A workload's GEMM shapes: read from a CSV or a PyTorch profiler trace, written as ``M,N,K,count`` rows.

CSV: one shape per line, ``M,N,K`` or ``M,N,K,count`` (an optional header line naming those
columns; blank lines and lines starting with ``#`` are skipped). Every value is a positive
integer; a count defaults to 1.
The file ``TUNETABLE_RECORD_SHAPES`` makes (``tunetable.kernels.runtime.record``: the shapes a running
model's ``tunetable.gemm`` served) is such a CSV: blocks of ``M,N,K,count`` rows, each after a
``# tunetable.gemm shapes: ...`` comment line.

Trace: the chrome-trace JSON that ``torch.profiler`` exports (``prof.export_chrome_trace``) when
profiling with ``record_shapes=True``: a mapping with ``traceEvents`` whose CPU-op events carry
``args["Input Dims"]``. The GEMMs of C = A·Bᵀ form (M x K times N x K) are read from

- ``aten::mm`` (A [M, K], B [K, N]) and ``aten::addmm`` (bias, A [M, K], B [K, N]);
- ``aten::matmul`` (A [..., M, K], B [K, N]: leading dims of A flattened into M);
- ``aten::linear`` (input [..., K], weight [N, K]: N is the weight's first dim; leading dims of
  the input flattened into M);
- ``aten::bmm`` (A [b, M, K], B [b, K, N]: b GEMMs of (M, N, K)).

An op nested in another GEMM op of the list (``aten::linear`` calls ``aten::addmm`` or
``aten::matmul``, ``aten::matmul`` calls ``aten::mm``) is counted once, at the outermost op:
events are nested by their time span on the same thread. Shapes are sorted by (N, K, M) and
duplicates merged with their counts summed.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunetable.errors import TuneTableError
from tunetable.inputs import check_int, parse_json, read_input_text, shape_value

HEADER = ("M", "N", "K", "count")
GEMM_OPS = ("aten::mm", "aten::addmm", "aten::matmul", "aten::linear", "aten::bmm")
MAX_DIM = 2**31 - 1
MAX_TRACE_BYTES = 1 << 30    # a trace this large is not a profiler export we can hold
MAX_COUNT = MAX_DIM          # a workload's calls of one shape: what parse_csv reads back


@dataclass(frozen=True, order=True)
class ShapeCount:
    """One GEMM shape of a workload and how many times it runs."""

    n: int
    k: int
    m: int
    count: int = 1

    @property
    def shape(self) -> tuple[int, int, int]:
        """(M, N, K)."""
        return (self.m, self.n, self.k)


def merged(shapes: Iterable[ShapeCount]) -> list[ShapeCount]:
    """Shapes sorted by (N, K, M) with duplicates' counts summed."""
    counts: dict[tuple[int, int, int], int] = {}
    for item in shapes:
        counts[item.shape] = counts.get(item.shape, 0) + item.count
    return sorted(ShapeCount(m=m, n=n, k=k, count=c) for (m, n, k), c in counts.items())


def csv_text(shapes: Sequence[ShapeCount]) -> str:
    """The ``M,N,K,count`` file of a workload (header, then one line per shape)."""
    lines = [",".join(HEADER)] + [f"{s.m},{s.n},{s.k},{s.count}" for s in shapes]
    return "\n".join(lines) + "\n"


def _positive(text: str, *, name: str, path: Path, line: int) -> int:
    """A positive integer field of a CSV line (else one error naming the file, line and column)."""
    value = text.strip()
    try:
        number = int(value, 10)
    except ValueError:
        raise TuneTableError(f"{name} must be an integer, got {value!r}", path=path, where=f"line {line}") from None
    if number < 1:
        raise TuneTableError(f"{name} must be >= 1, got {number}", path=path, where=f"line {line}")
    if number > MAX_DIM:
        raise TuneTableError(f"{name} must be <= {MAX_DIM}, got {number}", path=path, where=f"line {line}")
    return number


def numbered_csv_rows(text: str, *, path: Path) -> list[tuple[int, ShapeCount]]:
    """(line number, shape) of each shape of a CSV text (``M,N,K[,count]``), in file order."""
    found: list[tuple[int, ShapeCount]] = []
    try:
        rows = list(enumerate(csv.reader(io.StringIO(text)), start=1))
    except csv.Error as exc:   # a field past csv's size limit, a NUL byte
        raise TuneTableError(f"not a CSV of M,N,K[,count] lines: {exc}", path=path) from None
    for number, row in rows:
        cells = [cell.strip() for cell in row]
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        if [c.lower() for c in cells] in (["m", "n", "k"], ["m", "n", "k", "count"]):
            if found:
                raise TuneTableError("header line after the first shape", path=path, where=f"line {number}")
            continue
        if len(cells) not in (3, 4):
            raise TuneTableError(f"expected M,N,K or M,N,K,count, got {len(cells)} columns", path=path,
                                 where=f"line {number}")
        m, n, k = (_positive(cells[i], name=name, path=path, line=number) for i, name in enumerate("MNK"))
        count = _positive(cells[3], name="count", path=path, line=number) if len(cells) == 4 else 1
        found.append((number, ShapeCount(m=m, n=n, k=k, count=count)))
    if not found:
        raise TuneTableError("no shapes (expected lines M,N,K or M,N,K,count)", path=path)
    return found


def parse_csv(text: str, *, path: Path) -> list[ShapeCount]:
    """Shapes of a CSV text (``M,N,K[,count]``), in file order."""
    return [shape for _, shape in numbered_csv_rows(text, path=path)]


def read_shape_lines(path: Path) -> list[tuple[int, tuple[int, int, int]]]:
    """(line number, (M, N, K)) of each line of a shapes CSV (data/validation_shapes.csv, coverage shapes), in file
    order, read through ``tunetable.inputs``; a line's count, if any, is not read."""
    if not path.is_file():
        raise TuneTableError("no such file", path=path)
    return [(number, item.shape) for number, item in numbered_csv_rows(read_input_text(path), path=path)]


def _dims(value: Any) -> list[int] | None:
    """A tensor's dims from ``Input Dims`` (None when it is not a list of non-negative ints)."""
    if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in value):
        return None
    return list(value)


def gemm_of(name: str, inputs: Sequence[Any]) -> tuple[int, int, int, int] | None:
    """(M, N, K, multiplicity) of one profiler op from its input dims (None: not a GEMM we can read)."""
    dims = [_dims(d) for d in inputs]
    if name == "aten::addmm":
        dims = dims[1:]
    if len(dims) < 2 or dims[0] is None or dims[1] is None:
        return None
    a, b = dims[0], dims[1]
    if name in ("aten::mm", "aten::addmm"):
        if len(a) == 2 and len(b) == 2 and a[1] == b[0]:
            return a[0], b[1], a[1], 1
        return None
    if name == "aten::linear":
        if len(a) >= 1 and len(b) == 2 and a[-1] == b[1]:
            return math.prod(a[:-1]), b[0], b[1], 1
        return None
    if name == "aten::matmul":
        if len(a) >= 2 and len(b) == 2 and a[-1] == b[0]:
            return math.prod(a[:-1]), b[1], b[0], 1
        if len(a) >= 3 and len(b) == len(a) and a[-1] == b[-2] and a[:-2] == b[:-2]:
            return a[-2], b[-1], a[-1], math.prod(a[:-2])   # batched: one GEMM per leading index
        return None
    if name == "aten::bmm":
        if len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
            return a[1], b[2], a[2], a[0]
        return None
    return None


def _events(data: Any, *, path: Path) -> list[Mapping[str, Any]]:
    """The trace's events (a chrome trace: ``{"traceEvents": [...]}``, or the bare list)."""
    events = data.get("traceEvents") if isinstance(data, Mapping) else data
    if not isinstance(events, list):
        raise TuneTableError("not a PyTorch profiler trace (expected a JSON object with 'traceEvents', as "
                             "torch.profiler's export_chrome_trace writes)", path=path)
    return events


def parse_trace(data: Any, *, path: Path) -> list[ShapeCount]:
    """The outermost GEMM ops of a profiler trace as shapes (events index 0-based in errors)."""
    gemms = []
    for index, event in enumerate(_events(data, path=path)):
        if not isinstance(event, Mapping) or event.get("name") not in GEMM_OPS or event.get("ph", "X") != "X":
            continue
        args = event.get("args")
        if not isinstance(args, Mapping) or "Input Dims" not in args:
            raise TuneTableError(f"{event['name']} has no 'Input Dims': profile with record_shapes=True",
                                 path=path, where=f"traceEvents[{index}]")
        found = gemm_of(str(event["name"]), args["Input Dims"] if isinstance(args["Input Dims"], list) else [])
        if found is None:
            raise TuneTableError(f"{event['name']} with input dims {args['Input Dims']!r} is not a GEMM this "
                                 "reader knows", path=path, where=f"traceEvents[{index}]")
        try:
            start, length = float(event.get("ts", 0.0)), float(event.get("dur", 0.0))
        except (TypeError, ValueError):
            raise TuneTableError("ts / dur must be numbers", path=path, where=f"traceEvents[{index}]") from None
        thread = (event.get("pid"), event.get("tid"))
        if not all(part is None or (isinstance(part, (int, str)) and not isinstance(part, bool)) for part in thread):
            raise TuneTableError("pid / tid must be integers or text", path=path, where=f"traceEvents[{index}]")
        if not (math.isfinite(start) and math.isfinite(length)):
            raise TuneTableError("ts / dur must be finite numbers", path=path, where=f"traceEvents[{index}]")
        gemms.append((index, thread, start, start + length, found))
    if not gemms:
        raise TuneTableError(f"no GEMM ops ({', '.join(GEMM_OPS)}) in the trace", path=path)
    # Outermost only: an op inside another GEMM op's span on the same thread is its implementation.
    shapes = []
    open_spans: dict[Any, list[float]] = {}
    for index, thread, start, end, (m, n, k, times) in sorted(gemms, key=lambda g: (str(g[1]), g[2], -g[3], g[0])):
        stack = [stop for stop in open_spans.get(thread, []) if stop > start]
        if not stack:
            if min(m, n, k) < 1:
                raise TuneTableError(f"GEMM with a zero dim (M={m}, N={n}, K={k})", path=path,
                                     where=f"traceEvents[{index}]")
            for value, name in ((m, "M"), (n, "N"), (k, "K")):   # flattened leading dims can pass int32
                shape_value(value, name=name, path=path, where=f"traceEvents[{index}]")
            count = check_int(times, name="count", low=1, high=MAX_COUNT, path=path, where=f"traceEvents[{index}]")
            shapes.append(ShapeCount(m=m, n=n, k=k, count=count))
        open_spans[thread] = [*stack, end]
    return shapes


def read_workload(path: Path) -> list[ShapeCount]:
    """A workload file's shapes, merged: a ``.json`` file is a profiler trace, anything else CSV.

    Read through ``tunetable.inputs`` (size, UTF-8, JSON nesting depth and integer digits).
    """
    if not path.is_file():
        raise TuneTableError("no such file", path=path)
    text = read_input_text(path, limit=MAX_TRACE_BYTES)
    if path.suffix.lower() == ".json" or text.lstrip().startswith(("{", "[")):
        shapes = merged(parse_trace(parse_json(text, path=path, invalid="not JSON"), path=path))
    else:
        shapes = merged(parse_csv(text, path=path))
    for item in shapes:   # what `shapes import` writes, parse_csv must read back
        if item.count > MAX_COUNT:
            raise TuneTableError(f"shape M={item.m} N={item.n} K={item.k} runs {item.count} times in all, more than "
                                 f"{MAX_COUNT}", path=path)
    return shapes
