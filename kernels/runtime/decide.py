"""The runtime's decide step: which family and which configuration run a shape (pure Python, no GPU).

Two lookups in the generated tables (kernels/tuning_configs.py), each taking the first entry with
the same N and K whose half-open range [m, m_end) holds M (``covering_index``, the one lookup of
every table):

1. the dispatch list (``DISPATCH["gemm_dispatch"]``, ``FamilyChoice`` entries) names the table,
   i.e. the kernel family, that serves the shape; a shape it does not cover goes to gemm_mma;
2. that table gives the configuration. A shape the table does not cover is *untuned*.

An untuned shape asks the ``untuned`` chooser first: the process-wide dispatcher's is the shape
selector (``selector_chooser``: the candidates of gemm_selector's data file, ``selector_candidates``, through
tunetable.kernels.runtime.selector_serve, a family and configuration predicted from every recording),
and warns once with an ``UntunedShapeWarning`` naming the shape, the choice and how to tune it.
A shape whose (N, K) a table holds at an M that no table measured (between the recorded Ms: the
table's range entry there is the winner of a neighbouring M) asks the ``between`` chooser first:
the process-wide one is the selector again (``selector_between``): leaving each recorded M out in
turn, the neighbour's winner is 16.0 % slower than the best there (geomean, 50 % of shapes within
5 %) and the selector's choice 4.1 % (82 % within 5 %) (benchmarks/unseen_shapes.py, docs/figures.md).
Without a chooser's answer it runs the table's most common winner among the entries whose M range
holds M (else the most common winner overall, or, for an empty table, the family's size
heuristic) and warns once (``FallbackWarning``). docs/architecture.md says where choosers plug in.

Devices (docs/devices.md): the generated file holds the tables of each recorded device
(``DEVICE_TABLES``, ``RECORDED_DEVICES``) and the devices params.yaml tunes for (``DEVICES``). Every
entry point takes ``device`` (a device key such as ``"h200"``; None: the primary device, the first
recorded); ``serving_device`` says whose tables serve it (its own, else its fallbacks, else the first
recorded device of its arch: kernels/families/devices.py) and ``recognise_gpu`` names the device of what
the driver reports. There is one process-wide dispatcher per serving device.

Decisions are memoised per shape. This module imports only the families and the generated tables.
"""

from __future__ import annotations

import hashlib
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from tunetable.kernels.families import FAMILIES
from tunetable.kernels import tuning_configs
from tunetable.kernels.families.common import INT32_MAX, ShapeCandidate, TableEntry, config_id, covering_index
from tunetable.kernels.families.devices import recognise, serving_device as serving_rule
from tunetable.kernels.families.selector_data import parse_selector_file
from tunetable.kernels.runtime.selector_serve import SELECTOR, ShapeSelector
from tunetable.kernels.tuning_configs import (  # DISPATCH, SELECTOR_FILES: the primary device's, re-exported
    BUILDS,
    DEVICE_TABLES,
    DEVICES,
    DISPATCH,  # noqa: F401
    RECORDED_DEVICES,
    SELECTOR_FILES,  # noqa: F401
    TABLES,
    FamilyChoice,
)

DEFAULT_TABLE = "gemm_mma"       # the table that serves shapes the dispatch list does not cover
DISPATCH_LIST = "gemm_dispatch"


class UnknownDeviceError(ValueError):
    """A device key that is neither declared nor served by any recorded device of its architecture."""


def serving_device(device: str | None = None, *, arch: str | None = None) -> str:
    """The recorded device whose tables serve ``device`` (None: the primary one); UnknownDeviceError if none.

    ``device`` None with ``arch`` is an unrecognised GPU of that architecture: the first recorded device of
    it serves. The rule (own tables, then the device's ``fallback`` list, then its arch) is data: params.yaml's
    ``devices:``, generated into ``DEVICES``.
    """
    if device is None and arch is None:
        return RECORDED_DEVICES[0]
    if device is not None and device not in DEVICES:
        raise UnknownDeviceError(f"unknown device '{device}' (declared: {', '.join(DEVICES)}; recorded: "
                                 f"{', '.join(RECORDED_DEVICES)})")
    found = serving_rule(device=device, recorded=RECORDED_DEVICES, devices=tuple(DEVICES.values()), arch=arch)
    if found is None:
        raise UnknownDeviceError(f"no recorded device serves {device or 'a GPU'} of {arch or 'its'} architecture "
                                 f"(recorded: {', '.join(RECORDED_DEVICES)}, all "
                                 f"{', '.join(sorted({spec.arch for spec in DEVICES.values()}))})")
    return found


