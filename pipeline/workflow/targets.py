"""What the rules ask for: the inputs of rank, metrics, measure_all, codegen, dispatch and selector rules, and
the wildcard constraints.

A raw shard on disk is final: existing ones are inputs flagged ``before_update`` (Snakemake then
searches no producer for them), so nothing upstream (a re-created compile report after a fresh
clone, a forced rule) can re-measure them; missing ones are plain inputs that their batch makes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tunetable.measurement_plan import sidecar_path
from tunetable.params import (
    DispatchSpec,
    SelectorSpec,
    dispatch_specs,
    primary_recording,
    selector_specs,
    table_spec,
    table_specs,
)
from tunetable.workflow.batches import live_batches, replay_batches, restore_jobs
from tunetable.workflow.run_plan import Plan, shard_paths, stale_raw
from tunetable.workflow.stamps import manifest_path, park_stamp, ranked_outputs, select_stamp

KEY_PATTERN = "[0-9a-f]{16}"


def shard_inputs(plan: Plan, *, table: str, existing: Callable[[str], Any]) -> list[Any]:
    """A table's shards as rule inputs: existing ones wrapped in ``existing`` (the Snakefile passes
    ``before_update``: no producer is searched for them), missing ones plain (their rule makes them)."""
    return [as_input(plan, path=path, existing=existing) for path in shard_paths(plan, table=table)]


def as_input(plan: Plan, *, path: str, existing: Callable[[str], Any]) -> Any:
    """A shard path as a rule input: wrapped in ``existing`` when it is on disk, plain when a rule makes it."""
    return path if path in plan.absent else existing(path)


def key_shard_inputs(plan: Plan, *, tables: Sequence[str], existing: Callable[[str], Any]) -> list[Any]:
    """One shard of each table (its first), as ``shard_inputs`` wraps it: what metrics needs for the content key.

    Metrics read the ranked table, never the shards; listing every shard would cost Snakemake a
    producer search or an mtime check per shard (tens of thousands) for a path it only takes a folder
    name from. The ranked parquet, a rank output, changes whenever a shard does.
    """
    return [as_input(plan, path=plan.shards[table][0].path, existing=existing) for table in tables
            if plan.shards[table]]


def measure_inputs(plan: Plan, *, existing: Callable[[str], Any]) -> list[Any]:
    """What ``measure_all`` asks for: every existing shard (wrapped in ``existing``) and one output of each
    job that makes the missing ones (a replay job makes all of its shards: asking for each again would
    cost a producer search per shard; measure_all has no output, so its input list may change)."""
    present = [existing(shard.path) for spec in plan.tables for shard in plan.shards[spec.name]
               if shard.path not in plan.absent]
    made = [shards[0].path for _, shards in restore_jobs(plan)]
    return present + made + replay_targets(plan) + [job.shards[0].path for job in live_batches(plan)]


def replay_targets(plan: Plan) -> list[str]:
    """One journal per replay job: asked for by name, so a job runs when its shards are missing and also
    when only their journals are (a shard written before checksums: Snakemake re-runs a job for the
    outputs requested from it, not for its other missing outputs)."""
    return [job.shards[0].journal for job in replay_batches(plan)] if plan.backend == "replay" else []


def park_inputs(plan: Plan) -> list[str]:
    """The park stamp, when results/raw holds other keys' shards (measure_all and all ask for it)."""
    return [park_stamp()] if stale_raw(plan) else []


def replay_inputs(plan: Plan, *, table: str) -> list[str]:
    """A table's recording and its provenance sidecar."""

    recording = plan.recordings[table]
    return [str(recording), str(sidecar_path(recording))]


def codegen_inputs(plan: Plan, config: Mapping[str, Any]) -> list[str]:
    """Select stamps, snippets and targets: a hand edit of a generated file re-runs codegen.

    Codegen renders every declared table and dispatch list; the manifests of those this run leaves
    out are plain inputs (their select rule is not part of the run). A selector's data file stands in its
    snippet's place; one this run selects is represented by its select stamp instead (which holds the file's
    sha256, and is dropped when the file changes: housekeeping), as a device's first one does not exist yet.
    """
    params = dict(config)
    files: list[str] = [str(select_stamp(spec.name)) for spec in (*plan.tables, *plan.dispatches, *plan.selectors)]
    files += [str(manifest_path(name)) for name in (*plan.skipped, *plan.skipped_dispatches, *plan.skipped_selectors)]
    selected = {spec.name for spec in plan.selectors}
    for spec in (*table_specs(params), *dispatch_specs(params), *selector_specs(params)):
        if spec.name not in selected:
            files.append(spec.codegen.snippet)
        files.extend(spec.codegen.variants.values())
        files.append(spec.codegen.target)
    return sorted(set(files), key=files.index)


def dispatch_inputs(spec: DispatchSpec) -> list[str]:
    """What a dispatch list is selected from: each table's ranked parquet and select stamp (its manifest)."""
    return [path for table in spec.tables for path in (ranked_outputs(table)["parquet"], str(select_stamp(table)))]


def selector_inputs(spec: SelectorSpec, *, params: Mapping[str, Any], root: Path = Path(".")) -> list[str]:
    """What a selector is built from: each of its tables' recording and provenance sidecar; with coverage shapes,
    their CSV and the coverage recordings (and sidecars) present under ``root`` (a new recording reruns it)."""

    found = []
    for table in spec.tables:
        recording = Path(primary_recording(dict(params), table) or "")
        found += [str(recording), str(sidecar_path(recording))]
    if spec.coverage is None:
        return found
    found.append(spec.coverage)
    for table in spec.tables:
        coverage = table_spec(dict(params), table).coverage_recording()
        if coverage is not None and (root / coverage).is_file():
            found += [coverage, str(sidecar_path(Path(coverage)))]
    return found


def wildcard_constraints(plan: Plan) -> dict[str, str]:
    """Regexes for the rule wildcards: only declared tables and current keys match."""
    names = "|".join(sorted(spec.name for spec in plan.tables))
    keys = "|".join(sorted(set(plan.keys.values()))) or KEY_PATTERN
    return {"table": f"(?:{names})", "key": f"(?:{keys})"}
