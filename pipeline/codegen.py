"""Generate deterministic tuning-table regions from YAML manifests (Modular tuning_codegen parity).

The pure core: snippets with ``[@NAME]`` placeholders are rendered once per manifest entry and
the result replaces the text between two marker lines of a target file. Output is byte-identical
to Modular's ``tuning_codegen`` for the same manifest, snippet and flags; tunetable adds a
provenance line (only when the manifest carries a ``provenance:`` mapping) and an overlap check.
Errors are ``TuneTableError`` with Modular's message text, prefixed by the file they concern.
Nothing here writes a file: ``generate_target`` returns the new text.

One module per concern, this one joining them (and holding Modular's API names, re-exported below):
the field typing (tunetable.codegen_fields, on tunetable.kernels.families.entry_fields), the rendering
(tunetable.codegen_render), the overlap check (tunetable.codegen_overlap) and the jobs from the flags or
params.yaml (tunetable.codegen_jobs). A declared table's values are typed before anything is rendered;
a shape selector's region records its data file's sha256 and provenance (the file checked against its
manifest and its candidates against the typed fields first). Manifests of tables tunetable does not
declare keep Modular's semantics (values inserted verbatim), byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

# Modular's tuning_codegen API (load_manifest, validate_manifest, render_snippet, render_region,
# replace_generated_region, parse_snippet_variants, generate_target, ...) is this module's: re-exported.
from tunetable.codegen_fields import check_snippet, dispatch_fields, literal_entries, table_fields  # noqa: F401
from tunetable.codegen_jobs import (  # noqa: F401
    BuildsJob,
    SelectorJob,
    TableBuildLine,
    TableJob,
    TableResult,
    TargetResult,
    builds_job_from_params,
    declared_job,
    jobs_from_params,
)
from tunetable.codegen_devices import (  # noqa: F401
    DEVICE_TABLES_BEGIN_MARKER,
    DEVICE_TABLES_END_MARKER,
    DeviceBlock,
    measured_on,
    render_device_tables_region,
)
from tunetable.codegen_overlap import Overlap, OverlapReport, find_overlaps, int_value  # noqa: F401
from tunetable.codegen_render import (  # noqa: F401
    DEFAULT_INDENT,
    check_comment_text,
    format_value,
    line_ending,
    marker_line,
    params_hash,
    parse_snippet_variants,
    provenance_comment,
    DEVICES_BEGIN_MARKER,
    DEVICES_END_MARKER,
    render_builds_region,
    render_devices_region,
    render_region,
    render_selector_region,
    render_snippet,
    replace_generated_region,
    unified_diff,
)
from tunetable.device_tables import split_device_table
from tunetable.errors import TuneTableError
from tunetable.kernels.families.entry_fields import EntryFields, Field, check_entries  # noqa: F401
from tunetable.manifest import (  # noqa: F401
    Manifest,
    load_manifest,
    load_manifest_document,
    validate_manifest,
)
from tunetable.manifest import read_text as _read_text
from tunetable.selector_manifest import check_selector_data, load_selector_manifest


def render_table(job: TableJob) -> TableResult:
    """Read a table's manifest and snippets and render its region (no target involved)."""
    manifest = load_manifest_document(job.manifest_path)
    snippet = _read_text(job.snippet_path)
    variants = {name: _read_text(path) for name, path in job.snippet_variant_paths.items()}
    rendered = manifest.params
    if job.fields is not None:
        check_snippet(snippet, fields=job.fields, path=job.snippet_path)
        for name, path in job.snippet_variant_paths.items():
            check_snippet(variants[name], fields=job.fields, path=path)
        check_entries(manifest.params, fields=job.fields, path=job.manifest_path)
        rendered = literal_entries(manifest.params, fields=job.fields)
    region = render_region(
        rendered,
        snippet,
        source_label=job.source_label,
        snippet_variants=variants,
        provenance=manifest.provenance,
        manifest_path=job.manifest_path,
        hashed=manifest.params,
    )
    return TableResult(job=job, region=region, overlaps=find_overlaps(manifest.params))


