"""What a run says: the banner (replayed or live, what it leaves out), the line before work that needs a GPU,
the closing summary and the DVC cache line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tunetable import paths
from tunetable.dvc_cache import CacheReport
from tunetable.params import dispatch_specs, table_specs
from tunetable.run_summary import summary
from tunetable.workflow.run_plan import ALLOW_MISSING_ENV, Plan, Shard, missing_by_table, parked_shards

SHOWN_SHARDS = 3


def banner(plan: Plan) -> str:
    """The loud line printed at the start and end of a run: replayed or measured live."""
    if plan.backend == "replay":
        what = "REPLAYING the committed recording (no GPU timing happens in this run)"
    else:
        what = "MEASURING LIVE on the GPU"
    lines = [what, *plan.backend_line.splitlines()]
    lines += [f"SKIPPING table {name}: {why}; manifests/{name}.yaml and its generated list stay as committed"
              for name, why in plan.skipped.items()]
    lines += [f"SKIPPING dispatch list {name}: {why}; manifests/{name}.yaml and its generated list stay as committed"
              for name, why in plan.skipped_dispatches.items()]
    lines += [f"SKIPPING selector {name}: {why}; manifests/{name}.yaml and its generated list stay as committed"
              for name, why in plan.skipped_selectors.items()]
    if plan.left_out:
        lines.append(left_out_line(plan).removeprefix("tunetable: "))
    lines += plan.device_lines
    return "\n".join(f"tunetable: {line}" for line in lines)


def left_out_line(plan: Plan) -> str:
    """The line naming the shards a run goes without (TUNETABLE_ALLOW_MISSING=1)."""
    return (f"tunetable: LEAVING OUT {shard_list(plan.left_out)} ({ALLOW_MISSING_ENV}=1: they need a GPU); "
            "their shapes have no measurement in this run")


def shard_list(shards: Sequence[Shard | str], *, bare: bool = False) -> str:
    """``5 shards (gemm_mma M77_N4096_K4096, M77_N14336_K4096, ... and 2 more)``, per table (bare: no count)."""
    by_table: dict[str, list[str]] = {}
    for shard in shards:
        table, stem = ((shard.table, shard.stem) if isinstance(shard, Shard)
                       else (Path(shard).parent.parent.name, Path(shard).stem))
        by_table.setdefault(table, []).append(stem)
    parts = []
    for table, stems in by_table.items():
        more = f" and {len(stems) - SHOWN_SHARDS} more" if len(stems) > SHOWN_SHARDS else ""
        parts.append(f"{table} {', '.join(stems[:SHOWN_SHARDS])}{more}")
    count = sum(len(stems) for stems in by_table.values())
    return "; ".join(parts) if bare else f"{count} shard{'s' if count != 1 else ''} ({'; '.join(parts)})"


def needs_gpu_line(shards: Sequence[Shard], plan: Plan) -> str:
    """The one line said before any work when shards need a GPU and none is visible: which, and what to do."""
    if plan.backend == "replay":
        where = ", ".join(sorted({str(plan.recordings[s.table]) for s in shards}))
        why = f"{shard_list(shards, bare=True)} are not in {where}"
        keep = f"or keep the rest: {ALLOW_MISSING_ENV}=1 snakemake --cores 2 (or dvc repro)"
    else:
        why = f"{shard_list(shards, bare=True)} are to be measured live (backend cuda)"
        keep = "or submit them with `--workflow-profile profiles/slurm`, or replay: --config 'bench={backend: replay}'"
    return (f"tunetable: {len(shards)} shard{'s' if len(shards) != 1 else ''} need a GPU and none is visible here: "
            f"{why}. Measure them on a GPU host (`snakemake --cores N` there, or `bash scripts/device_session.sh "
            f"bench` to record them for replay), {keep}.")


def dvc_cache_line(report: CacheReport) -> str:
    """What the main job did for `dvc status` (empty when there is nothing to say)."""
    lines = []
    if report.cached:
        lines.append(f"stored the outs of DVC stage(s) {', '.join(report.cached)} in the DVC cache: they match "
                     "dvc.lock, so `dvc status` and `dvc repro` have nothing to do")
    if report.changed:
        lines.append(f"DVC stage(s) {', '.join(report.changed)} differ from dvc.lock: `dvc repro` records them")
    return "\n".join(f"tunetable: {line}" for line in lines)


def closing_summary(plan: Plan, config: Mapping[str, Any]) -> str:
    """The lines a successful run ends with: shards served, each table's figures, what changed (run_summary)."""

    served = {table: len(shards) for table, shards in missing_by_table(plan).items()}
    targets = {spec.codegen.target for spec in (*table_specs(dict(config)), *dispatch_specs(dict(config)))}
    names = [spec.name for spec in (*plan.tables, *plan.dispatches)]
    return summary(served=served, restored=len(parked_shards(plan)), backend=plan.backend, names=names,
                   pathspecs=["manifests", *sorted(targets), str(paths.RESULTS / "metrics"),
                              str(paths.RESULTS / "plots")])
