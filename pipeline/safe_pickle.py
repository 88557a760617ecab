"""The one reader of ``.pkl`` files: kbench-style pickles of pandas frames, read without running their code.

Python's stock unpickler imports and calls whatever a pickle names, so a ``.pkl`` from a DVC remote
or a colleague could run anything. This reader never does. Its unpickler resolves only the
globals a kbench frame needs (``ALLOWED``: the reconstructors pandas 2.1 to 3.x and numpy 1.26 to
2.x write for frames of numbers, strings, nullable integers/floats/booleans and per-row lists), and
each of them resolves to a *recipe* here: a plain record of the arguments and state, never the
pandas, numpy or pyarrow function itself. Any other global is refused with one line naming it.
Once the pickle is read, the recipes are checked (dtypes from a short list, shapes and buffer sizes
that agree, block placements that cover every column exactly once, string offsets inside their
buffer, values that are None, bools, 64-bit ints, floats, strings or short lists of them) and only
then turned into numpy arrays and a fresh ``pandas.DataFrame`` through public constructors. So
nothing of a corrupt file reaches pandas or polars internals (whose unchecked paths can crash the
process), and a pickle written by another pandas version reads the same.
"""

from __future__ import annotations

import contextlib
import io
import math
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tunetable.errors import TuneTableError

MAX_DEPTH = 64              # nesting of plain containers (dicts, lists, tuples)
MAX_COLUMNS = 100_000
MAX_ROWS = 100_000_000
INT_BITS = 64               # plain ints beyond int64 (a kbench frame has none) are refused
NUMPY_TYPES = {             # numpy dtype codes a frame column may use (no structured, datetime or void types)
    "b1": "bool", "i1": "int8", "i2": "int16", "i4": "int32", "i8": "int64",
    "u1": "uint8", "u2": "uint16", "u4": "uint32", "u8": "uint64",
    "f2": "float16", "f4": "float32", "f8": "float64", "O8": "object", "O4": "object",
}
MASKED_TYPES = {            # pandas nullable dtypes -> the numpy dtype of their values
    "Int8Dtype": "int8", "Int16Dtype": "int16", "Int32Dtype": "int32", "Int64Dtype": "int64",
    "UInt8Dtype": "uint8", "UInt16Dtype": "uint16", "UInt32Dtype": "uint32", "UInt64Dtype": "uint64",
    "Float32Dtype": "float32", "Float64Dtype": "float64", "BooleanDtype": "bool",
}
ARROW_STRINGS = {"string": 4, "utf8": 4, "large_string": 8, "large_utf8": 8}   # alias -> offset width


class RefusedFile(TuneTableError):
    """A file refused for safety or integrity (a global outside the allow-list, inconsistent data, a
    checksum that does not match): it always stops the command, even where unreadable files are listed."""


class Refused(Exception):
    """Internal: why a pickle is not read (becomes one RefusedFile naming the file)."""


class Recipe:
    """What a pickle asked an allowed global to build: its arguments (REDUCE / NEWOBJ) and BUILD state."""

    kind = "recipe"

    def __new__(cls, *args: Any) -> "Recipe":
        """Record the arguments (NEWOBJ calls ``cls.__new__(cls, *args)``, REDUCE calls ``cls(*args)``)."""
        self = object.__new__(cls)
        self.args = args
        self.state = None
        return self

    def __init__(self, *args: Any) -> None:
        """Nothing: ``__new__`` kept the arguments."""

    def __setstate__(self, state: Any) -> None:
        """BUILD: keep the state (once)."""
        if self.state is not None:
            raise Refused(f"{self.kind}: state set twice")
        self.state = state


def _recipe(kind: str) -> type[Recipe]:
    """A Recipe subclass standing for one allowed global."""
    return type(f"Recipe<{kind}>", (Recipe,), {"kind": kind, "__slots__": ("args", "state")})


def _bytes_copy(data: Any = b"") -> bytes:
    """``builtins.bytearray`` as pickles use it (a copy of bytes), never ``bytearray(n)``."""
    if not isinstance(data, (bytes, bytearray)):
        raise Refused("bytearray() of something other than bytes")
    return bytes(data)


