"""The shape selector's measurements: each table's recording, merged with its device's coverage recording.

``selector_tables`` is the one view every reader of the selector's measurements shares (``tunetable select
--selector``, ``suggest``, ``trace``, search seeding, benchmarks/unseen_shapes.py): each table's recording
(``tables.<t>.recording``, restricted to the table's params.yaml shapes) and, where the device has them, its
coverage recording (params.yaml ``selector.<s>.coverage``: extra (N, K) pairs recorded for the fit only,
``data/recordings/<device>_coverage_<table>.parquet``, restricted to that CSV's shapes; docs/selector_data.md).
Every recording is verified whole against its sidecar (``tunetable.rank.read_checked_recording``).
``shared_yardstick`` pools the cuBLAS rows per (table, recording) (``tunetable.baseline``): a coverage recording
is a session of its own. The fit itself is tunetable.selector_fit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunetable.baseline import pooled_baselines
from tunetable.errors import TuneTableError
from tunetable.kernels.runtime.selector_serve import ModelFn, model_function, model_parts

if TYPE_CHECKING:
    from tunetable.perfmodel_grid import GridFn

Shape = tuple[int, int, int]


@dataclass(frozen=True)
class SelectorConfig:
    """One configuration of one table, with what the perf model reads (tunables, registers, smem)."""

    table: str
    family: str
    config_id: str
    tunables: tuple[tuple[str, int], ...]   # -D names (UPPER_CASE), in grid order
    registers: int
    smem_bytes: int

    def model(self) -> Callable[[int, int, int], float]:
        """The selector's model of this configuration (the runtime's ``model_function``)."""
        return model_function(family=self.family, tunables=dict(self.tunables), registers=self.registers,
                              smem_bytes=self.smem_bytes)

    def model_grid(self) -> GridFn | None:
        """``model_parts``' perf model over arrays of N and K at one M (``perfmodel_grid``; None: per shape only)."""
        from tunetable.perfmodel_grid import model_grid  # lazy: numpy twins for the build only, not the parse

        return model_grid(family=self.family, tunables=dict(self.tunables), registers=self.registers,
                          smem_bytes=self.smem_bytes)

    def model_parts(self) -> tuple[ModelFn, int]:
        """The perf model without ``m_fit_factor``, and BLOCK_M (the runtime's ``model_parts``)."""
        return model_parts(family=self.family, tunables=dict(self.tunables), registers=self.registers,
                           smem_bytes=self.smem_bytes)


@dataclass(frozen=True)
class TableMeasurements:
    """One table's recording as the selector reads it: configurations, ok medians, cuBLAS medians."""

    table: str
    family: str
    source: str
    provenance: Mapping[str, Any]
    configs: tuple[SelectorConfig, ...]
    times: Mapping[Shape, Mapping[str, float]]   # shape -> config id -> median ms (ok rows only)
    cublas: Mapping[Shape, float]                # shape -> cuBLAS median ms (the shard's, or a shared yardstick)
    # shape -> the recording it came from where that is not ``source`` (a coverage recording's shapes)
    sessions: Mapping[Shape, str] = field(default_factory=dict)
    coverage: "TableMeasurements | None" = None  # the coverage recording merged in (its provenance), if any

    def session(self, shape: Shape) -> str:
        """The recording (its session) a shape's rows came from."""
        return self.sessions.get(shape, self.source)

    def own_shapes(self) -> list[Shape]:
        """The shapes of the table's own recording (its params.yaml shapes), not of a coverage recording."""
        return [shape for shape in self.times if shape not in self.sessions]

    def without(self, drop: Callable[[Shape], bool]) -> "TableMeasurements":
        """The same measurements minus every shape ``drop`` says (leave-out evaluation)."""
        return replace(self, times={s: t for s, t in self.times.items() if not drop(s)},
                       cublas={s: t for s, t in self.cublas.items() if not drop(s)},
                       sessions={s: t for s, t in self.sessions.items() if not drop(s)})


# --- reading the recordings --------------------------------------------------------------------

def measurements_from_frames(*, table: str, family: str, ranked: Any, resources: Mapping[str, tuple[int, int]],
                             parameters: Sequence[str], source: str,
                             provenance: Mapping[str, Any]) -> TableMeasurements:
    """TableMeasurements of a ranked frame (tunetable.rank) and the recording's registers / smem per config."""
    times: dict[Shape, dict[str, float]] = {}
    cublas: dict[Shape, float] = {}
    configs: dict[str, SelectorConfig] = {}
    columns = ["M", "N", "K", "config_id", "median_ms", "cublas_ms", *parameters]
    for row in ranked.select(columns).iter_rows(named=True):
        shape = (int(row["M"]), int(row["N"]), int(row["K"]))
        config_id = str(row["config_id"])
        times.setdefault(shape, {})[config_id] = float(row["median_ms"])
        if row["cublas_ms"] is not None:
            cublas[shape] = float(row["cublas_ms"])
        if config_id not in configs:
            registers, smem = resources.get(config_id, (0, 0))
            configs[config_id] = SelectorConfig(
                table=table, family=family, config_id=config_id,
                tunables=tuple((name.upper(), int(row[name])) for name in parameters),
                registers=int(registers), smem_bytes=int(smem))
    ordered = tuple(sorted(configs.values(), key=lambda c: c.tunables))
    return TableMeasurements(table=table, family=family, source=source, provenance=dict(provenance),
                             configs=ordered, times=times, cublas=cublas)