def recognise_gpu(*, name: str, sm_count: int, memory_bytes: int) -> str | None:
    """The declared device (key) of a GPU from what the driver reports (name, SM count, total memory), or None."""
    return recognise(name=name, sm_count=sm_count, memory_bytes=memory_bytes, devices=tuple(DEVICES.values()))


class FallbackWarning(UserWarning):
    """A shape is not covered by the tuning table: an untuned configuration runs instead."""


class UntunedShapeWarning(FallbackWarning):
    """No table holds the shape: the shape selector's predicted choice runs (tuned for other shapes)."""


@dataclass(frozen=True)
class Decision:
    """The configuration chosen for one shape, and whether the table supplied it."""

    entry: TableEntry
    index: int | None  # position in the table; None for a fallback
    fallback: bool
    choice: FamilyChoice | None = None  # the dispatch-list entry that picked the table, if any
    prediction: Any = None  # the shape selector's Prediction, for a shape no table holds


@dataclass(frozen=True)
class Untuned:
    """What an ``untuned`` chooser answers for a shape no table entry covers: the entry and why."""

    entry: TableEntry
    why: str
    prediction: Any = None                         # the shape selector's Prediction behind the entry
    category: type[Warning] = FallbackWarning      # the warning it is announced with


UntunedChooser = Callable[..., "Untuned | None"]   # (table=, family=, m=, n=, k=) -> Untuned | None
BetweenChooser = Callable[..., "Untuned | None"]   # (m=, n=, k=) -> Untuned | None: a held (N, K), unmeasured M


# --- entries of a family -------------------------------------------------------------------------

def entry_type(family: str) -> type:
    """The generated entry class of a family's table (ValueError names the known families)."""
    found = FAMILIES.get(family)
    if found is None:
        raise ValueError(f"unknown kernel family '{family}' (known: {', '.join(sorted(FAMILIES))})")
    return found.entry_type


def tunable_fields(family: str) -> tuple[str, ...]:
    """The tunables of a family's entries (lower case), in the generated dataclass's order (= the grid's)."""
    entry_type(family)  # names the known families when ``family`` is not one
    return FAMILIES[family].tunable_fields()


def tunables_of(entry: TableEntry) -> dict[str, int]:
    """An entry's tunables as the kernel's -D names (UPPER_CASE), in grid order."""
    return {name.upper(): getattr(entry, name) for name in tunable_fields(entry.kernel)}


def make_entry(*, tunables: Mapping[str, int], n: int, k: int, kernel: str = DEFAULT_TABLE) -> TableEntry:
    """A table entry of family ``kernel`` covering every M of (N, K) for lower-case ``tunables``."""
    cls = entry_type(kernel)
    expected = tunable_fields(kernel)
    if sorted(tunables) != sorted(expected):
        missing = sorted(set(expected) - set(tunables))
        extra = sorted(set(tunables) - set(expected))
        raise ValueError(f"{kernel}: tunables must be {', '.join(expected)} (missing: {', '.join(missing) or '-'}; "
                         f"unknown: {', '.join(extra) or '-'})")
    ordered = {name: tunables[name] for name in expected}
    upper = {name.upper(): value for name, value in ordered.items()}
    return cls(m=1, m_end=INT32_MAX, n=n, k=k, kernel=kernel, config_id=config_id(family=kernel, params=upper),
               **ordered)


@lru_cache(maxsize=256)
def explicit_entry(family: str, tunables: tuple[tuple[str, int], ...], n: int, k: int) -> TableEntry:
    """The table entry of explicit tunables on (N, K), cached per arguments (gemm_with)."""
    return make_entry(tunables=dict(tunables), n=n, k=k, kernel=family)


def heuristic_tunables(*, m: int, family: str = DEFAULT_TABLE) -> dict[str, int]:
    """Untuned tile choice by M alone: narrow tiles for memory-bound small M, else the family's default."""
    return asdict(FAMILIES[family].heuristic(m=m))


def most_common_entry(entries: Sequence[TableEntry]) -> TableEntry | None:
    """The configuration that wins most entries; ties go to the one listed first."""
    if not entries:
        return None
    counts = Counter(entry.config_id for entry in entries)
    first: dict[str, TableEntry] = {}
    for entry in entries:
        first.setdefault(entry.config_id, entry)
    best_id = max(first, key=lambda cid: counts[cid])  # max keeps the first of equals
    return first[best_id]


