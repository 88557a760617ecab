"""What the Snakefile needs at parse time: the plan (tables, backend, content keys) and target lists.

Parsing must stay cheap and deterministic (a cluster job re-parses the Snakefile): no CUDA
context, no network. The backend is resolved once here, so a replayed run never asks for the
compile stage and a live run asks for exactly one GPU per bench job.

A raw shard's path carries the content key of everything that produced it, so a shard on disk is
final: only missing shards get a producing rule. Existing ones are plain inputs, and nothing
upstream (a re-created compile report after a fresh clone, a forced rule) can re-measure them.

Checked-in files (manifests/*.yaml, kernels/tuning_configs.py) are never Snakemake outputs:
Snakemake deletes a job's outputs before it runs and after it fails, which would delete reviewed
files. The select and codegen rules write them in place (atomically, through the CLI) and declare
a stamp under results/stamps/ as their output.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from pipeline import paths
from pipeline.errors import TuneTableError
from pipeline.keys import canonical_json, sha256_text
from pipeline.params import SCHEMA_PATH, TableSpec, load_params, table_specs  # noqa: F401 - the Snakefile validates with SCHEMA_PATH

# The CLI as the interpreter running Snakemake sees it: works without an activated venv.
CLI = f"{shlex.quote(sys.executable)} -m pipeline"
# Live bench jobs claim a free GPU first (Snakemake assigns no device ids): see pipeline/gpu_claim.py.
GPU_CLAIM = f"{shlex.quote(sys.executable)} -m pipeline.gpu_claim "
STAMPS = paths.RESULTS / "stamps"
KEY_PATTERN = "[0-9a-f]{16}"


@dataclass(frozen=True)
class Plan:
    """Everything the rules need, resolved once per parse."""

    tables: tuple[TableSpec, ...]
    backend: str                      # resolved: "cuda" or "replay"
    backend_line: str                 # the loud line that says which and why
    keys: Mapping[str, str]           # table -> content key of its raw shards
    recording: Path

    def table(self, name: str) -> TableSpec:
        """The TableSpec of a declared table."""
        for spec in self.tables:
            if spec.name == name:
                return spec
        raise TuneTableError(f"unknown table '{name}'", path="params.yaml", where="tables")


def check_params_file(path: str | Path) -> None:
    """Load and validate params.yaml before Snakemake does, so a bad file fails with one clear line."""
    load_params(path)


def check_manifest_paths(tables: tuple[TableSpec, ...], *, path: str | Path) -> None:
    """Each table's manifest must be manifests/<table>.yaml: the rules derive it from the name."""
    for spec in tables:
        expected = manifest_path(spec.name)
        if Path(spec.codegen.manifest) != expected:
            raise TuneTableError(
                f"manifest must be {expected} (the pipeline derives it from the table name)",
                path=path, where=f"tables.{spec.name}.codegen.manifest",
            )


def make_plan(config: Mapping[str, Any], *, params_path: str | Path = "params.yaml") -> Plan:
    """Resolve backend and content keys for every declared table (the Snakefile calls this once)."""
    from pipeline.bench.plan import recording_path, resolve_backend, shard_key

    tables = tuple(table_specs(dict(config), path=params_path))
    check_manifest_paths(tables, path=params_path)
    recording = recording_path(params=config)
    requested = str((config.get("bench") or {}).get("backend", "auto"))
    choice = resolve_backend(requested=requested, recording=recording)
    keys = {spec.name: shard_key(config, spec, choice.backend) for spec in tables}
    return Plan(tables=tables, backend=choice.backend, backend_line=choice.reason, keys=keys, recording=recording)


def banner(plan: Plan) -> str:
    """The loud line printed at the start and end of a run: replayed or measured live."""
    if plan.backend == "replay":
        what = "REPLAYING the committed recording (no GPU timing happens in this run)"
    else:
        what = "MEASURING LIVE on the GPU"
    return f"tunetable: {what}\ntunetable: {plan.backend_line}"


def manifest_path(table: str) -> Path:
    """The checked-in manifest of a table."""
    return Path("manifests") / f"{table}.yaml"


def select_stamp(table: str) -> Path:
    """Stamp written after select rewrote manifests/<table>.yaml (holds its sha256)."""
    return STAMPS / "select" / f"{table}.sha256"


def codegen_stamp() -> Path:
    """Stamp written after codegen rewrote and re-checked every generated table."""
    return STAMPS / "codegen.ok"


def shard_paths(plan: Plan, *, table: str) -> list[str]:
    """Raw shard files of a table for the current content key, in params.yaml shape order."""
    key = plan.keys[table]
    return [str(paths.raw_shard(table, key, m, n, k)) for (m, n, k) in plan.table(table).shapes()]