def load_table_measurements(*, root: Path, spec: Any) -> TableMeasurements:
    """A table's recording (``tables.<t>.recording``), restricted to its shapes and ranked as `tunetable rank` does."""
    if not spec.recording:
        raise TuneTableError(f"table {spec.name} names no recording: the selector is built from recordings",
                             path="params.yaml", where=f"tables.{spec.name}.recording")
    if not (root / spec.recording).is_file():
        raise TuneTableError(f"table {spec.name}'s recording is absent (record it on a GPU first)",
                             path=spec.recording)
    return load_recording_measurements(root=root, spec=spec, recording=spec.recording, shapes=spec.shapes(),
                                       which=f"table {spec.name}'s shapes")


def load_recording_measurements(*, root: Path, spec: Any, recording: str, shapes: Sequence[Shape],
                                which: str) -> TableMeasurements:
    """TableMeasurements of one recording of table ``spec``, verified whole against its sidecar
    (``tunetable.rank.read_checked_recording``: the rows parsed from the bytes checked), restricted to ``shapes``
    and ranked as `tunetable rank` does."""
    import polars as pl  # lazy: the Snakefile's parse imports this module (shardkey's seed hash)

    from tunetable import rank, resultset  # lazy: both import polars
    from tunetable.search.replay import grid_parameter_names
    from tunetable.select_winners import provenance

    path = root / recording
    frame = rank.read_checked_recording(path=path)   # whole, against its sidecar: one line naming it if not
    # A device table's recording holds its rows under the base table's name, which the selector's data keeps.
    base = str(getattr(spec, "base", spec.name))
    loaded = resultset.from_frame(frame=frame, path=recording, name=base)
    wanted = pl.DataFrame(list(shapes), schema=["M", "N", "K"], orient="row")
    rows = loaded.frame.join(wanted, on=["M", "N", "K"], how="semi")
    parameters = [name for name in grid_parameter_names(spec.grid) if name in loaded.parameters]
    ranked = rank.rank_rows(rows=rows, parameters=tuple(loaded.parameters)).ranked
    ranked = ranked.filter(pl.col("cublas_ms").is_not_null())
    if ranked.is_empty():
        raise TuneTableError(f"no ok row with a cuBLAS baseline for {which}", path=recording)
    resources = {}
    if {"registers", "smem_bytes"} <= set(frame.columns):
        for row in frame.select("config_id", "registers", "smem_bytes").drop_nulls().iter_rows():
            resources.setdefault(str(row[0]), (int(row[1]), int(row[2])))
    return measurements_from_frames(table=base, family=spec.family, ranked=ranked, resources=resources,
                                    parameters=parameters, source=recording,
                                    provenance=provenance(table=base, ranked=ranked))


# --- coverage recordings: extra (N, K) pairs for the fit only ------------------------------------

VALIDATION_SHAPES = "data/validation_shapes.csv"   # held-out shapes: never a coverage shape


@dataclass(frozen=True)
class SelectorTables:
    """What a selector is fitted on: its tables' measurements (coverage merged in where recorded)."""

    tables: tuple[TableMeasurements, ...]
    coverage_absent: tuple[str, ...] = ()   # the coverage recordings expected but none present: fitted without


def check_coverage_shapes(*, listed: Sequence[tuple[int, Shape]], path: str, table_shapes: Mapping[str, set[Shape]],
                          validation: set[Shape], validation_path: str) -> None:
    """No coverage shape is a table's (params.yaml) or a validation shape: one error naming the CSV's line."""
    for line, shape in listed:
        m, n, k = shape
        table = next((name for name, shapes in table_shapes.items() if shape in shapes), None)
        if table is not None:
            raise TuneTableError(f"M={m} N={n} K={k} is a shape of table {table} (params.yaml): coverage shapes "
                                 "feed the selector's fit only, never a table's", path=path, where=f"line {line}")
        if shape in validation:
            raise TuneTableError(f"M={m} N={n} K={k} is a validation shape ({validation_path}): held-out shapes "
                                 "are never fitted on", path=path, where=f"line {line}")


def coverage_presence(*, root: Path, paths: Sequence[str]) -> bool:
    """Whether a device's coverage recordings are there: all (True) or none (False); some only is an error
    naming the first absent one."""
    present = [path for path in paths if (root / path).is_file()]
    if present and len(present) != len(paths):
        missing = next(path for path in paths if path not in present)
        raise TuneTableError(f"coverage recording absent while {', '.join(present)} exist: the selector's fit needs "
                             "one per table of the device (record it with SETS=coverage "
                             "scripts/device_record_h100.sh) or none", path=missing)
    return bool(present)