# --- one table -----------------------------------------------------------------------------------

class Dispatcher:
    """Per-shape decisions over one table, memoised; warns once for each uncovered shape.

    ``family`` (default: the table's name, as in params.yaml where each table is named after its
    family) picks the size heuristic of an empty table; ``untuned`` is asked first for a shape no
    entry covers (module docstring).
    """

    def __init__(self, *, table: str, entries: Sequence[TableEntry], family: str | None = None,
                 untuned: UntunedChooser | None = None):
        self.table = table
        self.family = family or table
        self.entries = tuple(entries)
        self.untuned = untuned
        self.fallback_entry = most_common_entry(self.entries)
        self.decisions: dict[tuple[int, int, int], Decision] = {}
        self.lookups = 0  # table scans done (a memoised shape does none)

    def decide(self, *, m: int, n: int, k: int, stacklevel: int = 4) -> Decision:
        """The decision for (M, N, K), computed on first use.

        A fallback warns at ``stacklevel`` (counted from the warning inside ``_decide``): the default
        4 names the caller of a function that called ``decide``, i.e. the caller of ``gemm()``.
        """
        decision = self.decisions.get((m, n, k))
        if decision is None:
            decision = self._decide(m=m, n=n, k=k, stacklevel=stacklevel)
            self.decisions[(m, n, k)] = decision
        return decision

    def untuned_choice(self, *, m: int, n: int, k: int) -> Untuned:
        """The entry for a shape no entry covers: the ``untuned`` chooser's, else the same-M, most common or
        heuristic entry."""
        if self.untuned is not None:
            found = self.untuned(table=self.table, family=self.family, m=m, n=n, k=k)
            if found is not None:
                return found
        # Winners depend on M far more than on N and K (skinny split-K tiles at small M, big tiles
        # at large M), so the most common winner among entries whose range holds M comes first.
        same_m = most_common_entry([item for item in self.entries if item.m <= m < item.m_end])
        if same_m is not None:
            return Untuned(entry=same_m, why=f"the table's most common winner at this M, {same_m.config_id}")
        if self.fallback_entry is not None:
            return Untuned(entry=self.fallback_entry,
                           why=f"the table's most common winner {self.fallback_entry.config_id}")
        entry = make_entry(tunables=heuristic_tunables(m=m, family=self.family), n=n, k=k, kernel=self.family)
        return Untuned(entry=entry, why=f"the table is empty; heuristic configuration {entry.config_id}")

    def _decide(self, *, m: int, n: int, k: int, stacklevel: int = 4) -> Decision:
        """The entry covering (M, N, K), else a FallbackWarning and the untuned choice."""
        self.lookups += 1
        index = covering_index(self.entries, m=m, n=n, k=k)
        if index is not None:
            return Decision(entry=self.entries[index], index=index, fallback=False)
        chosen = self.untuned_choice(m=m, n=n, k=k)
        if chosen.prediction is not None:
            message = f"gemm: no tuning table holds M={m}, N={n}, K={k}; running {chosen.why}"
        else:
            message = (f"{self.table}: no tuned entry for M={m}, N={n}, K={k}; running {chosen.why} "
                       f"(add the shape to params.yaml and re-run the pipeline to tune it)")
        warnings.warn(message, chosen.category, stacklevel=stacklevel)
        return Decision(entry=chosen.entry, index=None, fallback=True, prediction=chosen.prediction)


# --- across families -----------------------------------------------------------------------------

