"""Load raw result shards and kbench pickles into polars frames (pandas only at the pickle boundary).

A kbench ``spec`` string ``stem/K1=v1/$k2=v2`` names the kernel (``stem``), its tunable
parameters (``K1``) and its runtime arguments (``$k2``, the problem shape). Spec parsing is
vectorised in polars and values are typed per column (int, float, bool, else string), never
by ``eval``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from collections.abc import Collection
from typing import Any, Callable

import polars as pl

from tunetable.errors import TuneTableError
from tunetable.rank import ranked_parameters
from tunetable.results import KBENCH_FIELDS, ROW_FIELDS, SEARCH_FIELDS, read_result_file
from tunetable.safe_pickle import RefusedFile

SPEC_KEY = re.compile(r"/(\$?[A-Za-z_][A-Za-z0-9_]*)=")
# Columns that are never parameters of a configuration.
NON_PARAMETER_COLUMNS = frozenset({*KBENCH_FIELDS, *ROW_FIELDS, "name", "kbench_filter", "file", "AUTOTUNING_MODE"})
# Columns of a recording (data/recordings/*.parquet) that are not parameters: its rows are shard rows plus `table`.
RECORDING_FIELDS = frozenset({*KBENCH_FIELDS, *ROW_FIELDS, *SEARCH_FIELDS, "table"})
SHAPE_COLUMNS = ("M", "N", "K")
# What `tunetable profile` reads, by suffix (its "unsupported input" line lists these).
READABLE = {
    ".pkl": "raw shards (results/raw/) and kbench pickles",
    ".parquet": "ranked tables (results/ranked/) and recordings (data/recordings/)",
    ".csv": "ranked tables (results/ranked/*.csv)",
    ".yaml": "kbench / kprofile YAML (entries printed and written to -o; --merge merges them)",
}


@dataclass(frozen=True)
class SpecColumns:
    """What a file's spec strings declare: tunable parameter names and runtime (shape) names, in order."""

    parameters: tuple[str, ...]
    runtime: tuple[str, ...]


@dataclass(frozen=True)
class LoadedResult:
    """One readable result file as a polars frame plus what its columns mean."""

    path: str
    name: str
    frame: pl.DataFrame
    parameters: tuple[str, ...]
    shape: tuple[str, ...]
    provenance: dict[str, Any] = field(default_factory=dict)
    source_file: str | None = None   # a kbench pickle's `file:` (the benchmark it ran), kept for `profile -o`


@dataclass(frozen=True)
class InvalidFile:
    """A file that could not be read, with the reason (printed as ``Invalid pkl [path]``)."""

    path: str
    reason: str


@dataclass(frozen=True)
class LoadReport:
    """Every readable file and every invalid one, in command-line order."""

    results: tuple[LoadedResult, ...]
    invalid: tuple[InvalidFile, ...]


def _typed(values: pl.Series) -> pl.Series:
    """A string column cast to int, float or bool when every non-null value parses as one."""
    present = values.drop_nulls()
    for dtype in (pl.Int64, pl.Float64):
        cast = present.cast(dtype, strict=False)
        if cast.null_count() == 0:
            return values.cast(dtype, strict=False)
    if present.is_in(["True", "False", "true", "false"]).all() and present.len() > 0:
        return values.str.to_lowercase() == "true"
    return values


def _keys_of(templates: list[str]) -> SpecColumns:
    """Parameter and runtime names of spec templates (specs with their values removed), in order."""
    ordered = dict.fromkeys(key for template in templates for key in SPEC_KEY.findall(template))
    parameters = tuple(key for key in ordered if not key.startswith("$"))
    runtime = tuple(key[1:] for key in ordered if key.startswith("$"))
    return SpecColumns(parameters=parameters, runtime=tuple(k for k in runtime if k not in parameters))


def spec_templates(*, specs: pl.Series) -> list[str]:
    """The distinct key layouts of a column of spec strings (``stem/A=/B=/$M=``), in order of first use."""
    return specs.drop_nulls().str.replace_all(r"=[^/]*", "=").unique(maintain_order=True).to_list()