def render_selector(job: SelectorJob) -> TableResult:
    """A shape selector's region: its data file checked against the manifest (sha256) and the typed fields,
    then recorded (path from the target's folder, sha256, candidates, provenance)."""
    manifest = load_selector_manifest(job.manifest_path)
    if manifest.data_path != job.data_label:
        raise TuneTableError(f"names the data file {manifest.data_path}, params.yaml {job.data_label}: re-run "
                             "`tunetable select --selector`", path=job.manifest_path, where="data.path")
    if not job.data_path.is_file():
        raise TuneTableError("no such file: run `tunetable select --selector` (or restore it)", path=job.data_label)
    name = split_device_table(job.name)[0]   # a device's selector: its files and region keep the base name
    data = check_selector_data(job.data_path.read_bytes(), manifest=manifest, path=job.data_label, name=name,
                               table_families=job.table_families, manifest_path=job.manifest_path)
    region = render_selector_region(name=name, path=job.record_path, sha256=manifest.sha256,
                                    candidates=len(data.candidates), provenance=data.provenance,
                                    source_label=job.source_label)
    return TableResult(job=job, region=region, overlaps=OverlapReport())


def render_job(job: TableJob | SelectorJob) -> TableResult:
    """A table's (dispatch list's) region from its manifest and snippet, or a selector's record."""
    return render_selector(job) if isinstance(job, SelectorJob) else render_table(job)


def generate_target(
    *,
    manifest_path: str | Path,
    snippet_path: str | Path,
    target_path: str | Path,
    begin_marker: str,
    end_marker: str,
    source_label: str,
    snippet_variant_paths: Mapping[str, str | Path] | None = None,
) -> str:
    """Return the target's full text with the region regenerated (Modular's ``generate_target``)."""
    job = TableJob(
        manifest_path=Path(manifest_path),
        snippet_path=Path(snippet_path),
        target_path=Path(target_path),
        begin_marker=begin_marker,
        end_marker=end_marker,
        source_label=source_label,
        snippet_variant_paths={name: Path(p) for name, p in (snippet_variant_paths or {}).items()},
    )
    return generate_targets(jobs=[job])[0].generated


def _check_distinct_markers(tables: Sequence[TableResult], *, target_path: Path) -> None:
    """Tables sharing a target must not share a marker (the second would overwrite the first)."""
    owner: dict[str, str] = {}
    for table in tables:
        for marker in (table.job.begin_marker, table.job.end_marker):
            name = str(table.job.name)
            if marker in owner and owner[marker] != name:
                raise TuneTableError(
                    f"tables {owner[marker]} and {name} both use the marker {marker}", path=target_path
                )
            owner[marker] = name


def generate_targets(*, jobs: Sequence[TableJob | SelectorJob], builds: Sequence[BuildsJob] = ()) -> list[TargetResult]:
    """Render every job; regions of jobs sharing a target apply to that target's text in job order,
    then its ``BUILDS`` region (``builds``)."""
    by_target: dict[Path, tuple[Path, list[TableResult], list[BuildsJob]]] = {}
    for job in jobs:
        by_target.setdefault(job.target_path.resolve(), (job.target_path, [], []))[1].append(render_job(job))
    for build in builds:
        by_target.setdefault(build.target_path.resolve(), (build.target_path, [], []))[2].append(build)
    results = []
    for target_path, tables, build_jobs in by_target.values():
        _check_distinct_markers(tables, target_path=target_path)
        current = _read_text(target_path, keep_newlines=True)
        text = current
        # Each recorded device's GPU, from its manifests: read once they are each checked (render_job, above).
        measured = [{device: measured_on(paths) for device, paths in build.device_manifests} for build in build_jobs]
        # First: the other devices' lists hold the regions their tables fill next.
        for build, named in zip(build_jobs, measured):
            # A target without the region (one written before devices) needs it only once another device has tables.
            if build.devices and (build.device_blocks or DEVICE_TABLES_BEGIN_MARKER in text):
                text = replace_generated_region(
                    text, begin_marker=DEVICE_TABLES_BEGIN_MARKER, end_marker=DEVICE_TABLES_END_MARKER,
                    generated=render_device_tables_region(
                        build.device_blocks, bases=[line.table for line in build.lines],
                        source_label=build.source_label, path=target_path, measured_on=named),
                    path=target_path)
        for table in tables:
            text = replace_generated_region(
                text,
                begin_marker=table.job.begin_marker,
                end_marker=table.job.end_marker,
                generated=table.region,
                path=target_path,
            )
        for build, named in zip(build_jobs, measured):
            text = replace_generated_region(text, begin_marker=build.begin_marker, end_marker=build.end_marker,
                                            generated=render_builds_region(build), path=target_path)
            if build.devices:
                text = replace_generated_region(text, begin_marker=DEVICES_BEGIN_MARKER, end_marker=DEVICES_END_MARKER,
                                                generated=render_devices_region(build, measured_on=named),
                                                path=target_path)
        results.append(
            TargetResult(
                target_path=target_path, label=str(target_path), current=current, generated=text,
                tables=tuple(tables), builds=tuple(build_jobs),
            )
        )
    return results