def _slice(*args: Any) -> slice:
    """``builtins.slice`` of ints or None only."""
    if not 1 <= len(args) <= 3 or not all(a is None or type(a) is int for a in args):
        raise Refused("slice() of something other than ints")
    return slice(*args)


# Every global a kbench frame's pickle may name, and what it resolves to here. Module paths differ
# between pandas 2 (pandas.core...) and 3 (pandas, pandas.arrays), numpy 1 (numpy.core) and 2 (numpy._core).
_NUMPY_ARRAY = _recipe("numpy.ndarray")
_INDEX = _recipe("pandas.Index")
_RANGE_INDEX = _recipe("pandas.RangeIndex")
_STRING_ARRAY = _recipe("pandas.StringArray")
ALLOWED: dict[tuple[str, str], Any] = {
    ("builtins", "bytearray"): _bytes_copy,
    ("builtins", "slice"): _slice,
    ("numpy", "dtype"): _recipe("numpy.dtype"),
    ("numpy", "ndarray"): _NUMPY_ARRAY,
    **{(f"{numpy_core}.multiarray", name): _recipe(f"numpy.{name}")
       for numpy_core in ("numpy.core", "numpy._core") for name in ("_reconstruct", "scalar")},
    **{(f"{numpy_core}.numeric", "_frombuffer"): _recipe("numpy._frombuffer")
       for numpy_core in ("numpy.core", "numpy._core")},
    ("pandas", "DataFrame"): _recipe("pandas.DataFrame"),
    ("pandas.core.frame", "DataFrame"): _recipe("pandas.DataFrame"),
    ("pandas.core.internals.managers", "BlockManager"): _recipe("pandas.BlockManager"),
    ("pandas._libs.internals", "_unpickle_block"): _recipe("pandas._unpickle_block"),
    ("pandas.core.indexes.base", "_new_Index"): _recipe("pandas._new_Index"),
    ("pandas", "Index"): _INDEX,
    ("pandas.core.indexes.base", "Index"): _INDEX,
    ("pandas", "RangeIndex"): _RANGE_INDEX,
    ("pandas.core.indexes.range", "RangeIndex"): _RANGE_INDEX,
    ("pandas", "NA"): None,  # replaced by pandas.NA's stand-in below
    ("pandas", "StringDtype"): _recipe("pandas.StringDtype"),
    ("pandas.core.arrays.string_", "StringDtype"): _recipe("pandas.StringDtype"),
    ("pandas.core.arrays.string_", "StringArray"): _STRING_ARRAY,
    ("pandas.arrays", "StringArray"): _STRING_ARRAY,
    ("pandas._libs.arrays", "__pyx_unpickle_NDArrayBacked"): _recipe("pandas.NDArrayBacked"),
    ("pandas.arrays", "ArrowStringArray"): _recipe("pandas.ArrowStringArray"),
    ("pandas.core.arrays.string_arrow", "ArrowStringArray"): _recipe("pandas.ArrowStringArray"),
    ("pyarrow.lib", "_restore_array"): _recipe("pyarrow._restore_array"),
    ("pyarrow.lib", "type_for_alias"): _recipe("pyarrow.type_for_alias"),
    ("pyarrow.lib", "py_buffer"): _recipe("pyarrow.py_buffer"),
}
MASKED_MODULES = ("pandas.core.arrays.integer", "pandas.core.arrays.floating", "pandas.core.arrays.boolean")
MASKED_ARRAYS = {"pandas.IntegerArray": "iu", "pandas.FloatingArray": "f", "pandas.BooleanArray": "b"}
for _name in MASKED_TYPES:
    for _module in ("pandas", *MASKED_MODULES):
        ALLOWED[(_module, _name)] = _recipe(f"pandas.{_name}")
for _kind in MASKED_ARRAYS:
    for _module in ("pandas.arrays", *MASKED_MODULES):
        ALLOWED[(_module, _kind.removeprefix("pandas."))] = _recipe(_kind)