def spec_keys(*, specs: pl.Series) -> SpecColumns:
    """The parameter and runtime names used by a column of spec strings, in order of first use."""
    return _keys_of(spec_templates(specs=specs))


# Above this many key layouts among the distinct spec pieces, values are found by one regex per key.
POSITIONAL_LAYOUTS = 32
# Specs are joined to their parsed pieces this many rows at a time (bounds the strings held at once).
PARSE_CHUNK = 1_000_000


def parse_specs(*, specs: pl.Series, present: Collection[str] = ()) -> tuple[pl.DataFrame, SpecColumns]:
    """Spec strings as typed columns: ``name`` (the stem) plus one column per key (``$`` stripped).

    A spec is cut at its first runtime key (``/$``) into the configuration part, shared by every
    shape of a configuration, and the runtime part, shared by every configuration of a shape:
    only the distinct pieces are parsed and typed (the same types as over every row, since the
    values are the same), and the rows take their values by a join, a chunk at a time. Keys in
    ``present`` (columns the frame has already) are named in the keys but not joined.
    """
    specs = specs.cast(pl.Utf8)
    heads: set[str] = set()
    tails: set[str] = set()
    for offset in range(0, len(specs), PARSE_CHUNK):
        head, tail = _pieces(specs.slice(offset, PARSE_CHUNK))
        heads.update(head.drop_nulls().unique().to_list())
        tails.update(tail.drop_nulls().unique().to_list())
    head_values, head_keys = _parse_distinct(sorted(heads), prefix="")
    tail_values, tail_keys = _parse_distinct(sorted(tails), prefix="_/")
    tail_values = tail_values.drop("name")
    duplicated = [c for c in tail_values.columns if c in head_values.columns and c != "_piece"]
    tail_values = tail_values.drop(duplicated)
    skip = set(present) - {"_piece"}
    head_values = head_values.drop([c for c in head_values.columns if c in skip])
    tail_values = tail_values.drop([c for c in tail_values.columns if c in skip])
    keys = _keys_of([*head_keys, *tail_keys])
    chunks = []
    for offset in range(0, max(len(specs), 1), PARSE_CHUNK):
        head, tail = _pieces(specs.slice(offset, PARSE_CHUNK))
        rows = pl.DataFrame({"_head": head, "_tail": tail})
        rows = rows.join(head_values, left_on="_head", right_on="_piece", how="left", maintain_order="left")
        rows = rows.join(tail_values, left_on="_tail", right_on="_piece", how="left", maintain_order="left")
        chunks.append(rows.drop("_head", "_tail"))
    parsed = pl.concat(chunks, rechunk=False) if len(chunks) > 1 else chunks[0]   # no second copy of every column
    order = ["name", *keys.parameters, *keys.runtime]
    return parsed.select([c for c in order if c in parsed.columns]), keys


def _pieces(specs: pl.Series) -> tuple[pl.Series, pl.Series]:
    """Each spec's configuration part (up to its first ``/$``) and runtime part (from the ``$``; null when none)."""
    cut = specs.str.find("/$", literal=True)
    frame = pl.DataFrame({"spec": specs, "cut": cut})
    head = frame.select(pl.when(pl.col("cut").is_null()).then(pl.col("spec"))
                        .otherwise(pl.col("spec").str.slice(0, pl.col("cut")))).to_series()
    tail = frame.select(pl.col("spec").str.slice(pl.col("cut") + 1)).to_series()
    return head, tail


def _parse_distinct(pieces: list[str], *, prefix: str) -> tuple[pl.DataFrame, list[str]]:
    """Distinct spec pieces parsed and typed (``_piece`` keeps the text); their key layouts in order.

    Memoised on the pieces (``_parse_distinct_memo``): a table's shards share their configuration pieces, so
    ranking 70 shards parses them once, not 70 times. Polars frames are never changed in place here.
    """
    typed, templates = _parse_distinct_memo(tuple(pieces), prefix)
    return typed, list(templates)