class FamilyDispatcher:
    """Cross-family decisions: the dispatch list picks the table, that table's Dispatcher the entry.

    Shapes the list does not cover (or a list naming an unknown table) go to ``default_table``,
    which is how tunetable.gemm chose before there was more than one family. ``between`` is asked
    first for every shape (module docstring): its answer replaces a range entry at an unmeasured M.
    """

    def __init__(self, *, choices: Sequence[FamilyChoice], tables: Mapping[str, Sequence[TableEntry]],
                 default_table: str = DEFAULT_TABLE, untuned: UntunedChooser | None = None,
                 between: BetweenChooser | None = None):
        self.choices = tuple(choices)
        self.between = between
        self.tables = {name: Dispatcher(table=name, entries=entries, untuned=untuned)
                       for name, entries in tables.items()}
        self.default_table = default_table
        unknown = sorted({choice.table for choice in self.choices} - set(self.tables))
        if unknown:
            raise ValueError(f"dispatch list names unknown tables {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(self.tables))}): regenerate kernels/tuning_configs.py")
        self.decisions: dict[tuple[int, int, int], Decision] = {}

    def table_for(self, *, m: int, n: int, k: int) -> tuple[str, FamilyChoice | None]:
        """The table serving (M, N, K) and the dispatch entry that says so (None: the default table)."""
        index = covering_index(self.choices, m=m, n=n, k=k)
        if index is None:
            return self.default_table, None
        choice = self.choices[index]
        return choice.table, choice

    def decide(self, *, m: int, n: int, k: int) -> Decision:
        """The decision for (M, N, K), computed on first use (fallback warnings name gemm()'s caller)."""
        decision = self.decisions.get((m, n, k))
        if decision is None:
            table, choice = self.table_for(m=m, n=n, k=k)
            chosen = self.between(m=m, n=n, k=k) if self.between is not None else None
            if chosen is not None:
                warnings.warn(f"gemm: M={m} lies between the measured Ms of N={n}, K={k}; running {chosen.why}",
                              chosen.category, stacklevel=3)  # gemm()'s caller
                decision = Decision(entry=chosen.entry, index=None, fallback=True, choice=choice,
                                    prediction=chosen.prediction)
            else:
                found = self.tables[table].decide(m=m, n=n, k=k, stacklevel=5)
                decision = Decision(entry=found.entry, index=found.index, fallback=found.fallback, choice=choice,
                                    prediction=found.prediction)
            self.decisions[(m, n, k)] = decision
        return decision


# --- the shape selector as the untuned chooser ------------------------------------------------------

def selector_chooser(found: Any, *, tables: Mapping[str, Sequence[TableEntry]] = TABLES) -> UntunedChooser:
    """An ``untuned`` chooser answering with ``found``'s choice (a ShapeSelector): its family and configuration.

    It answers only shapes whose (N, K) no table holds, so that a table's own range entries stay the
    choice for its (N, K).
    """
    held = held_shapes(tables)

    def choose(*, table: str, family: str, m: int, n: int, k: int) -> Untuned | None:
        return None if (n, k) in held else selector_choice(found, m=m, n=n, k=k)

    return choose


def held_shapes(tables: Mapping[str, Sequence[TableEntry]]) -> frozenset[tuple[int, int]]:
    """The (N, K) pairs some table holds."""
    return frozenset((entry.n, entry.k) for entries in tables.values() for entry in entries)


def selector_between(found: Any, *, tables: Mapping[str, Sequence[TableEntry]]) -> BetweenChooser:
    """A ``between`` chooser: ``found``'s choice for a held (N, K) at an M no recording measured.

    The measured Ms are the selector's range starts (every M its tables' recordings hold); with no
    selector generated it never answers, and the tables' range entries serve every M as before.
    """
    held = held_shapes(tables)
    measured = frozenset(found.starts)

    def choose(*, m: int, n: int, k: int) -> Untuned | None:
        if not measured or (n, k) not in held or m in measured:
            return None
        return selector_choice(found, m=m, n=n, k=k)

    return choose


def selector_choice(found: Any, *, m: int, n: int, k: int) -> Untuned | None:
    """``found``'s (a ShapeSelector) predicted family and configuration for (M, N, K) as an Untuned answer."""
    prediction = found.choose(m=m, n=n, k=k)
    if prediction is None:
        return None
    candidate = prediction.candidate
    entry = make_entry(tunables=dict(candidate.tunables), n=n, k=k, kernel=candidate.kernel)
    if entry.config_id != candidate.config_id:
        raise ValueError(f"{found.name}: candidate {candidate.config_id} has tunables that hash to "
                         f"{entry.config_id}: regenerate kernels/tuning_configs.py")
    why = (f"the shape selector's choice {candidate.table} {candidate.config_id} (predicted "
           f"{prediction.speedup_vs_cublas:.2f}x cuBLAS's speed, not measured): `tunetable suggest --shape "
           f"{m},{n},{k}` shows it; to tune it, add the shape to a table in params.yaml and run the pipeline "
           f"on the GPU, or set TUNETABLE_AUTOTUNE=1")
    return Untuned(entry=entry, why=why, prediction=prediction, category=UntunedShapeWarning)


