"""Shapes recorded from a running model: every distinct (M, N, K) gemm() serves, with its count.

``TUNETABLE_RECORD_SHAPES=FILE`` (read when the runtime is imported) or ``record_shapes(FILE)``
starts recording; counts are kept in memory (one dictionary increment per call) and appended to
FILE by ``flush()``, at ``stop_recording()`` and at interpreter exit. Each flush appends one block:

    # tunetable.gemm shapes: pid 4242, 2026-12-06T02:30:00Z, 3 shapes, 9 calls
    1,4096,4096,6
    1,14336,4096,2
    2048,4096,4096,1

(``M,N,K,count`` rows, no header: blocks of several processes or runs append to one file). It is the
CSV that ``tunetable shapes import FILE`` reads, merging repeated shapes by summing their counts.
Shapes are counted as gemm() sees them: a CUDA graph captured once and replayed many times counts
its GEMMs once (replays never reach the host).
"""

from __future__ import annotations

import atexit
import datetime as dt
import os
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

RECORD_ENV = "TUNETABLE_RECORD_SHAPES"


class ShapeRecorder:
    """Counts of (M, N, K) served since the last flush, appended to ``path`` on flush."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.counts: Counter[tuple[int, int, int]] = Counter()
        self.lock = threading.Lock()

    def add(self, m: int, n: int, k: int) -> None:
        """Count one call of (M, N, K)."""
        self.counts[(m, n, k)] += 1

    def flush(self) -> int:
        """Append the counts since the last flush to the file as one block; the number of shapes written."""
        with self.lock:
            counts, self.counts = self.counts, Counter()
        if not counts:
            return 0
        text = block_text(counts, pid=os.getpid(), when=dt.datetime.now(dt.timezone.utc))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One write of the whole block in append mode: blocks of concurrent processes never interleave lines.
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(text)
        return len(counts)


def block_text(counts: Counter[tuple[int, int, int]] | dict[tuple[int, int, int], int], *, pid: int,
               when: dt.datetime) -> str:
    """One flush's block: a comment line, then ``M,N,K,count`` rows sorted by (N, K, M)."""
    rows = sorted(counts.items(), key=lambda item: (item[0][1], item[0][2], item[0][0]))
    head = (f"# tunetable.gemm shapes: pid {pid}, {when.strftime('%Y-%m-%dT%H:%M:%SZ')}, {len(rows)} shapes, "
            f"{sum(counts.values())} calls")
    return "\n".join([head, *(f"{m},{n},{k},{count}" for (m, n, k), count in rows)]) + "\n"


_state: dict[str, ShapeRecorder] = {}
_listeners: list[Callable[[bool], None]] = []


def on_change(listener: Callable[[bool], None]) -> None:
    """Call ``listener(recording)`` whenever recording starts or stops (the torch operator's C++ kernel serves
    calls only while nothing records, so that every call is counted here)."""
    _listeners.append(listener)


def _changed() -> None:
    """Tell the listeners whether a recorder runs now."""
    for listener in _listeners:
        listener(active() is not None)


def active() -> ShapeRecorder | None:
    """The recorder gemm() counts into (None: not recording)."""
    return _state.get("recorder")


def record_shapes(path: str | os.PathLike[str]) -> ShapeRecorder:
    """Start recording gemm()'s shapes into ``path`` (a recorder already running is flushed and replaced)."""
    stop_recording()
    recorder = _state["recorder"] = ShapeRecorder(path)
    _changed()
    return recorder


def stop_recording() -> Path | None:
    """Flush and stop recording; the file written to (None: nothing was recording)."""
    recorder = _state.pop("recorder", None)
    if recorder is None:
        return None
    _changed()
    recorder.flush()
    return recorder.path


def _flush_at_exit() -> None:
    """Interpreter exit: append what is still counted."""
    recorder = active()
    if recorder is not None:
        recorder.flush()


def start_from_environment() -> ShapeRecorder | None:
    """``TUNETABLE_RECORD_SHAPES=FILE``: start recording into FILE (nothing when unset or empty)."""
    path = os.environ.get(RECORD_ENV, "").strip()
    return record_shapes(path) if path else None


atexit.register(_flush_at_exit)