@functools.lru_cache(maxsize=8)
def _parse_distinct_memo(pieces: tuple[str, ...], prefix: str) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """``_parse_distinct`` of these pieces, its layouts as a tuple (a memoised value is never changed)."""
    series = pl.Series("spec", [prefix + piece for piece in pieces], dtype=pl.Utf8)
    raw, templates = _parse_chunk(series)
    typed = raw.with_columns([_typed(raw[c]) for c in raw.columns if c != "name"])
    return typed.with_columns(pl.Series("_piece", pieces, dtype=pl.Utf8)), tuple(templates)


def _parse_chunk(specs: pl.Series) -> tuple[pl.DataFrame, list[str]]:
    """One chunk's specs as string columns (``name`` and every key) and its key layouts in order of first use."""
    frame = pl.DataFrame({"spec": specs})
    layouts = frame["spec"].str.replace_all(r"=[^/]*", "=")
    templates = layouts.drop_nulls().unique(maintain_order=True).to_list()
    if len(templates) == 1 and layouts.null_count() == 0:
        return _split_by_position(rows=frame.with_row_index("_row"), template=templates[0]).drop("_row"), templates
    if len(templates) <= POSITIONAL_LAYOUTS:
        tagged = frame.with_columns(layouts.alias("_layout")).with_row_index("_row")
        parts = [_split_by_position(rows=tagged.filter(pl.col("_layout") == t), template=t) for t in templates]
        nulls = tagged.filter(pl.col("_layout").is_null()).select(pl.col("_row"))
        parsed = pl.concat([*parts, nulls], how="diagonal").sort("_row").drop("_row")
        if "name" not in parsed.columns:
            parsed = parsed.with_columns(pl.lit(None, dtype=pl.Utf8).alias("name"))
        return parsed, templates
    keys = _keys_of(templates)
    exprs = [pl.col("spec").str.extract(r"^([^/]*)", 1).alias("name")]
    exprs += [pl.col("spec").str.extract(rf"/{re.escape(key)}=([^/]*)", 1).alias(key) for key in keys.parameters]
    exprs += [pl.col("spec").str.extract(rf"/\${re.escape(key)}=([^/]*)", 1).alias(key) for key in keys.runtime]
    return frame.select(exprs), templates


def _split_by_position(*, rows: pl.DataFrame, template: str) -> pl.DataFrame:
    """The values of rows sharing one key layout, cut at the template's ``/`` positions (strings, ``_row`` kept)."""
    tokens = template.split("/")
    parts = rows.select(pl.col("spec").str.split_exact("/", len(tokens) - 1), "_row").unnest("spec")
    fields = [c for c in parts.columns if c != "_row"]
    columns = [parts[fields[0]].str.replace(r"=.*$", "").alias("name")]
    columns += [parts[field].str.slice(len(token)).alias(token[:-1].lstrip("$"))
                for field, token in zip(fields[1:], tokens[1:]) if token.endswith("=")]
    return pl.DataFrame([*columns, parts["_row"]])


CONSUME_MIN_ROWS = 100_000   # below this a frame and its polars copy are small; a column's deletion costs ~0.2 ms


def pandas_to_polars(*, frame: Any, consume: bool = False) -> pl.DataFrame:
    """A pandas DataFrame as polars, a column at a time; object columns polars cannot type become strings.

    ``consume``: drop each pandas column once it is converted (the frame is the caller's to lose), so
    a 10 M-row pickle's Python strings and their polars copy are never all held at once. Only from
    CONSUME_MIN_ROWS rows: for a shard of ~100 rows the deletions cost five times the conversion,
    which rank and profile pay on every one of thousands of shards.
    """
    drop = consume and len(frame) >= CONSUME_MIN_ROWS
    columns = []
    for name in list(frame.columns):
        columns.append(_polars_column(frame[name], name=str(name)))
        if drop:
            del frame[name]
    return pl.DataFrame(columns)