class SelectorDataError(RuntimeError):
    """A shape selector's data file is missing, is not the one the generated tables were checked against
    (sha256), or does not hold what its schema says: the package is broken, never a silent default."""


def selector_candidates(name: str = SELECTOR, *, device: str | None = None) -> tuple[ShapeCandidate, ...]:
    """The candidates of selector ``name``, from its data file (``SELECTOR_FILES[name]``; none when not generated).

    The file is read once per process, on first use: its sha256 must be the one codegen recorded, and every
    candidate must hold its family's typed fields (the ones codegen checks), or it is a SelectorDataError
    naming the file.
    """
    record = DEVICE_TABLES[serving_device(device)].selector_files.get(name)
    if record is None:
        return ()
    path = Path(tuning_configs.__file__).resolve().parent / record.path
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SelectorDataError(f"{path}: cannot read the shape selector's data file ({exc.strerror}): "
                                "reinstall tunetable, or regenerate it (tunetable select --selector)") from None
    digest = hashlib.sha256(raw).hexdigest()
    if digest != record.sha256:
        raise SelectorDataError(f"{path}: sha256 {digest} is not the {record.sha256} that "
                                f"{tuning_configs.__file__} was generated with: restore the file, or run "
                                "`tunetable codegen --all` after `tunetable select --selector`")
    entry_types = {family: FAMILIES[family].entry_type for family in FAMILIES}
    try:
        data = parse_selector_file(raw, path=path, entry_types=entry_types, name=name)
    except ValueError as exc:
        raise SelectorDataError(str(exc)) from None
    unknown = [table for table, family in data.tables if BUILDS.get(table, None) is None
               or BUILDS[table].family != family]
    if unknown:
        raise SelectorDataError(f"{path}: table {unknown[0]} is not a generated table of that family")
    return data.candidates


def shape_selector(name: str = SELECTOR, *, device: str | None = None) -> ShapeSelector:
    """The process-wide selector over selector ``name``'s data file of ``device``'s serving device (empty when
    not generated), built on first use."""
    serving = serving_device(device)
    found = _state.get(("selector", name, serving))
    if found is None:
        with _lock:
            found = _state.get(("selector", name, serving))
            if found is None:
                found = _state.setdefault(("selector", name, serving),
                                          ShapeSelector(selector_candidates(name, device=serving), name=name))
    return found


# --- the process-wide dispatcher -------------------------------------------------------------------

_state: dict[Any, Any] = {}   # ("dispatcher", device), ("selector", name, device): per serving device
_lock = threading.RLock()   # re-entrant: dispatcher() builds the selector under it
_listeners: list[Callable[[], None]] = []   # told when the dispatcher changes (the launch step's plan memo)


def dispatcher(table: str | None = None, *, device: str | None = None) -> FamilyDispatcher | Dispatcher:
    """The process-wide dispatcher tunetable.gemm uses for ``device`` (None: the primary device), over its
    serving device's generated dispatch list and tables (``DEVICE_TABLES``, ``serving_device``).

    With ``table``: that table's own Dispatcher (the same instance the cross-family one consults).
    """
    serving = serving_device(device)
    found = _state.get(("dispatcher", serving))
    if found is None:
        with _lock:
            found = _state.get(("dispatcher", serving))
            if found is None:
                generated = DEVICE_TABLES[serving]
                selector = shape_selector(device=serving)
                found = FamilyDispatcher(choices=generated.dispatch[DISPATCH_LIST], tables=generated.tables,
                                         untuned=selector_chooser(selector, tables=generated.tables),
                                         between=selector_between(selector, tables=generated.tables))
                _state[("dispatcher", serving)] = found
    return found if table is None else found.tables[table]


def set_dispatcher(found: FamilyDispatcher | None, *, device: str | None = None) -> None:
    """Make ``found`` the dispatcher of gemm() on ``device``'s serving device (None: the primary device;
    ``found`` None: back to the generated tables); forgets plans per shape."""
    serving = serving_device(device)
    with _lock:
        if found is None:
            _state.pop(("dispatcher", serving), None)
        else:
            _state[("dispatcher", serving)] = found
        for listener in _listeners:
            listener()


def on_dispatcher_change(listener: Callable[[], None]) -> None:
    """Call ``listener`` whenever ``set_dispatcher`` replaces the dispatcher."""
    _listeners.append(listener)