class _NA:
    """Stand-in for ``pandas.NA`` inside a pickle (a missing value)."""


NA = _NA()
ALLOWED[("pandas", "NA")] = NA
ALLOWED[("pandas._libs.missing", "NA")] = NA


class RestrictedUnpickler(pickle.Unpickler):
    """The C unpickler with ``find_class`` limited to ALLOWED; persistent ids are refused."""

    def find_class(self, module: str, name: str) -> Any:
        """The recipe standing for an allowed global; any other is refused."""
        try:
            return ALLOWED[(module, name)]
        except (KeyError, TypeError):
            raise Refused(f"refused global {f'{module}.{name}'!r}") from None

    def persistent_load(self, pid: Any) -> Any:
        """Persistent ids reach outside the file: never."""
        raise Refused("refused persistent id")


# --- from recipes to checked values -------------------------------------------------------------

def _kind(value: Any) -> str:
    """The recipe kind of a value, or its Python type name."""
    return value.kind if isinstance(value, Recipe) else type(value).__name__


def _expect(condition: bool, message: str) -> None:
    """Refuse with ``message`` unless ``condition``."""
    if not condition:
        raise Refused(message)


def _is_object(values: Any) -> bool:
    """True for a numpy array of Python objects."""
    dtype = getattr(values, "dtype", None)
    return getattr(dtype, "kind", None) == "O"