def _polars_column(values: Any, *, name: str) -> pl.Series:
    """One pandas column as a polars Series (strings where its objects have no single type)."""
    try:
        return pl.from_pandas(values).alias(name)
    except (TypeError, ValueError, pl.exceptions.PolarsError):
        items = values.tolist()
        try:
            return pl.Series(name, items, strict=False)
        except (TypeError, ValueError, pl.exceptions.PolarsError):
            return pl.Series(name, [None if v is None else str(v) for v in items])


def constant_columns(*, frame: pl.DataFrame, candidates: tuple[str, ...]) -> tuple[str, ...]:
    """Columns holding a single value across the frame (kprofile's shape when no ``$`` keys exist)."""
    return tuple(c for c in candidates if c in frame.columns and frame[c].n_unique() == 1)


def from_payload(*, payload: dict[str, Any], path: str, keep_spec: bool = True) -> LoadedResult:
    """A loaded shard or kbench pickle payload as a LoadedResult (raises TuneTableError when malformed)."""
    merged = payload.get("merged_df")
    if merged is None or not hasattr(merged, "columns"):
        raise TuneTableError(f"Invalid pkl [{path}]: merged_df is not a DataFrame", path=path)
    frame = pandas_to_polars(frame=merged, consume=True)   # the payload was read for this result only
    loaded = from_frame(frame=frame, path=path, name=str(payload.get("name") or Path(path).stem),
                        provenance=dict(payload.get("provenance") or {}), keep_spec=keep_spec)
    source = payload.get("file")
    # kbench names the benchmark source it ran; our shards name themselves (nothing kbench can run).
    if isinstance(source, str) and source and Path(source).suffix != ".pkl":
        loaded = replace(loaded, source_file=source)
    return loaded


def from_frame(*, frame: pl.DataFrame, path: str, name: str, provenance: dict[str, Any] | None = None,
               keep_spec: bool = True) -> LoadedResult:
    """Attach parsed spec columns to a result frame and work out its parameters and shape columns.

    ``keep_spec=False`` drops the spec strings once parsed (profile: a 10 M-row pickle's largest column).
    """
    if "spec" not in frame.columns:
        raise TuneTableError(f"Invalid pkl [{path}]: merged_df has no spec column", path=path)
    parsed, keys = parse_specs(specs=frame["spec"], present=frame.columns)
    if not keep_spec:
        frame = frame.drop("spec")
    missing = [c for c in parsed.columns if c not in frame.columns]
    if missing:
        frame = frame.with_columns(parsed.select(missing))
    shape = keys.runtime or constant_columns(frame=frame, candidates=keys.parameters)
    parameters = tuple(p for p in keys.parameters
                       if p not in shape and p not in NON_PARAMETER_COLUMNS - {"M", "N", "K"})
    return LoadedResult(path=path, name=name, frame=frame, parameters=parameters, shape=tuple(shape),
                        provenance=provenance or {})


def load_file(*, path: str | Path, keep_spec: bool = True) -> LoadedResult:
    """Read one shard (checksum verified) or kbench pickle (restricted unpickler); any problem raises
    TuneTableError naming the file."""
    payload = read_result_file(path)
    return from_payload(payload=payload, path=str(path), keep_spec=keep_spec)


def load_files(*, paths: list[str | Path], on_file: Callable[[str], None] | None = None,
               strict: bool = False, keep_spec: bool = True) -> LoadReport:
    """Read every file (``on_file`` called after each); unreadable ones are collected; all invalid is an error.

    A refused file (code in a pickle, inconsistent data, a checksum mismatch) always raises; with
    ``strict`` (rank, metrics: the files behind a table) so does every unreadable one.
    """
    results: list[LoadedResult] = []
    invalid: list[InvalidFile] = []
    for path in paths:
        if on_file is not None:
            on_file(str(path))
        try:
            results.append(load_file(path=path, keep_spec=keep_spec))
        except RefusedFile:
            raise
        except TuneTableError as exc:
            if strict:
                raise
            detail = str(exc).removeprefix(f"{path}: ")
            invalid.append(InvalidFile(path=str(path), reason=f"Invalid pkl [{path}]: {detail}"))
    if paths and not results:
        listed = " ".join(f"Invalid pkl [{item.path}]" for item in invalid)
        raise TuneTableError(f"no readable result file: {listed}", path=str(paths[0]),
                             where=f"{len(invalid)} of {len(paths)} invalid")
    return LoadReport(results=tuple(results), invalid=tuple(invalid))


