"""The one place where external inputs are read and checked: the same bounds for every reader.

Every file or string a user hands tunetable from outside the project's own outputs goes through
here (docs/trust.md lists them): Kernel Tuner caches (``kt import``), profiler traces and shape
CSVs (``shapes import``, params' ``shapes.list``), recordings under data/recordings/ (replay, the
Snakefile's plan, the selector), JSON sidecars, ``--query`` and ``--filter`` strings. The bounds:

- size: a file larger than ``MAX_INPUT_BYTES`` is refused before it is read;
- text: UTF-8 only (``yamlio.decode_utf8``: the byte and line of the first bad byte);
- JSON: nesting at most ``MAX_DEPTH`` levels, integers of at most ``MAX_INT_DIGITS`` digits,
  no ``NaN`` / ``Infinity`` literals; YAML goes through ``yamlio`` (safe, strict, bounded);
- integers: ``int`` and never ``bool``; shape values (M, N, K) in 1 .. ``INT32_MAX``;
- names that become part of a file name: ``SAFE_NAME`` (letters, digits, ``_ . + -``, no ``..``);
- writes: ``inside`` refuses a target that resolves outside its output folder.

Each failure is one ``TuneTableError`` naming the file and the place (exit status 2). At module level
it imports the standard library, ``tunetable.errors`` and ``tunetable.yamlio`` only (the Snakefile's
parse and the bench worker import it); pandas, numpy and the recording helpers load where used.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tunetable.errors import TuneTableError
from tunetable.kernels.families.entry_fields import finite_number
from tunetable.yamlio import decode_utf8, read_bytes

MAX_INPUT_BYTES = 1 << 30        # a profiler trace of a long run is ~100s of MB; nothing we read is larger
MAX_DEPTH = 64                   # a KT cache is 3 levels deep, a profiler trace 4, a manifest 3
MAX_INT_DIGITS = 20              # int64 has 19 digits; Python would read 4,300 (and then refuse with a traceback)
INT32_MAX = 2**31 - 1            # shape values: the kernels index with int32
INT64_MAX = 2**63 - 1
MAX_QUERY_CHARS = 4096           # a --query / --filter string (the rule parser's own bound)
MAX_NAME_CHARS = 128
SHAPE_KEYS = ("M", "N", "K")
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


class _Refused(ValueError):
    """Internal: a JSON value refused while parsing (its message is the one error line's)."""


def _place(where: str | None) -> str | None:
    """A place for an error line (None stays None)."""
    return where or None


# -- files ---------------------------------------------------------------------------------------------------

def read_input_bytes(path: str | Path, *, limit: int = MAX_INPUT_BYTES) -> bytes:
    """A file's bytes, refused when missing, a folder, unreadable or larger than ``limit``."""
    source = Path(path)
    try:
        size = source.stat().st_size
    except FileNotFoundError:
        raise TuneTableError("no such file", path=source) from None
    except OSError as exc:
        raise TuneTableError(f"cannot read: {exc.strerror or exc}", path=source) from None
    if size > limit:
        raise TuneTableError(f"{size} bytes, larger than the {limit} an input may hold", path=source)
    return read_bytes(source)


def read_input_text(path: str | Path, *, limit: int = MAX_INPUT_BYTES) -> str:
    """A UTF-8 text file within ``limit`` bytes (universal newlines); else one error line."""
    text = decode_utf8(read_input_bytes(path, limit=limit), path=path)
    return text.replace("\r\n", "\n").replace("\r", "\n")


# -- JSON ----------------------------------------------------------------------------------------------------

def _bounded_int(text: str) -> int:
    """A JSON integer literal of at most MAX_INT_DIGITS digits (json's parse_int hook)."""
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {digits} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _no_constant(text: str) -> Any:
    """NaN / Infinity are not JSON (json's parse_constant hook)."""
    raise _Refused(f"{text} is not a JSON value")


def nesting_depth(value: Any) -> int:
    """Levels of lists / mappings in a parsed value (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Iterable[Any] = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            return depth
        stack.extend((child, depth) for child in children)
    return deepest


def check_int_bits(value: Any, *, path: str | Path | None, bits: int = 64) -> None:
    """Refuse an integer anywhere in a parsed document wider than ``bits`` (a YAML ``0x`` literal has no digit
    limit, and printing a 5,000-digit one raises far from here), and nesting past MAX_DEPTH; the error names
    the place (``params[3].M``)."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise TuneTableError(f"nested deeper than {MAX_DEPTH} levels", path=path, where=where or None)
        if isinstance(item, Mapping):
            stack.extend((child, f"{where}.{key}" if where else str(key), depth + 1) for key, child in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((child, f"{where}[{index}]", depth + 1) for index, child in enumerate(item))
        elif isinstance(item, int) and not isinstance(item, bool) and item.bit_length() > bits:
            raise TuneTableError(f"an integer of {item.bit_length()} bits (at most {bits})", path=path,
                                 where=where or None)


def check_depth(value: Any, *, path: str | Path | None, where: str | None = None) -> None:
    """Refuse a value nested deeper than MAX_DEPTH levels."""
    if nesting_depth(value) > MAX_DEPTH:
        raise TuneTableError(f"nested deeper than {MAX_DEPTH} levels", path=path, where=_place(where))


def parse_json(text: str, *, path: str | Path | None, invalid: str = "malformed JSON") -> Any:
    """Parse JSON text within the bounds (depth, integer digits, no NaN literal); else one error line.

    ``invalid`` starts the message of text that is not JSON at all (``not a Kernel Tuner cache``).
    """
    try:
        data = json.loads(text, parse_int=_bounded_int, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise TuneTableError(f"{invalid}: {exc.msg}", path=path, where=f"line {exc.lineno}") from None
    except _Refused as exc:
        raise TuneTableError(str(exc), path=path) from None
    except (RecursionError, MemoryError):
        raise TuneTableError(f"nested deeper than {MAX_DEPTH} levels", path=path) from None
    except ValueError as exc:   # a float literal Python cannot hold, and the like
        raise TuneTableError(f"{invalid}: {str(exc)[:120]}", path=path) from None
    check_depth(data, path=path)
    return data


def load_json_file(path: str | Path, *, limit: int = MAX_INPUT_BYTES, invalid: str = "malformed JSON") -> Any:
    """Read and parse a JSON input file within the bounds."""
    return parse_json(read_input_text(path, limit=limit), path=path, invalid=invalid)


# -- values --------------------------------------------------------------------------------------------------

def is_int(value: Any) -> bool:
    """A Python or numpy integer, never a bool."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return type(value).__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind in "iu"


def check_int(value: Any, *, name: str, low: int, high: int, path: str | Path | None, where: str | None) -> int:
    """``value`` as an int within [low, high] (no bool, no float, no string); else one error line."""
    if not is_int(value):
        raise TuneTableError(f"{name} must be an integer, got {_shown(value)}", path=path, where=_place(where))
    number = int(value)
    if not low <= number <= high:
        raise TuneTableError(f"{name} must be in {low}..{high}, got {_shown(number)}", path=path, where=_place(where))
    return number


def shape_value(value: Any, *, name: str, path: str | Path | None, where: str | None) -> int:
    """A GEMM dimension (M, N or K): an int in 1 .. INT32_MAX."""
    return check_int(value, name=name, low=1, high=INT32_MAX, path=path, where=where)


def check_shape(shape: Iterable[Any], *, path: str | Path | None, where: str | None) -> tuple[int, int, int]:
    """(M, N, K) of three GEMM dimensions, each checked by ``shape_value``."""
    values = list(shape)
    if len(values) != 3:
        raise TuneTableError(f"a shape is [M, N, K], got {_shown(values)}", path=path, where=_place(where))
    m, n, k = (shape_value(v, name=name, path=path, where=where) for v, name in zip(values, SHAPE_KEYS))
    return m, n, k


def _shown(value: Any) -> str:
    """A value for an error line, cut to 60 characters (a huge int is named by its size)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- names and paths -----------------------------------------------------------------------------------------

def safe_name(text: Any, *, what: str, path: str | Path | None, where: str | None) -> str:
    """A name that may become part of a file name: SAFE_NAME, at most MAX_NAME_CHARS, never ``..``."""
    if not isinstance(text, str) or not SAFE_NAME.fullmatch(text) or ".." in text or len(text) > MAX_NAME_CHARS:
        raise TuneTableError(f"{what} {_shown(text)} is not a plain name (letters, digits, _ . + -)", path=path,
                             where=_place(where))
    return text


def inside(target: str | Path, *, folder: str | Path) -> Path:
    """``target`` when it resolves inside ``folder`` (symlinks followed); else one error line naming both."""
    base = os.path.realpath(folder)
    resolved = os.path.realpath(target)
    if os.path.commonpath([base, resolved]) != base or resolved == base:
        raise TuneTableError(f"would be written outside its output folder {folder}", path=target)
    return Path(target)


# -- query strings -------------------------------------------------------------------------------------------

def check_expression_text(source: Any, *, what: str, where: str | None, limit: int = MAX_QUERY_CHARS) -> str:
    """A --query / --filter string of at most ``limit`` characters, brackets nested at most MAX_DEPTH deep."""
    if not isinstance(source, str):
        raise TuneTableError(f"{what} must be text", where=where)
    if len(source) > limit:
        raise TuneTableError(f"{what} of {len(source)} characters (at most {limit})", where=where)
    depth = deepest = 0
    for char in source:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth -= 1
    if deepest > MAX_DEPTH:
        raise TuneTableError(f"{what} nested deeper than {MAX_DEPTH} brackets", where=where)
    return source


# -- recordings ----------------------------------------------------------------------------------------------
# A recording (data/recordings/NAME.parquet, made by `tunetable record` from cuda-backend shards) is checked
# as a whole before any row of it is served: the columns replay matches on, their types, known statuses,
# finite positive times on ok rows, one row per measurement, and agreement with its sidecar NAME.json.

RECORDING_KEYS = ("table", "M", "N", "K", "config_id", "kernel_hash")
RECORDING_TEXT_COLUMNS = ("table", "config_id", "kernel_hash", "status")
SIDECAR_HASH = "parquet_sha256"


def sidecar_path(recording: Path) -> Path:
    """The provenance JSON beside a recording (the one place that names it)."""
    return recording.with_suffix(".json")


def _recording_present(source: Path) -> None:
    """A recording file is there and within MAX_INPUT_BYTES: one error line naming it if not."""
    if not source.is_file():
        raise TuneTableError("no such recording (make one with `tunetable record` on a GPU)", path=source)
    if source.stat().st_size > MAX_INPUT_BYTES:
        raise TuneTableError(f"larger than the {MAX_INPUT_BYTES} bytes an input may hold", path=source)


def read_recording(path: str | Path, *, columns: list[str] | None = None, data: bytes | None = None) -> Any:
    """A recording's rows as a pandas frame (``columns``: only those; ``data``: its bytes, already read, parsed
    instead of the file); an unreadable file is one error line."""
    import pandas as pd  # lazy: pandas only where a recording is read

    source = Path(path)
    if data is None:
        _recording_present(source)
    try:
        return pd.read_parquet(source if data is None else io.BytesIO(data), columns=columns)
    except Exception as exc:  # pyarrow raises many types on a corrupt file; each becomes this one line
        detail = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise TuneTableError(f"unreadable recording: {detail}", path=source) from None


def checked_recording_bytes(path: str | Path, *, served: bool = True) -> bytes:
    """A recording's bytes, read once and checked whole as ``load_checked_recording`` checks them: another reader
    (polars) parses exactly the bytes whose rows were checked and whose sha256 the sidecar records."""
    return _checked_recording(Path(path), served=served)[1]


def load_checked_recording(path: str | Path, *, served: bool = True) -> Any:
    """A recording's rows (pandas) after ``check_recording`` of the whole file against its sidecar (if any)."""
    return _checked_recording(Path(path), served=served)[0]


def _checked_recording(source: Path, *, served: bool) -> tuple[Any, bytes]:
    """A recording's rows (pandas) and the bytes they were parsed from, checked against its sidecar (if any)."""
    _recording_present(source)
    data = read_bytes(source)
    frame = read_recording(source, data=data)
    sidecar = sidecar_path(source)
    provenance = load_json_file(sidecar) if sidecar.is_file() else None
    check_recording(frame, path=source, sidecar=provenance, sidecar_path=sidecar, data=data, served=served)
    return frame, data


def read_recording_columns(path: str | Path, *, columns: list[str]) -> Any:
    """Some columns of a recording (pandas), the whole file checked first (``load_checked_recording``)."""
    frame = load_checked_recording(path)
    absent = [name for name in columns if name not in frame.columns]
    if absent:
        raise TuneTableError(f"recording lacks columns {', '.join(absent)}", path=path)
    return frame[columns]


def check_recording(frame: Any, *, path: Path, sidecar: Mapping[str, Any] | None = None,
                    sidecar_path: Path | None = None, data: bytes | None = None, served: bool = True) -> None:
    """A recording as the cuda backend writes it, whole; ``sidecar`` (its NAME.json) must agree with it.

    Checked: the match columns are present; M, N, K integers in 1 .. INT32_MAX; the text columns text;
    statuses known; every ok row a finite positive median and finite positive samples; no measurement
    (table, M, N, K, config, kernel) twice; the sidecar's table, row count, statuses, content keys and
    kernel hashes, and its ``parquet_sha256`` of ``data`` when it records one. The first violation is one
    error naming the file and the row. ``served=False`` (a parquet of rows read for export or search, not
    served by replay): only M, N, K are required, uniqueness is over the match columns it has.
    """
    import numpy as np  # lazy: numpy only where arrays are checked

    from tunetable.results import STATUSES  # lazy: results imports pandas helpers this leaf does not need

    absent = [name for name in (RECORDING_KEYS if served else SHAPE_KEYS) if name not in frame.columns]
    if absent:
        raise TuneTableError(f"recording lacks columns {', '.join(absent)}", path=path)
    for name in SHAPE_KEYS:
        values = frame[name]
        if values.dtype.kind not in "iu":
            raise TuneTableError(f"column {name} must hold positive integers", path=path)
        bad = ((values < 1) | (values > INT32_MAX)).to_numpy()
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise TuneTableError(f"column {name} must hold positive integers, got {values.iloc[row]} "
                                 f"(at most {INT32_MAX})", path=path, where=f"row {row}")
    for name in RECORDING_TEXT_COLUMNS:
        if name not in frame.columns:
            continue
        text = frame[name].map(lambda value: isinstance(value, str)).to_numpy(dtype=bool)
        if not text.all():
            row = int(np.flatnonzero(~text)[0])
            raise TuneTableError(f"column {name} must hold text, got {_shown(frame[name].iloc[row])}", path=path,
                                 where=f"row {row}")
    status = frame["status"] if "status" in frame.columns else None
    if status is not None:
        unknown = ~status.isin(STATUSES).to_numpy()
        if unknown.any():
            row = int(np.flatnonzero(unknown)[0])
            raise TuneTableError(f"status {status.iloc[row]!r} is not one of {', '.join(STATUSES)}", path=path,
                                 where=f"row {row}")
        _check_times(frame, ok=(status == "ok").to_numpy(), path=path)
    _check_unique(frame, path=path)
    if sidecar is not None:
        _check_sidecar(frame, sidecar=sidecar, path=path, sidecar_path=sidecar_path, data=data, served=served)


def _numbers(values: Any) -> Any:
    """A column as float64 numbers (NaN where it holds none)."""
    import pandas as pd  # lazy: pandas only where a recording is read

    return pd.to_numeric(values, errors="coerce").to_numpy(dtype="float64", na_value=float("nan"))


def _check_times(frame: Any, *, ok: Any, path: Path) -> None:
    """Every ok row: a finite positive median_ms and finite positive samples_ms."""
    import numpy as np  # lazy: numpy only where arrays are checked

    if "median_ms" in frame.columns:
        median = _numbers(frame["median_ms"])
        bad = ok & ~(np.isfinite(median) & (median > 0))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise TuneTableError(f"status ok but median_ms {median[row]} is not a finite positive time "
                                 f"({_row_label(frame, row)})", path=path, where=f"row {row}")
    if "samples_ms" in frame.columns:
        column = frame["samples_ms"].to_numpy(dtype=object)
        if _all_samples_positive(column[ok]):
            return
        for row in np.flatnonzero(ok):   # a bad row somewhere: the first, as the check below names it
            samples = column[row]
            if samples is None:
                continue
            values = np.asarray(samples, dtype=object)
            good = all(finite_number(value) and value > 0 for value in values.tolist())
            if not good:
                raise TuneTableError(f"status ok but samples_ms holds a value that is not a finite positive time "
                                     f"({_row_label(frame, row)})", path=path, where=f"row {int(row)}")


def _all_samples_positive(samples: Any) -> bool:
    """True when every entry is None or a float/int array of finite positive times (one numpy pass; False:
    something else is there, and the row-by-row check finds and names it)."""
    import numpy as np  # lazy: numpy only where arrays are checked

    arrays = [entry for entry in samples if entry is not None]
    if not all(isinstance(entry, np.ndarray) and entry.ndim == 1 and entry.dtype.kind in "fiu" for entry in arrays):
        return False
    values = np.concatenate(arrays) if arrays else np.empty(0)
    return bool((np.isfinite(values) & (values > 0)).all())


def _row_label(frame: Any, row: int) -> str:
    """``M=.., config ..`` of a row, for an error line."""
    config = frame["config_id"].iloc[row] if "config_id" in frame.columns else "?"
    return f"M={frame['M'].iloc[row]}, config {config}"


def _check_unique(frame: Any, *, path: Path) -> None:
    """No measurement (RECORDING_KEYS) twice: replay would serve whichever came last."""
    import numpy as np  # lazy: numpy only where arrays are checked

    names = [name for name in RECORDING_KEYS if name in frame.columns]
    if "config_id" not in names:
        return   # rows without configurations (nothing to serve twice)
    twice = frame.duplicated(names, keep="first").to_numpy()
    if not twice.any():
        return
    row = int(np.flatnonzero(twice)[0])
    key = {name: frame[name].iloc[row] for name in names}
    same = np.ones(len(frame), dtype=bool)
    for name, value in key.items():
        same &= (frame[name] == value).to_numpy()
    first = int(np.flatnonzero(same)[0])
    kernel = f" kernel {key['kernel_hash']}" if "kernel_hash" in key else ""
    raise TuneTableError(f"measurement M={key['M']} N={key['N']} K={key['K']} config {key['config_id']}{kernel} is "
                         f"also row {first} (a recording holds each measurement once)", path=path, where=f"row {row}")


def _check_sidecar(frame: Any, *, sidecar: Mapping[str, Any], path: Path, sidecar_path: Path | None,
                   data: bytes | None, served: bool = True) -> None:
    """The sidecar `tunetable record` wrote beside the recording describes exactly these rows.

    A served recording's sidecar must record the parquet's sha256 (`tunetable record` writes it): a recording
    edited or swapped since it was recorded is refused, not replayed.
    """
    name = sidecar_path.name if sidecar_path is not None else "sidecar"
    if not isinstance(sidecar, Mapping):
        raise TuneTableError("a recording's sidecar must be a JSON object", path=sidecar_path or path)
    recorded = sidecar.get(SIDECAR_HASH)
    if served and recorded is None:
        raise TuneTableError(f"its sidecar {name} records no {SIDECAR_HASH}: a replayed recording must be the file "
                             "`tunetable record` wrote (re-export it with `tunetable record`)", path=path)
    if recorded is not None and data is not None:
        digest = hashlib.sha256(data).hexdigest()
        if digest != recorded:
            raise TuneTableError(f"sha256 {digest[:16]} does not match the {str(recorded)[:16]} its sidecar {name} "
                                 "records", path=path)
    def distinct(column: str) -> list[str]:
        return sorted({str(v) for v in frame[column].dropna()}) if column in frame.columns else []

    facts = {
        "rows": int(len(frame)),
        "table": distinct("table")[0] if len(distinct("table")) == 1 else distinct("table"),
        "statuses": ({str(k): int(v) for k, v in frame["status"].value_counts().sort_index().items()}
                     if "status" in frame.columns else None),
        "content_keys": distinct("content_key"),
        "kernel_hashes": distinct("kernel_hash"),
    }
    for key, actual in facts.items():
        said = sidecar.get(key)
        if said is not None and said != actual:
            raise TuneTableError(f"holds {_shown(actual)} {key}, its sidecar {name} says {_shown(said)}"
                                 if key != "rows" else f"holds {actual} rows, its sidecar {name} says {_shown(said)}",
                                 path=path)