class Materializer:
    """Turns the unpickled graph (plain values and recipes) into checked plain values, arrays and frames."""

    def __init__(self) -> None:
        self._done: dict[int, Any] = {}

    # plain values
    def value(self, obj: Any, *, depth: int = 0) -> Any:
        """A plain value: None, bool, int64, float, str, bytes, NA, lists/tuples/dicts of them, or a frame."""
        kind = type(obj)
        if kind is float or kind is str or obj is None or kind is bool:  # the common leaves first (speed)
            return obj
        _expect(depth <= MAX_DEPTH, "values nested too deeply")
        if kind is list and all(type(item) is float for item in obj):  # per-row samples
            return list(obj)
        if isinstance(obj, (bool, float, str)):
            return obj
        if type(obj) is int:
            _expect(obj.bit_length() < INT_BITS, "an integer beyond 64 bits")
            return obj
        if obj is NA:
            return None
        if isinstance(obj, bytes):
            return obj
        if isinstance(obj, list):
            return [self.value(item, depth=depth + 1) for item in obj]
        if isinstance(obj, tuple):
            return tuple(self.value(item, depth=depth + 1) for item in obj)
        if isinstance(obj, dict):
            out = {}
            for key, item in obj.items():
                _expect(key is None or isinstance(key, (str, int, float, bool)), f"a {_kind(key)} as a mapping key")
                out[key] = self.value(item, depth=depth + 1)
            return out
        if isinstance(obj, Recipe):
            if obj.kind == "pandas.DataFrame":
                return self.memo(obj, self.frame)
            if obj.kind in ("numpy._reconstruct", "numpy._frombuffer"):
                return self.array(obj)
            if obj.kind == "numpy.scalar":
                return self.memo(obj, self.scalar)
        raise Refused(f"a {_kind(obj)} where a plain value belongs")

    def memo(self, recipe: Recipe, build: Any) -> Any:
        """``build(recipe)`` once per recipe object (pickles share objects through their memo)."""
        key = id(recipe)
        if key not in self._done:
            self._done[key] = build(recipe)
        return self._done[key]

    # numpy
    def dtype(self, recipe: Any) -> Any:
        """A numpy dtype from NUMPY_TYPES, in either byte order."""
        import numpy as np  # lazy: numpy only where arrays are built

        _expect(_kind(recipe) == "numpy.dtype", f"a {_kind(recipe)} where a numpy dtype belongs")
        args = recipe.args
        _expect(len(args) == 3 and args[0] in NUMPY_TYPES and all(isinstance(a, bool) for a in args[1:]),
                f"numpy dtype {args[:1]!r} is not one a frame column uses")
        state = recipe.state
        order = "|"
        if state is not None:
            _expect(isinstance(state, tuple) and len(state) in (8, 9) and state[0] in (3, 4)
                    and state[1] in ("<", ">", "|", "=") and state[2:5] == (None, None, None)
                    and state[5:7] == (-1, -1), "numpy dtype with an unexpected state")
            order = state[1]
        base = np.dtype(NUMPY_TYPES[args[0]])
        return base.newbyteorder(order) if order in "<>" and base.kind != "O" else base

    def array(self, recipe: Any) -> Any:
        """A numpy array from ``_reconstruct`` + state or ``_frombuffer``, sizes checked before anything is built."""
        return self.memo(recipe, self._array)

    def _array(self, recipe: Recipe) -> Any:
        """array() without the memo."""
        import numpy as np  # lazy: numpy only where arrays are built

        if recipe.kind == "numpy._frombuffer":
            _expect(len(recipe.args) == 4, "numpy _frombuffer with unexpected arguments")
            data, dtype_recipe, shape, order = recipe.args
            _expect(isinstance(data, (bytes, bytearray)), "numpy _frombuffer without a bytes buffer")
            return self._numeric_array(bytes(data), self.dtype(dtype_recipe), shape, order == "F")
        _expect(recipe.kind == "numpy._reconstruct", f"a {recipe.kind} where a numpy array belongs")
        _expect(len(recipe.args) == 3 and recipe.args[0] is _NUMPY_ARRAY and recipe.args[1] == (0,),
                "numpy _reconstruct of something other than an ndarray")
        state = recipe.state
        _expect(isinstance(state, tuple) and len(state) == 5 and state[0] == 1, "numpy array without its state")
        _, shape, dtype_recipe, fortran, raw = state
        dtype = self.dtype(dtype_recipe)
        if dtype.kind == "O":
            count = self._count(shape)
            _expect(isinstance(raw, list) and len(raw) == count, "object array whose items do not match its shape")
            out = np.empty(count, dtype=object)
            out[:] = [self.value(item, depth=1) for item in raw]
            return out.reshape(shape, order="F" if fortran else "C")
        _expect(isinstance(raw, (bytes, bytearray)), "numpy array without a bytes buffer")
        return self._numeric_array(bytes(raw), dtype, shape, bool(fortran))

    @staticmethod
    def _count(shape: Any) -> int:
        """Items of a 1-D or 2-D shape of non-negative ints (bounded)."""
        _expect(isinstance(shape, tuple) and 1 <= len(shape) <= 2
                and all(type(n) is int and 0 <= n <= MAX_ROWS for n in shape), f"array shape {shape!r}")
        return math.prod(shape)

    def _numeric_array(self, data: bytes, dtype: Any, shape: Any, fortran: bool) -> Any:
        """A copy of ``data`` as an array of ``dtype`` and ``shape``; the buffer must be exactly that size."""
        import numpy as np  # lazy: numpy only where arrays are built

        count = self._count(shape)
        _expect(dtype.kind != "O", "an object array from raw bytes")
        _expect(len(data) == count * dtype.itemsize, "array buffer size does not match its shape")
        return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C").copy()

    def scalar(self, recipe: Recipe) -> Any:
        """``numpy.scalar(dtype, bytes)`` as a plain Python number."""
        import numpy as np  # lazy: numpy only where arrays are built

        _expect(len(recipe.args) == 2 and isinstance(recipe.args[1], bytes), "numpy scalar with unexpected arguments")
        dtype = self.dtype(recipe.args[0])
        _expect(dtype.kind in "biuf" and len(recipe.args[1]) == dtype.itemsize, "numpy scalar of the wrong size")
        return self.value(np.frombuffer(recipe.args[1], dtype=dtype)[0].item())

    # pandas columns
    def column(self, recipe: Any, *, rows: int) -> Any:
        """One column's values: a 1-D numpy array, or a pandas nullable / string array built from checked parts."""
        import pandas as pd  # lazy: pandas only where frames are built (this module is on the Snakefile's parse path)

        kind = _kind(recipe)
        if kind in ("numpy._reconstruct", "numpy._frombuffer"):
            values = self.array(recipe)
            _expect(values.ndim == 1 and len(values) == rows, "a column whose length is not the frame's")
            return values
        if kind in MASKED_ARRAYS:
            state = recipe.state
            _expect(isinstance(state, dict) and "_data" in state and "_mask" in state, f"{kind} without data and mask")
            data, mask = self.array(state["_data"]), self.array(state["_mask"])
            _expect(data.ndim == 1 and mask.ndim == 1 and len(data) == len(mask) == rows and mask.dtype == bool,
                    f"{kind} whose data and mask do not match")
            _expect(data.dtype.kind in MASKED_ARRAYS[kind], f"{kind} of {data.dtype}")
            array_type = getattr(pd.arrays, kind.removeprefix("pandas."))
            return array_type(data.astype(data.dtype.newbyteorder("=")), mask)
        if kind == "pandas.ArrowStringArray":
            state = recipe.state
            _expect(isinstance(state, dict) and "_pa_array" in state, "ArrowStringArray without its data")
            return self._strings(self.arrow_strings(state["_pa_array"]), rows=rows)
        if kind == "pandas.NDArrayBacked":
            _expect(len(recipe.args) == 3 and recipe.args[0] is _STRING_ARRAY, "NDArrayBacked of something "
                    "other than a StringArray")
            state = recipe.state
            _expect(isinstance(state, tuple) and len(state) >= 2, "StringArray without its data")
            _expect(_kind(state[0]) == "pandas.StringDtype", "StringArray without a string dtype")
            values = self.array(state[1])
            _expect(values.ndim == 1 and values.dtype.kind == "O", "StringArray data is not a 1-D object array")
            return self._strings(list(values), rows=rows)
        raise Refused(f"a {kind} where a frame column belongs")

    @staticmethod
    def _strings(values: list[Any], *, rows: int) -> Any:
        """A string column (str or missing values only), as the installed pandas types strings by default."""
        import numpy as np  # lazy: numpy only where arrays are built

        _expect(len(values) == rows, "a column whose length is not the frame's")
        _expect(all(v is None or isinstance(v, str) or (isinstance(v, float) and v != v) for v in values),
                "a string column holding something other than strings")
        out = np.empty(rows, dtype=object)
        out[:] = [None if not isinstance(v, str) else v for v in values]
        return out

    def arrow_strings(self, recipe: Any) -> list[str | None]:
        """A pyarrow string array's values, decoded here from its buffers (offsets and UTF-8 checked)."""
        import numpy as np  # lazy: numpy only where arrays are built

        _expect(_kind(recipe) == "pyarrow._restore_array" and len(recipe.args) == 1
                and isinstance(recipe.args[0], tuple) and len(recipe.args[0]) == 7, "pyarrow array with an "
                "unexpected layout")
        type_recipe, length, null_count, offset, buffers, children, dictionary = recipe.args[0]
        _expect(_kind(type_recipe) == "pyarrow.type_for_alias" and len(type_recipe.args) == 1
                and type_recipe.args[0] in ARROW_STRINGS, "a pyarrow array that is not a string array")
        _expect(all(type(n) is int and n >= 0 for n in (length, null_count, offset)) and length <= MAX_ROWS,
                "pyarrow array with bad lengths")
        _expect(children == [] and dictionary is None and isinstance(buffers, list) and len(buffers) == 3,
                "pyarrow string array with unexpected buffers")
        raw = [None if b is None else self._arrow_buffer(b) for b in buffers]
        validity, offsets_bytes, data = raw
        _expect(offsets_bytes is not None, "pyarrow string array without offsets")
        width = ARROW_STRINGS[type_recipe.args[0]]
        offsets = np.frombuffer(offsets_bytes[: len(offsets_bytes) - len(offsets_bytes) % width],
                                dtype="<i8" if width == 8 else "<i4")
        _expect(len(offsets) >= offset + length + 1, "pyarrow string offsets shorter than the array")
        used = offsets[offset: offset + length + 1].astype(np.int64)
        data = data or b""
        _expect(bool((np.diff(used) >= 0).all()) and (length == 0 or (used[0] >= 0 and used[-1] <= len(data))),
                "pyarrow string offsets outside their data")
        present = [True] * length
        if validity is not None:
            bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
            _expect(len(bits) >= offset + length, "pyarrow validity bitmap shorter than the array")
            present = [bool(b) for b in bits[offset: offset + length]]
        _expect(null_count == length - sum(present) or null_count == 0 and validity is None,
                "pyarrow null count does not match its bitmap")
        values: list[str | None] = []
        for index in range(length):
            if not present[index]:
                values.append(None)
                continue
            try:
                values.append(data[used[index]:used[index + 1]].decode("utf-8"))
            except UnicodeDecodeError:
                raise Refused("a pyarrow string that is not UTF-8") from None
        return values

    @staticmethod
    def _arrow_buffer(recipe: Any) -> bytes:
        """The bytes of ``pyarrow.py_buffer(bytes)``."""
        _expect(_kind(recipe) == "pyarrow.py_buffer" and len(recipe.args) == 1
                and isinstance(recipe.args[0], (bytes, bytearray)), "pyarrow buffer of something other than bytes")
        return bytes(recipe.args[0])

    # pandas index and frame
    def index(self, recipe: Any) -> list[Any] | range:
        """An axis: a RangeIndex as a range, an Index as its list of labels (None, str, int, float)."""
        _expect(_kind(recipe) == "pandas._new_Index" and len(recipe.args) == 2 and isinstance(recipe.args[1], dict),
                "an axis that is not a pandas Index")
        cls, fields = recipe.args
        if cls is _RANGE_INDEX:
            bounds = [fields.get(name) for name in ("start", "stop", "step")]
            _expect(all(type(b) is int for b in bounds) and bounds[2] != 0, "RangeIndex with bad bounds")
            labels = range(*bounds)
            _expect(len(labels) <= MAX_ROWS, "RangeIndex too long")
            return labels
        _expect(cls is _INDEX and "data" in fields, "an axis that is not a pandas Index")
        data = fields["data"]
        if _kind(data) in ("numpy._reconstruct", "numpy._frombuffer"):
            values = self.array(data)
            _expect(values.ndim == 1, "a 2-D axis")
            labels = [self.value(v.item() if hasattr(v, "item") else v) for v in values]
        else:
            labels = list(self.column(data, rows=self._length(data)))
        _expect(all(label is None or isinstance(label, (str, int, float, bool)) for label in labels),
                "axis labels that are not plain values")
        return labels

    def _length(self, recipe: Any) -> int:
        """Rows of a string column recipe, for an axis built from one."""
        if _kind(recipe) == "pandas.ArrowStringArray" and isinstance(recipe.state, dict):
            inner = recipe.state.get("_pa_array")
            if _kind(inner) == "pyarrow._restore_array" and isinstance(inner.args[0], tuple):
                return int(inner.args[0][1])
        if _kind(recipe) == "pandas.NDArrayBacked" and isinstance(recipe.state, tuple) and len(recipe.state) >= 2:
            return len(self.array(recipe.state[1]))
        raise Refused(f"a {_kind(recipe)} where axis labels belong")

    def frame(self, recipe: Recipe) -> Any:
        """A DataFrame from its BlockManager recipe: each column placed exactly once and as long as the index."""
        import pandas as pd  # lazy: pandas only where frames are built (this module is on the Snakefile's parse path)

        state = recipe.state
        _expect(isinstance(state, dict) and "_mgr" in state, "DataFrame without its data")
        manager = state["_mgr"]
        _expect(_kind(manager) == "pandas.BlockManager" and len(manager.args) == 2, "DataFrame data that is not "
                "a BlockManager")
        blocks, axes = manager.args
        _expect(isinstance(blocks, (tuple, list)) and isinstance(axes, list) and len(axes) == 2, "BlockManager "
                "with unexpected blocks or axes")
        columns, index = self.index(axes[0]), self.index(axes[1])
        _expect(len(columns) <= MAX_COLUMNS, "too many columns")
        _expect(len(set(columns)) == len(columns), "duplicate column names")
        rows = len(index)
        placed: dict[int, Any] = {}
        for block in blocks:
            _expect(_kind(block) == "pandas._unpickle_block" and len(block.args) == 3 and block.args[2] == 2,
                    "a frame block with unexpected arguments")
            values, placement, _ = block.args
            if _kind(placement) in ("numpy._reconstruct", "numpy._frombuffer"):
                placement = self.array(placement)
            positions = self._positions(placement, columns=len(columns))
            if _kind(values) in ("numpy._reconstruct", "numpy._frombuffer"):
                array = self.array(values)
                _expect(array.ndim == 2 and array.shape == (len(positions), rows), "a block whose shape does not "
                        "match its columns and rows")
                parts = [array[i] for i in range(len(positions))]
            else:
                _expect(len(positions) == 1, "an extension block placed on several columns")
                parts = [self.column(values, rows=rows)]
            for position, part in zip(positions, parts):
                _expect(position not in placed, f"column {columns[position]!r} placed twice")
                placed[position] = part
        _expect(len(placed) == len(columns), "a column without data")
        # Object columns (strings, per-row lists, missing values) are typed as the installed pandas types
        # such values by default, the way write_shard's DataFrame(rows) types them.
        data = {columns[p]: list(placed[p]) if _is_object(placed[p]) else placed[p] for p in range(len(columns))}
        labels = pd.RangeIndex(rows) if isinstance(index, range) and index == range(rows) else pd.Index(list(index))
        if not data:
            return pd.DataFrame(index=labels, columns=pd.Index(columns))
        return pd.DataFrame(data, index=labels, copy=True)

    @staticmethod
    def _positions(placement: Any, *, columns: int) -> list[int]:
        """A block's column positions (a slice, or an int array), each inside the frame."""
        import numpy as np  # lazy: numpy only where arrays are built

        if isinstance(placement, slice):
            positions = list(range(*placement.indices(columns)))
            _expect(placement.start is not None and placement.stop is not None
                    and len(range(placement.start, placement.stop, placement.step or 1)) == len(positions),
                    "a block placed outside the frame")
        else:
            _expect(isinstance(placement, np.ndarray) and placement.ndim == 1 and placement.dtype.kind in "iu",
                    "a block placement that is not a slice or an int array")
            positions = [int(p) for p in placement]
        _expect(all(0 <= p < columns for p in positions), "a block placed outside the frame")
        return positions