def combine(*, results: tuple[LoadedResult, ...] | list[LoadedResult]) -> pl.DataFrame:
    """All rows of several results in one frame, with a ``file`` column naming each row's file."""
    frames = [r.frame.with_columns(pl.lit(r.path).alias("file")) for r in results]
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


def union_names(*, groups: list[tuple[str, ...]]) -> tuple[str, ...]:
    """Names from several ordered tuples, first occurrence first."""
    return tuple(dict.fromkeys(name for group in groups for name in group))


@dataclass(frozen=True)
class TableFile:
    """A ranked table or a recording on disk: its columns (schema), parameters and shape, before any row is read."""

    path: str
    name: str
    schema: dict[str, pl.DataType]
    parameters: tuple[str, ...]
    shape: tuple[str, ...]


def readable_inputs() -> str:
    """The one line saying what profile reads, for its "unsupported input" message."""
    return "; ".join(f"{suffix}: {what}" for suffix, what in READABLE.items())


def describe_table_file(*, path: str | Path) -> TableFile:
    """Columns, parameters and shape of a ranked table (.parquet/.csv) or a recording (.parquet), rows unread.

    A ranked table (a ``rank`` column) has the parameters ``tunetable.rank`` gives it; a recording's
    parameters are every column that is not a shard field.
    """

    source = Path(path)
    if not source.is_file():
        raise TuneTableError("no such file", path=source)
    try:
        if source.suffix == ".parquet":
            schema = dict(pl.read_parquet_schema(source))
        else:
            schema = dict(pl.scan_csv(source, infer_schema_length=10_000).collect_schema())
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise TuneTableError(f"unreadable {source.suffix[1:]} file ({exc.__class__.__name__})", path=source) from None
    missing = [c for c in (*SHAPE_COLUMNS, "config_id") if c not in schema]
    if missing:
        raise TuneTableError(f"neither a ranked table nor a recording: no column {missing[0]} "
                             f"(expected {', '.join(SHAPE_COLUMNS)}, config_id and a metric)", path=source)
    if "rank" in schema:
        parameters = ranked_parameters(frame=pl.DataFrame(schema=schema))
    else:
        parameters = tuple(c for c in schema if c not in RECORDING_FIELDS)
    return TableFile(path=str(source), name=source.stem, schema=schema, parameters=parameters, shape=SHAPE_COLUMNS)


def read_table_file(*, table: TableFile, columns: list[str]) -> LoadedResult:
    """The rows of ``table`` with only ``columns`` read (a 10 M-row recording's samples never load)."""
    wanted = [c for c in dict.fromkeys(columns) if c in table.schema]
    try:
        if table.path.endswith(".parquet"):
            frame = pl.read_parquet(table.path, columns=wanted)
        else:
            frame = pl.scan_csv(table.path, infer_schema_length=10_000).select(wanted).collect()
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise TuneTableError(f"unreadable ({exc.__class__.__name__}: {str(exc).splitlines()[0][:120]})",
                             path=table.path) from None
    # Repeated strings (status, kind, config ids, names) as categories: 4 bytes a row instead of 16 and more.
    frame = frame.with_columns(pl.col(pl.Utf8).cast(pl.Categorical))
    name = table.name
    if "table" in frame.columns and frame.height and frame["table"].n_unique() == 1:
        name = str(frame["table"][0])
    return LoadedResult(path=table.path, name=name, frame=frame, parameters=table.parameters, shape=table.shape)
