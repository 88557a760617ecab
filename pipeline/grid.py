"""Expand a table's grid (params.yaml) into kernel configurations, kbench style.

Groups: the cartesian product inside a group, the union across groups, duplicates removed,
first-seen order kept. Derived values (``THREADS`` ...) are computed before the rules, so the
rules may use them. A table of a family with a folder (kernels/families/<family>/family.py) takes
its tunables, derived values and rules from the family, and may add rules of its own after them;
a table of an ad-hoc family declares ``derived`` and ``rules`` in params.yaml (``grid_model``).
Every validity check lives here once and serves the grid command, the compile-stage pruner and
the tests: the rules and the device limits (``limit_violations``).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunetable.config import KernelConfig, Value
from tunetable.errors import TuneTableError
from tunetable.inputs import INT64_MAX, check_expression_text
from tunetable.expr import Expression, parse_expression
from tunetable.kernels.families import FAMILIES, KernelFamily
from tunetable.kernels.families.common import (
    MAX_REGISTERS_PER_BLOCK,
    MAX_SHARED_BYTES_PER_BLOCK,
    MAX_THREADS_PER_BLOCK,
)
from tunetable.params import DEFAULT_PARAMS, TableSpec, load_params, table_spec

# Register allocation on sm_90 is per warp in units of 256 registers (CUDA occupancy calculator).
REGISTER_ALLOCATION_UNIT = 256
WARP_SIZE = 32
# A table's grid groups after overrides: (group name, values of each tunable it sets), in order.
Groups = Sequence[tuple[str, Mapping[str, Sequence[Value]]]]


@dataclass(frozen=True)
class DeviceLimits:
    """Per-block limits a configuration must respect to launch at all (compile.limits)."""

    max_shared_bytes_per_block: int = MAX_SHARED_BYTES_PER_BLOCK
    max_registers_per_block: int = MAX_REGISTERS_PER_BLOCK
    max_threads_per_block: int = MAX_THREADS_PER_BLOCK

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> "DeviceLimits":
        """Limits from ``compile.limits`` in params.yaml (the H200's for absent keys)."""
        raw = dict((params.get("compile") or {}).get("limits") or {})
        known = {name: int(raw[name]) for name in cls.__dataclass_fields__ if name in raw}
        return cls(**known)


@dataclass(frozen=True)
class Pruned:
    """A configuration that went, with why: ``stage`` is 'rule' (params.yaml) or 'limit' (device)."""

    config: KernelConfig
    reason: str
    stage: str


@dataclass(frozen=True)
class GridCounts:
    """How many configurations there were at each step of the expansion."""

    expanded: int
    after_filters: int
    after_rules: int
    after_pruning: int


@dataclass(frozen=True)
class GridResult:
    """The kept configurations (grid order), the pruned ones with reasons, and the counts."""

    table: str
    family: str
    kept: tuple[KernelConfig, ...]
    pruned: tuple[Pruned, ...]
    counts: GridCounts
    group_of: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    """One validity rule of a table's grid (parsed once)."""

    index: int
    expression: Expression

    def reason(self) -> str:
        """Why a configuration failing this rule went."""
        return f"rules[{self.index}] '{self.expression.source}' is false"


@dataclass(frozen=True)
class Derived:
    """One derived value (e.g. THREADS) computed from the tunables (and earlier derived values)."""

    name: str
    expression: Expression


def parse_value(text: str) -> Value:
    """A command-line value: int when it looks like one, ``true``/``false`` as bool, else the text."""
    stripped = text.strip()
    lowered = stripped.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(stripped, 0)
    except ValueError:
        return stripped


def parse_assignment(text: str, *, option: str) -> tuple[str, list[Value]]:
    """``NAME=v1,v2`` (or ``NAME:v1,v2``) -> (NAME, [v1, v2]); a malformed one names the option."""
    for separator in ("=", ":"):
        name, found, values = text.partition(separator)
        if found:
            break
    else:
        raise TuneTableError(f"expected NAME=VALUE[,VALUE...], got '{text}'", where=option)
    name = name.strip().lstrip("$")
    items = [item for item in values.strip().strip("[]").split(",") if item.strip()]
    if not name or not items:
        raise TuneTableError(f"expected NAME=VALUE[,VALUE...], got '{text}'", where=option)
    check_expression_text(text, what=f"{option} {name}", where=option)
    parsed = [parse_value(item) for item in items]
    for value in parsed:   # a define is an int64 at most (and a value no configuration holds is refused later)
        if isinstance(value, int) and not isinstance(value, bool) and not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise TuneTableError(f"{name}: an integer of {value.bit_length()} bits is beyond int64", where=option)
    return name, parsed


def _unique(values: Iterable[Any]) -> list[Any]:
    """Values with duplicates removed, first-seen order kept (True and 1 stay distinct)."""
    seen: set[tuple[type, Any]] = set()
    out = []
    for value in values:
        key = (type(value), value)
        if key not in seen:
            seen.add(key)
            out.append(value)
    return out


def _flatten(value: Any) -> list[Any]:
    """A group entry as a flat list (a scalar is a one-value list; nested lists flatten)."""
    if isinstance(value, (list, tuple)):
        return [item for element in value for item in _flatten(element)]
    return [value]


def normalise_groups(
    grid: Mapping[str, Any], *, path: str | Path, table: str
) -> list[tuple[str, dict[str, list[Value]]]]:
    """Groups as (name, {PARAM: values}) with flattened, de-duplicated value lists."""
    groups = grid.get("groups") or []
    if not groups:
        raise TuneTableError("a grid needs at least one group", path=path, where=f"tables.{table}.grid.groups")
    out = []
    for index, group in enumerate(groups):
        where = f"tables.{table}.grid.groups[{index}]"
        if not isinstance(group, Mapping):
            raise TuneTableError("a group is a mapping of NAME: [values]", path=path, where=where)
        name = str(group.get("name", f"group{index}"))
        values = {key: _unique(_flatten(raw)) for key, raw in group.items() if key not in ("name", "metadata")}
        for key, items in values.items():
            if not items:
                raise TuneTableError(f"parameter {key} has no values", path=path, where=where)
        out.append((name, values))
    return out


def apply_overrides(
    groups: list[tuple[str, dict[str, list[Value]]]], *, overrides: Mapping[str, Sequence[Value]], table: str
) -> list[tuple[str, dict[str, list[Value]]]]:
    """Replace the value list of each ``--param NAME`` in every group that has NAME."""
    out = [(name, dict(values)) for name, values in groups]
    for param, new_values in overrides.items():
        holders = [values for _, values in out if param in values]
        if not holders:
            known = ", ".join(sorted({key for _, values in out for key in values}))
            raise TuneTableError(
                f"no group of table '{table}' has parameter '{param}' (parameters: {known})", where="--param"
            )
        for values in holders:
            values[param] = _unique(new_values)
    return out


def compile_derived(
    grid: Mapping[str, Any], *, param_names: Iterable[str], path: str | Path, table: str
) -> list[Derived]:
    """Parse ``derived``: each may use the tunables and the derived values declared before it."""
    allowed = set(param_names)
    out = []
    for name, source in (grid.get("derived") or {}).items():
        where = f"tables.{table}.grid.derived.{name}"
        if name in allowed:
            raise TuneTableError(
                f"derived value '{name}' shadows a parameter or earlier derived value", path=path, where=where
            )
        expression = parse_expression(
            str(source), allowed_names=allowed, kind=f"derived value {name}", path=path, where=where
        )
        out.append(Derived(name=name, expression=expression))
        allowed.add(name)
    return out


def compile_rules(grid: Mapping[str, Any], *, names: Iterable[str], path: str | Path, table: str,
                  family: KernelFamily | None = None) -> list[Rule]:
    """Parse the rules (boolean expressions over tunables and derived values): the family's, then the table's.

    They are numbered in that order, so ``rules[i]`` in a prune reason is the i-th of them.
    """
    allowed = frozenset(names)
    sources: list[tuple[str, str | Path, str]] = []
    if family is not None:
        sources += [(rule.text, family.folder / "family.py", f"{family.name}.rules[{index}]")
                    for index, rule in enumerate(family.rules)]
    sources += [(str(text), path, f"tables.{table}.grid.rules[{index}]")
                for index, text in enumerate(grid.get("rules") or [])]
    return [
        Rule(index=index, expression=parse_expression(text, allowed_names=allowed, kind="rule", path=where_path,
                                                      where=where))
        for index, (text, where_path, where) in enumerate(sources)
    ]


def derive(params: Mapping[str, Value], derived: Sequence[Derived]) -> dict[str, Value]:
    """The derived values of one configuration, in declaration order."""
    env: dict[str, Value] = dict(params)
    out: dict[str, Value] = {}
    for item in derived:
        value = item.expression.evaluate(env)
        # Integral floats (e.g. from '/') become ints so that -D defines stay C integer literals.
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        env[item.name] = out[item.name] = value
    return out


def first_failed_rule(env: Mapping[str, Value], rules: Sequence[Rule]) -> Rule | None:
    """The first rule that ``env`` breaks, or None when all hold."""
    for rule in rules:
        if not rule.expression.evaluate(env):
            return rule
    return None


def limit_violations(
    defines: Mapping[str, Value],
    *,
    limits: DeviceLimits,
    smem_bytes: int | None = None,
    registers: int | None = None,
    threads: int | None = None,
) -> list[str]:
    """Every device limit a configuration breaks (empty when it fits); unknown figures are skipped.

    ``threads`` defaults to the ``THREADS`` define when the grid derives one.
    """
    problems = []
    if threads is None and isinstance(defines.get("THREADS"), int):
        threads = int(defines["THREADS"])
    if isinstance(threads, int) and threads > limits.max_threads_per_block:
        problems.append(f"{threads} threads > {limits.max_threads_per_block} per block")
    if smem_bytes is not None and smem_bytes > limits.max_shared_bytes_per_block:
        problems.append(f"{smem_bytes} B shared memory > {limits.max_shared_bytes_per_block} B per block")
    if registers is not None and isinstance(threads, int):
        block_registers = registers_per_block(registers=registers, threads=threads)
        if block_registers > limits.max_registers_per_block:
            problems.append(
                f"{registers} registers x {threads} threads = {block_registers} > "
                f"{limits.max_registers_per_block} per block"
            )
    return problems


def registers_per_block(*, registers: int, threads: int) -> int:
    """Registers a block really takes: per warp, rounded up to the allocation unit."""
    warps = -(-threads // WARP_SIZE)
    per_warp = -(-registers * WARP_SIZE // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    return warps * per_warp


def family_figure(family: str, name: str, defines: Mapping[str, Value]) -> int | None:
    """``FAMILIES[family].<name>(defines)`` (e.g. smem_bytes, threads); None for an ad-hoc family."""
    found = FAMILIES.get(family)
    if found is None:
        return None
    try:
        return int(getattr(found, name)(dict(defines)))
    except (KeyError, ValueError, TypeError, ZeroDivisionError):
        # A formula that cannot size this config leaves the check to ptxas after compile.
        return None


def family_smem_bytes(family: str, defines: Mapping[str, Value]) -> int | None:
    """Dynamic shared memory per block from the family's formula, or None when it has none."""
    return family_figure(family, "smem_bytes", defines)


def config_threads(config: KernelConfig) -> int | None:
    """Threads per block: the grid's THREADS when derived, else the family's formula, else unknown."""
    threads = config.defines().get("THREADS")
    if isinstance(threads, int) and not isinstance(threads, bool):
        return threads
    return family_figure(config.family, "threads", config.defines())


def _matches(config: KernelConfig, filters: Mapping[str, Sequence[Value]]) -> bool:
    """kbench --filter semantics: values of one name OR'ed, names AND'ed, compared as text too."""
    defines = config.defines()
    for name, wanted in filters.items():
        value = defines.get(name)
        if not any(value == item or str(value) == str(item) for item in wanted):
            return False
    return True


def check_filters(configs: Sequence[KernelConfig], *, filters: Mapping[str, Sequence[Value]], table: str) -> None:
    """Every ``--filter NAME=VALUE`` value is held by some configuration (as ``--param`` refuses an unknown one).

    A filter that matches nothing would leave an empty grid: refused before anything is written.
    """
    for name, wanted in filters.items():
        held = {config.defines().get(name) for config in configs}
        for item in wanted:
            if not any(value == item or str(value) == str(item) for value in held):
                shown = ", ".join(str(value) for value in sorted(held, key=lambda v: (str(type(v)), str(v))))
                raise TuneTableError(f"{name}={item} matches no configuration of table {table} (its values: "
                                     f"{shown[:200]})", where="--filter")


@dataclass(frozen=True)
class GridModel:
    """Where a table's tunables, derived values and rules come from: its family's folder, or params.yaml."""

    param_names: tuple[str, ...]
    derived_names: tuple[str, ...]
    derive: Callable[[Mapping[str, Value]], dict[str, Value]]
    rules: tuple[Rule, ...]


def _check_family_groups(groups: Groups, *, family: KernelFamily, path: str | Path, table: str) -> None:
    """Every group names exactly the family's tunables, with integer values (the kernel's -D defines)."""
    expected = family.tunable_names()
    for index, (_, values) in enumerate(groups):
        where = f"tables.{table}.grid.groups[{index}]"
        missing = [name for name in expected if name not in values]
        unknown = [name for name in values if name not in expected]
        if missing or unknown:
            raise TuneTableError(
                f"family {family.name}'s tunables are {', '.join(expected)} (missing: {', '.join(missing) or '-'}; "
                f"unknown: {', '.join(unknown) or '-'})", path=path, where=where)
        for name in expected:
            bad = [value for value in values[name] if isinstance(value, bool) or not isinstance(value, int)]
            if bad:
                raise TuneTableError(f"{name} must be integers, got {bad[0]!r}", path=path, where=f"{where}.{name}")


def grid_model(table_spec: TableSpec, *, groups: Groups, path: str | Path) -> GridModel:
    """The family's tunables, derived values and rules (plus the table's rules), or params.yaml's for an
    ad-hoc family."""
    table = table_spec.name
    family = FAMILIES.get(table_spec.family)
    if family is not None:
        _check_family_groups(groups, family=family, path=path, table=table)
        names = (*family.tunable_names(), *family.derived_names)
        rules = compile_rules(table_spec.grid, names=names, path=path, table=table, family=family)
        return GridModel(param_names=family.tunable_names(), derived_names=family.derived_names,
                         derive=family.derived, rules=tuple(rules))
    param_names = tuple(_unique(key for _, values in groups for key in values))
    derived = compile_derived(table_spec.grid, param_names=param_names, path=path, table=table)
    derived_names = tuple(item.name for item in derived)
    rules = compile_rules(table_spec.grid, names=[*param_names, *derived_names], path=path, table=table)
    return GridModel(param_names=param_names, derived_names=derived_names,
                     derive=lambda params: derive(params, derived), rules=tuple(rules))


DEFAULT_MAX_CONFIGS = 1_000_000   # tables.<name>.grid.max_configs overrides it


def check_grid_size(groups: Groups, *, grid: Mapping[str, Any], path: str | Path, table: str) -> int:
    """The configurations the groups expand to (before rules), refused past ``grid.max_configs`` before expanding."""
    cap = int(grid.get("max_configs", DEFAULT_MAX_CONFIGS))
    sizes = [(name, math.prod(len(items) for items in values.values())) for name, values in groups]
    total = sum(size for _, size in sizes)
    if total > cap:
        largest = ", ".join(f"{name}: {size}" for name, size in sorted(sizes, key=lambda item: -item[1])[:3])
        raise TuneTableError(f"the groups expand to {total} configurations before any rule ({largest}), more than "
                             f"max_configs = {cap}: narrow the groups, or raise tables.{table}.grid.max_configs",
                             path=path, where=f"tables.{table}.grid")
    return total


def _check_filter_names(wanted: Mapping[str, Sequence[Value]], *, model: GridModel) -> None:
    """Every ``--filter`` name is a parameter or a derived value of the grid."""
    all_names = [*model.param_names, *model.derived_names]
    unknown = sorted(set(wanted) - set(all_names))
    if unknown:
        raise TuneTableError(
            f"unknown parameter(s) {', '.join(unknown)} (parameters: {', '.join(all_names)})", where="--filter"
        )


def _expand_groups(groups: Groups, *, model: GridModel, family: str) -> tuple[list[KernelConfig], dict[str, str]]:
    """Every distinct configuration of the groups in order, and the group each was first found in (by id)."""
    expanded: list[KernelConfig] = []
    group_of: dict[str, str] = {}
    seen: set[tuple[Any, ...]] = set()
    for group_name, values in groups:
        names = [name for name in model.param_names if name in values]   # the family's order
        # The id hashes the tunables whatever their order: a repeat (groups overlap) is skipped before it
        # is derived and hashed, by its values in name order with their types (True is not 1).
        order = sorted(range(len(names)), key=names.__getitem__)
        sorted_names = tuple(names[i] for i in order)
        for combination in itertools.product(*(values[name] for name in names)):
            identity = (sorted_names, tuple(combination[i] for i in order), tuple(map(type, combination)))
            if identity in seen:
                continue
            seen.add(identity)
            params = dict(zip(names, combination))
            config = KernelConfig(
                family=family, params=tuple(params.items()), derived=tuple(model.derive(params).items())
            )
            if config.id not in group_of:
                group_of[config.id] = group_name
                expanded.append(config)
    return expanded, group_of


def _prune(
    selected: Sequence[KernelConfig], *, model: GridModel, limits: DeviceLimits | None, family: str
) -> tuple[list[KernelConfig], list[Pruned], int]:
    """(kept, pruned by a rule or a device limit, how many passed the rules) of the selected configurations."""
    kept: list[KernelConfig] = []
    pruned: list[Pruned] = []
    after_rules = 0
    for config in selected:
        failed = first_failed_rule(config.defines(), model.rules)
        if failed is not None:
            pruned.append(Pruned(config=config, reason=failed.reason(), stage="rule"))
            continue
        after_rules += 1
        problems = [] if limits is None else limit_violations(
            config.defines(), limits=limits, smem_bytes=family_smem_bytes(family, config.defines()),
            threads=config_threads(config))
        if problems:
            pruned.append(Pruned(config=config, reason="; ".join(problems), stage="limit"))
        else:
            kept.append(config)
    return kept, pruned, after_rules


def expand(
    table_spec: TableSpec,
    *,
    overrides: Mapping[str, Sequence[Value]] | None = None,
    filters: Mapping[str, Sequence[Value]] | None = None,
    limits: DeviceLimits | None = None,
    path: str | Path = DEFAULT_PARAMS,
) -> GridResult:
    """Expand a table's grid: groups -> overrides -> derived -> filters -> rules -> device limits."""
    table = table_spec.name
    groups = apply_overrides(
        normalise_groups(table_spec.grid, path=path, table=table), overrides=overrides or {}, table=table
    )
    check_grid_size(groups, grid=table_spec.grid, path=path, table=table)
    model = grid_model(table_spec, groups=groups, path=path)
    wanted = dict(filters or {})
    _check_filter_names(wanted, model=model)
    expanded, group_of = _expand_groups(groups, model=model, family=table_spec.family)
    check_filters(expanded, filters=wanted, table=table)
    selected = [config for config in expanded if _matches(config, wanted)]
    kept, pruned, after_rules = _prune(selected, model=model, limits=limits, family=table_spec.family)
    if wanted and not kept:
        shown = " ".join(f"{name}={','.join(map(str, values))}" for name, values in wanted.items())
        reason = pruned[0].reason if pruned else "no configuration has every value"
        raise TuneTableError(f"{shown} leaves no configuration of table {table}: {len(selected)} matched, every one "
                             f"pruned (first: {reason})"[:400], where="--filter")
    counts = GridCounts(
        expanded=len(expanded), after_filters=len(selected), after_rules=after_rules, after_pruning=len(kept)
    )
    return GridResult(
        table=table,
        family=table_spec.family,
        kept=tuple(kept),
        pruned=tuple(pruned),
        counts=counts,
        group_of={config.id: group_of[config.id] for config in selected},
    )


def config_entry(config: KernelConfig) -> dict[str, Any]:
    """A configuration as the grid JSON writes it: id, params, derived."""
    return {"id": config.id, "params": dict(config.params), "derived": dict(config.derived)}


def grid_document(result: GridResult, *, kernel_hash: str | None) -> dict[str, Any]:
    """The ``results/grid/T.json`` document (docs/internals.md)."""
    return {
        "table": result.table,
        "family": result.family,
        "kernel_hash": kernel_hash,
        "counts": {
            "expanded": result.counts.expanded,
            "after_filters": result.counts.after_filters,
            "after_rules": result.counts.after_rules,
            "after_pruning": result.counts.after_pruning,
        },
        "configs": [{**config_entry(config), "group": result.group_of.get(config.id)} for config in result.kept],
        "pruned": [
            {**config_entry(item.config), "stage": item.stage, "reason": item.reason} for item in result.pruned
        ],
    }


def grid_json_text(document: Mapping[str, Any]) -> str:
    """The grid JSON as text: one configuration per line (readable and diffable; json's C encoder writes
    each line, so 100 k configurations take a second, not the pure-Python indenting encoder's ~20 s)."""
    lines = ["{"]
    items = list(document.items())
    for index, (key, value) in enumerate(items):
        comma = "," if index < len(items) - 1 else ""
        if isinstance(value, list) and value:
            entries = [f" {json.dumps(entry)}" for entry in value]
            lines.append(f"{json.dumps(key)}: [\n" + ",\n".join(entries) + f"\n]{comma}")
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value)}{comma}")
    return "\n".join(lines) + "\n}\n"


def configs_from_document(document: Mapping[str, Any], *, path: str | Path) -> list[KernelConfig]:
    """Read the kept configurations back from a grid JSON document (checking each id)."""
    family = document.get("family")
    out = []
    for index, entry in enumerate(document.get("configs") or []):
        config = KernelConfig.from_dict(family, entry.get("params") or {}, entry.get("derived") or {})
        if config.id != entry.get("id"):
            raise TuneTableError(
                f"id {entry.get('id')} does not match its params (expected {config.id})", path=path,
                where=f"configs[{index}]"
            )
        out.append(config)
    return out


def parse_assignments(texts: Iterable[str], *, option: str) -> dict[str, list[Value]]:
    """Repeated ``NAME=v1,v2`` options as {NAME: values}; a repeated NAME adds its values."""
    out: dict[str, list[Value]] = {}
    for text in texts:
        name, values = parse_assignment(text, option=option)
        out[name] = _unique([*out.get(name, []), *values])
    return out


@dataclass(frozen=True)
class TableGrid:
    """A table's expanded grid with what it came from (shared by the grid and compile commands)."""

    params: Mapping[str, Any]
    spec: TableSpec
    result: GridResult
    root: Path

    @property
    def kernel_path(self) -> Path:
        """The kernel source, relative to the folder of params.yaml."""
        return self.root / self.spec.kernel


def load_table_grid(
    *, params_path: str | Path, table: str, param_options: Iterable[str] = (), filter_options: Iterable[str] = ()
) -> TableGrid:
    """Load params.yaml, apply --param / --filter and expand the table's grid with the device limits."""
    params = load_params(params_path)
    spec = table_spec(params, table, path=params_path)
    result = expand(
        spec,
        overrides=parse_assignments(param_options, option="--param"),
        filters=parse_assignments(filter_options, option="--filter"),
        limits=DeviceLimits.from_params(params),
        path=params_path,
    )
    return TableGrid(params=params, spec=spec, result=result, root=Path(params_path).resolve().parent)