def check_kernel_hashes(*, table: TableMeasurements, coverage: TableMeasurements) -> None:
    """A coverage recording measured the table recording's kernels (its kernel hashes among the table's)."""
    own = set(str(table.provenance.get("kernel_hash", "")).split(","))
    theirs = set(str(coverage.provenance.get("kernel_hash", "")).split(","))
    if not theirs <= own:
        raise TuneTableError(f"kernel hashes {', '.join(sorted(theirs - own))} are not those of {table.source} "
                             f"({', '.join(sorted(own))}): recorded from other kernel sources; re-record it",
                             path=coverage.source)


def merged_measurements(*, table: TableMeasurements, coverage: TableMeasurements) -> TableMeasurements:
    """The table's measurements with a coverage recording's shapes added (the table's configurations only, at Ms
    within the table's own), each coverage shape marked with its recording (its own session scale for the yardstick).

    Coverage widens the (N, K) a table's terms come from, not the Ms its configurations are candidates at: a row
    above the table's largest M would make them candidates in ranges where no table shape measured them.
    """
    known = {config.config_id for config in table.configs}
    own_ms = [m for m, _, _ in table.own_shapes()]
    low, high = min(own_ms), max(own_ms)
    added = {shape: {cid: ms for cid, ms in by_config.items() if cid in known}
             for shape, by_config in coverage.times.items() if shape not in table.times and low <= shape[0] <= high}
    added = {shape: by_config for shape, by_config in added.items() if by_config}
    return replace(table, times={**table.times, **added},
                   cublas={**table.cublas, **{s: ms for s, ms in coverage.cublas.items() if s in added}},
                   sessions={**table.sessions, **{shape: coverage.source for shape in added}}, coverage=coverage)


def selector_tables(*, root: Path, specs: Sequence[Any], coverage: str | None,
                    validation: str = VALIDATION_SHAPES) -> SelectorTables:
    """The one view of a selector's measurements (select, suggest, trace, seeds, benchmarks/unseen_shapes.py): each
    table's recording, merged with its device's coverage recording restricted to the ``coverage`` CSV's shapes.

    Without coverage recordings for the tables' device the fit is the tables' alone (``coverage_absent`` names the
    paths it looked for, for the command to say so). Errors (one line, file and place): a coverage shape that is a
    table's or a validation shape, a device with some of its coverage recordings only, a coverage recording of
    other kernel sources.
    """
    from tunetable.shapes import read_shape_lines   # lazy: the Snakefile's parse imports this module

    tables = [load_table_measurements(root=root, spec=spec) for spec in specs]
    if coverage is None:
        return SelectorTables(tables=tuple(tables))
    listed = read_shape_lines(root / coverage)
    validation_file = root / validation
    held = {shape for _, shape in read_shape_lines(validation_file)} if validation_file.is_file() else set()
    check_coverage_shapes(listed=listed, path=coverage, table_shapes={spec.name: set(spec.shapes()) for spec in specs},
                          validation=held, validation_path=validation)
    paths = [spec.coverage_recording() for spec in specs]
    if any(path is None for path in paths):
        return SelectorTables(tables=tuple(tables))   # no declared device: no recording to look for
    if not coverage_presence(root=root, paths=paths):
        return SelectorTables(tables=tuple(tables), coverage_absent=tuple(paths))
    shapes = list(dict.fromkeys(shape for _, shape in listed))
    merged = []
    for spec, table, path in zip(specs, tables, paths):
        extra = load_recording_measurements(root=root, spec=spec, recording=path, shapes=shapes,
                                            which=f"the coverage shapes of {coverage}")
        check_kernel_hashes(table=table, coverage=extra)
        merged.append(merged_measurements(table=table, coverage=extra))
    return SelectorTables(tables=tuple(merged))


def coverage_absent_line(*, name: str, paths: Sequence[str]) -> str:
    """What a command says when a selector is fitted without coverage recordings (the paths it looked for)."""
    more = f" and {len(paths) - 1} more" if len(paths) > 1 else ""
    return f"selector {name}: no coverage recordings ({paths[0]}{more}): fitted on the tables' recordings only"


def session_baselines(tables: Sequence[TableMeasurements]) -> dict[tuple[str, str], dict[Shape, float]]:
    """cuBLAS rows per (table, recording): each recording's session is scaled on its own (``tunetable.baseline``)."""
    found: dict[tuple[str, str], dict[Shape, float]] = {}
    for table in tables:
        for shape, ms in table.cublas.items():
            found.setdefault((table.table, table.session(shape)), {})[shape] = ms
    return found


def shared_yardstick(tables: Sequence[TableMeasurements]) -> tuple[TableMeasurements, ...]:
    """The tables with each cuBLAS row replaced by the yardstick every table shares (``tunetable.baseline``), pooled
    per (table, recording): a coverage recording has its own session scale."""
    pooled = pooled_baselines(baselines=session_baselines(tables))
    return tuple(replace(table, cublas={shape: ms for (name, _), rows in pooled.items() if name == table.table
                                        for shape, ms in rows.items()})
                 for table in tables)
