"""``tunetable codegen``: render manifests into marker regions of generated source files."""

from __future__ import annotations

from pathlib import Path

import click

from tunetable import codegen
from tunetable.atomic import atomic_write_text
from tunetable.codegen_devices import DVC_FILE, dvc_device_lines, render_dvc_regions
from tunetable.device_tables import with_present_device_tables
from tunetable.errors import StaleError, TuneTableError
from tunetable.params import load_params

SINGLE_FLAGS = ("manifest", "snippet", "target", "begin_marker", "end_marker", "source_label")

EPILOG = """\b
Examples:
  tunetable codegen --all                 regenerate every table declared in params.yaml
  tunetable codegen --all --check         exit 1 with a diff if any checked-in table is stale
  tunetable codegen --manifest manifests/gemm_mma.yaml \\
      --snippet kernels/families/gemm_mma/gemm_mma.snippet --target kernels/tuning_configs.py \\
      --begin-marker BEGIN-TUNING-LIST-GEMM_MMA --end-marker END-TUNING-LIST-GEMM_MMA \\
      --source-label manifests/gemm_mma.yaml
"""


def _single_job(options: dict[str, object], variant_values: tuple[str, ...]) -> codegen.TableJob:
    """The one table named by the Modular-style flags; all six are required in this mode."""
    missing = [name for name in SINGLE_FLAGS if options[name] is None]
    if missing:
        flags = ", ".join("--" + name.replace("_", "-") for name in missing)
        raise click.UsageError(f"missing {flags} (or use --all / --table to read params.yaml)")
    variants = codegen.parse_snippet_variants(variant_values)
    return codegen.TableJob(
        manifest_path=Path(str(options["manifest"])),
        snippet_path=Path(str(options["snippet"])),
        target_path=Path(str(options["target"])),
        begin_marker=str(options["begin_marker"]),
        end_marker=str(options["end_marker"]),
        source_label=str(options["source_label"]),
        snippet_variant_paths={name: Path(path) for name, path in variants.items()},
    )


def _declared_jobs(*, params_path: str, names: tuple[str, ...]) -> tuple[list[codegen.TableJob],
                                                                           list[codegen.BuildsJob]]:
    """Jobs for the tables declared in params.yaml (all, or those named by --table); with all, the builds region."""
    params = load_params(params_path)
    # The other devices' tables the project has (docs/devices.md): a recording or a manifest of their own.
    params = with_present_device_tables(params, root=Path(params_path).parent)
    jobs = codegen.jobs_from_params(params=params, params_path=params_path, names=names or None)
    builds = None if names else codegen.builds_job_from_params(params=params, params_path=params_path)
    return jobs, [builds] if builds is not None else []


def _dvc_result(*, params_path: str) -> codegen.TargetResult | None:
    """dvc.yaml beside params.yaml with its device regions regenerated (None: no dvc.yaml, or no region in it)."""
    root = Path(params_path).parent
    path = root / DVC_FILE
    if not path.is_file():
        return None
    params = load_params(params_path)
    params = with_present_device_tables(params, root=root)
    current = path.read_text(encoding="utf-8")
    generated = render_dvc_regions(current, lines=dvc_device_lines(params, root=root), path=path)
    return codegen.TargetResult(target_path=path, label=str(path), current=current, generated=generated, tables=())


def _region_names(result: codegen.TargetResult) -> list[str]:
    """The regions of a target: its tables and dispatch lists, then ``builds`` when it holds that region."""
    return [*(str(table.job.name) for table in result.tables), *("builds" for _ in result.builds)]


def _typed_if_declared(job: codegen.TableJob, *, params_path: str) -> codegen.TableJob:
    """A flag-named job typed like the params.yaml table with its target and markers (Modular's when none).

    A params.yaml that is absent or not tunetable's leaves the job untyped: Modular's manifests and
    snippets render verbatim, as Modular's tuning_codegen renders them.
    """

    if not Path(params_path).is_file():
        return job
    try:
        params = load_params(params_path)
    except TuneTableError as exc:
        click.echo(f"note: {exc}; rendering without a declared table's field types", err=True)
        return job
    return codegen.declared_job(job, params=params, params_path=params_path)