@dataclass(frozen=True)
class Shard:
    """One (table, shape) result file for the table's current content key."""

    table: str
    key: str
    m: int
    n: int
    k: int

    @property
    def stem(self) -> str:
        """``M1_N4096_K4096``."""
        return paths.shape_name(self.m, self.n, self.k)

    @property
    def path(self) -> str:
        """Where the shard lives."""
        return str(paths.raw_shard(self.table, self.key, self.m, self.n, self.k))

    @property
    def shape_arg(self) -> str:
        """``M,N,K`` as the bench CLI takes it."""
        return f"{self.m},{self.n},{self.k}"


def missing_shards(plan: Plan) -> list[Shard]:
    """Shards of the current keys that are not on disk yet (a shard on disk is final)."""
    return [shard for spec in plan.tables for (m, n, k) in spec.shapes()
            for shard in [Shard(spec.name, plan.keys[spec.name], m, n, k)] if not Path(shard.path).is_file()]


def missing_by_table(plan: Plan) -> dict[str, list[Shard]]:
    """Missing shards grouped per table (tables with none are left out)."""
    grouped: dict[str, list[Shard]] = {}
    for shard in missing_shards(plan):
        grouped.setdefault(shard.table, []).append(shard)
    return grouped


def shape_options(shards: list[Shard]) -> str:
    """``--shape M,N,K`` for each shard, as one shell fragment."""
    return " ".join(f"--shape {shard.shape_arg}" for shard in shards)


def compile_stamp(*, table: str, key: str) -> str:
    """Stamp of a table's grid file + compile report for one content key."""
    return str(STAMPS / "compile" / table / f"{key}.ok")


def compile_stamp_of(shard: str) -> str:
    """The compile stamp a live shard (``<table>/<key>/<stem>``) needs."""
    table, key, _ = shard.split("/")
    return compile_stamp(table=table, key=key)


def missing_shard_pattern(plan: Plan) -> str:
    """Regex matching exactly the missing shards as ``<table>/<key>/<stem>``."""
    import re

    names = [f"{s.table}/{s.key}/{s.stem}" for s in missing_shards(plan)]
    return "(?:" + "|".join(re.escape(name) for name in names) + ")"


def replay_inputs(plan: Plan) -> list[str]:
    """The recording and its provenance sidecar."""
    from pipeline.bench.plan import sidecar_path

    return [str(plan.recording), str(sidecar_path(plan.recording))]


def all_shards(plan: Plan) -> list[str]:
    """Raw shard files of every table."""
    return [p for spec in plan.tables for p in shard_paths(plan, table=spec.name)]


def ranked_outputs(table: str) -> dict[str, str]:
    """The files ``tunetable rank`` writes for a table."""
    parquet = paths.ranked(table)
    return {
        "parquet": str(parquet),
        "csv": str(parquet.with_suffix(".csv")),
        "md": str(parquet.with_suffix(".md")),
        "failures": str(parquet.with_name(f"{table}.failures.csv")),
    }


def metrics_outputs(table: str) -> dict[str, str]:
    """The files ``tunetable metrics`` writes for a table."""
    csv = paths.plot_data(table)
    return {"json": str(paths.metrics(table)), "csv": str(csv), "png": str(csv.with_suffix(".png"))}


def codegen_inputs(plan: Plan) -> list[str]:
    """Select stamps, snippets and targets: a hand edit of a generated file re-runs codegen."""
    files: list[str] = [str(select_stamp(spec.name)) for spec in plan.tables]
    for spec in plan.tables:
        files.append(spec.codegen.snippet)
        files.extend(spec.codegen.variants.values())
        files.append(spec.codegen.target)
    return sorted(set(files), key=files.index)


def fingerprint(value: Any) -> str:
    """Short stable hash of settings: a Snakemake ``params:`` value that changes only when they do."""
    return sha256_text(canonical_json(value))[:16]


def settings_tag(value: Any) -> str:
    """A shell comment carrying a settings fingerprint: Snakemake's code trigger (which compares the
    command template) then re-runs the rule when the settings change, with no ``params:`` block."""
    return f"  # settings {fingerprint(value)}"


def select_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """What manifests depend on besides the ranked tables: select settings and each table's family."""
    return {"select": config.get("select"), "families": {n: s["family"] for n, s in config["tables"].items()}}


def codegen_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """Every table's codegen settings."""
    return {name: spec["codegen"] for name, spec in config["tables"].items()}


def wildcard_constraints(plan: Plan) -> dict[str, str]:
    """Regexes for the rule wildcards: only declared tables and current keys match."""
    names = "|".join(sorted(spec.name for spec in plan.tables))
    keys = "|".join(sorted(set(plan.keys.values()))) or KEY_PATTERN
    return {"table": f"(?:{names})", "key": f"(?:{keys})"}
