"""Load and validate params.yaml: the single source of settings (tables, compile, bench, select)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from pipeline.errors import TuneTableError

SCHEMA_PATH = Path(__file__).with_name("schemas") / "params.schema.yaml"
DEFAULT_PARAMS = Path("params.yaml")


@dataclass(frozen=True)
class CodegenSpec:
    """Where a table's manifest, snippet and generated region live."""

    manifest: str
    snippet: str
    target: str
    begin_marker: str
    end_marker: str
    source_label: str
    variants: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TableSpec:
    """One tuning table declared in params.yaml."""

    name: str
    family: str
    kernel: str
    dtype: str
    arch: str
    nk: tuple[tuple[int, int], ...]
    m_values: tuple[int, ...]
    grid: dict[str, Any]
    codegen: CodegenSpec
    search: dict[str, Any]

    def shapes(self) -> list[tuple[int, int, int]]:
        """All (M, N, K) shapes of the table, in declaration order (NK pairs outer, M inner)."""
        return [(m, n, k) for (n, k) in self.nk for m in self.m_values]


def _format_location(error: Any) -> str:
    parts = []
    for item in error.absolute_path:
        parts.append(f"[{item}]" if isinstance(item, int) else f".{item}")
    return "".join(parts).lstrip(".") or "(top level)"


def validate_params(data: Any, *, path: str | Path) -> None:
    """Validate parsed params against the schema; raise one line naming the failing key."""
    import jsonschema

    if not isinstance(data, dict):
        raise TuneTableError("expected a YAML mapping at the top level", path=path)
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        first = errors[0]
        raise TuneTableError(first.message, path=path, where=_format_location(first))


def load_params(path: str | Path = DEFAULT_PARAMS) -> dict[str, Any]:
    """Read and validate params.yaml (yaml.safe_load only)."""
    source = Path(path)
    if not source.is_file():
        raise TuneTableError("no such file", path=source)
    try:
        data = yaml.safe_load(source.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise TuneTableError(f"malformed YAML: {problem}", path=source, where=where) from None
    validate_params(data, path=source)
    return data


@lru_cache(maxsize=8)
def _cached(path: str, mtime_ns: int) -> dict[str, Any]:
    return load_params(path)


def cached_params(path: str | Path = DEFAULT_PARAMS) -> dict[str, Any]:
    """load_params memoised on (path, mtime): cheap to call from every command."""
    source = Path(path)
    if not source.is_file():
        raise TuneTableError("no such file", path=source)
    return _cached(str(source), source.stat().st_mtime_ns)


def table_spec(params: dict[str, Any], name: str, *, path: str | Path = DEFAULT_PARAMS) -> TableSpec:
    """The TableSpec for table ``name``; an unknown name lists the declared ones."""
    tables = params["tables"]
    if name not in tables:
        known = ", ".join(sorted(tables))
        raise TuneTableError(f"unknown table '{name}' (declared: {known})", path=path, where="tables")
    raw = tables[name]
    cg = raw["codegen"]
    return TableSpec(
        name=name,
        family=raw["family"],
        kernel=raw["kernel"],
        dtype=raw["dtype"],
        arch=raw.get("arch", "sm_90a"),
        nk=tuple((int(n), int(k)) for n, k in raw["shapes"]["NK"]),
        m_values=tuple(int(m) for m in raw["shapes"]["M"]),
        grid=raw["grid"],
        codegen=CodegenSpec(
            manifest=cg["manifest"],
            snippet=cg["snippet"],
            target=cg["target"],
            begin_marker=cg["begin_marker"],
            end_marker=cg["end_marker"],
            source_label=cg["source_label"],
            variants=dict(cg.get("variants") or {}),
        ),
        search=dict(raw.get("search") or {"strategy": "exhaustive"}),
    )


def table_specs(params: dict[str, Any], *, path: str | Path = DEFAULT_PARAMS) -> list[TableSpec]:
    """Every declared table, in params.yaml order."""
    return [table_spec(params, name, path=path) for name in params["tables"]]