def _report_overlaps(results: list[codegen.TargetResult], *, strict: bool) -> None:
    """Print overlap warnings and notes; with --strict the first overlap is an error."""
    for target in results:
        for table in target.tables:
            manifest = table.job.manifest_path
            for note in table.overlaps.notes:
                click.echo(f"note: {manifest}: {note}", err=True)
            for overlap in table.overlaps.overlaps:
                if strict:
                    raise TuneTableError(overlap.message(), path=manifest)
                click.echo(f"warning: {manifest}: {overlap.message()}", err=True)


@click.command(epilog=EPILOG)
@click.option("--manifest", metavar="PATH", help="YAML manifest with an ordered 'params' list of entries.")
@click.option("--snippet", metavar="PATH", help="Primary snippet; [@NAME] placeholders take entry values.")
@click.option("--target", metavar="PATH", help="File holding the marker region to regenerate.")
@click.option("--begin-marker", metavar="TEXT", help="Text found on exactly one line before the region.")
@click.option("--end-marker", metavar="TEXT", help="Text found on exactly one line after the region.")
@click.option(
    "--source-label", metavar="TEXT", help="Label written in each entry's 'Automatically generated from' comment."
)
@click.option(
    "--snippet-variant",
    "snippet_variants",
    metavar="NAME=PATH",
    multiple=True,
    help="Extra snippet selected by entries with '_template: NAME' (repeatable).",
)
@click.option("--check", is_flag=True, help="Write nothing; print a unified diff and exit 1 when a target is stale.")
@click.option(
    "--strict", is_flag=True, help="Overlapping [M, M_END) ranges for one (N, K) are an error, not a warning."
)
@click.option("--all", "all_tables", is_flag=True, help="Every table declared under 'tables:' in --params.")
@click.option(
    "--table", "tables", metavar="NAME", multiple=True, help="A table declared in --params (repeatable)."
)
@click.option(
    "--params",
    "params_path",
    default="params.yaml",
    show_default=True,
    metavar="PATH",
    help="params.yaml read by --all and --table; relative paths in it resolve from its folder.",
)
def command(
    manifest: str | None,
    snippet: str | None,
    target: str | None,
    begin_marker: str | None,
    end_marker: str | None,
    source_label: str | None,
    snippet_variants: tuple[str, ...],
    check: bool,
    strict: bool,
    all_tables: bool,
    tables: tuple[str, ...],
    params_path: str,
) -> None:
    """Render manifests into the marker regions of generated files (Modular tuning_codegen compatible).

    Give either the six single-table flags (as for Modular's tuning_codegen), or --all / --table
    to use the codegen settings of tables declared in params.yaml. Without --check the targets are
    always rewritten (atomically); with --check nothing is written.
    """
    options = {
        "manifest": manifest, "snippet": snippet, "target": target,
        "begin_marker": begin_marker, "end_marker": end_marker, "source_label": source_label,
    }
    declared = all_tables or bool(tables)
    if declared and (any(value is not None for value in options.values()) or snippet_variants):
        raise click.UsageError("--all/--table read params.yaml; do not combine them with single-table flags")
    if all_tables and tables:
        raise click.UsageError("give --all or --table, not both")
    builds: list[codegen.BuildsJob] = []
    if declared:
        jobs, builds = _declared_jobs(params_path=params_path, names=tables)
    else:
        jobs = [_typed_if_declared(_single_job(options, snippet_variants), params_path=params_path)]
    results = codegen.generate_targets(jobs=jobs, builds=builds)
    if all_tables:   # dvc.yaml's list of the other devices' files (it cannot glob: docs/devices.md)
        results += [found for found in (_dvc_result(params_path=params_path),) if found is not None]
    _report_overlaps(results, strict=strict)
    if check:
        stale = [result for result in results if result.stale]
        for result in stale:
            diff = codegen.unified_diff(current=result.current, generated=result.generated, label=result.label)
            click.echo(diff, err=True)
        if stale:
            # StaleError (exit 1): click's Exit would be swallowed by standalone_mode=False in cli.main.
            if declared:
                listing = "; ".join(f"{result.label} (tables: {', '.join(_region_names(result))})" for result in stale)
                raise StaleError(f"out of date: {listing}; run `tunetable codegen --all`")
            raise StaleError("out of date; run the same command without --check", path=stale[0].label)
        return
    for result in results:
        atomic_write_text(result.target_path, result.generated)