@contextlib.contextmanager
def _unraisable_quiet() -> Iterator[None]:
    """While a damaged pickle is torn down, CPython may print a buffer it could not free to stderr (through
    sys.excepthook or sys.unraisablehook): the error line about the file is what the user needs."""
    previous = sys.unraisablehook, sys.excepthook
    sys.unraisablehook = lambda unraisable: None
    sys.excepthook = lambda *exc: None
    try:
        yield
    finally:
        sys.unraisablehook, sys.excepthook = previous


def load_pickle(data: bytes, *, path: str | Path) -> Any:
    """The checked content of a kbench-style pickle; anything refused is one TuneTableError naming the file."""
    try:
        with _unraisable_quiet():
            unpickler = RestrictedUnpickler(io.BytesIO(data))
            try:
                raw = unpickler.load()
            finally:
                del unpickler  # its stack goes now, inside the quiet block
        return Materializer().value(raw)
    except Refused as exc:
        if str(exc).startswith("refused "):
            raise RefusedFile(f"{exc}: tunetable reads kbench pickles of pandas/numpy data only and never runs "
                              "code from a .pkl", path=path) from None
        raise RefusedFile(f"not read: {exc} (not the pandas/numpy data of a kbench pickle)", path=path) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            OverflowError, MemoryError, RecursionError, UnicodeDecodeError) as exc:
        detail = str(exc).splitlines()[0][:160] if str(exc) else ""
        raise TuneTableError(f"not a readable pickle: {type(exc).__name__}{': ' + detail if detail else ''}",
                             path=path) from None
