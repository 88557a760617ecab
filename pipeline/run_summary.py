"""The main job's closing summary: shards served, each table's figures, what changed against git.

Snakemake's own per-job blocks are hidden by the default profile (``quiet: [rules, host, reason]``),
so this is what a run ends with (besides the backend banner):

    tunetable: shards: 110 replayed from the recordings (gemm_mma 55, gemm_wgmma 55)
    tunetable: gemm_mma: 33 entries, 55/55 shapes, 164.2 TFLOP/s geomean, speedup_vs_cublas 0.702x, ...
    tunetable: changed against git: nothing (manifests, generated tables, metrics and plots as committed)
    tunetable: logs in results/logs/; every job in full: snakemake --cores 2 --quiet host

Everything is read from files (metrics JSON, ``git status``); nothing here runs a stage.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from tunetable import paths

VERBOSE_HINT = "logs in results/logs/; every job in full: snakemake --cores 2 --quiet host"


def shards_line(*, served: Mapping[str, int], restored: int, backend: str) -> str:
    """What the run did for the raw shards: replayed or measured per table, restored from results/parked."""
    total = sum(served.values())
    per_table = ", ".join(f"{table} {count}" for table, count in served.items() if count)
    how = "replayed from the recordings" if backend == "replay" else "measured on the GPU"
    parts = [f"{total} {how}" + (f" ({per_table})" if per_table else "")]
    if restored:
        parts.append(f"{restored} restored from results/parked")
    if not total and not restored:
        parts = ["all on disk already (none replayed or measured)"]
    return "shards: " + ", ".join(parts)


def table_line(metrics: Mapping[str, object]) -> str:
    """One table's (or dispatch list's) figures from its metrics JSON."""
    name = metrics.get("table", "?")
    speedup = metrics.get("geomean_speedup_vs_cublas")
    tflops = metrics.get("geomean_tflops")
    faster = metrics.get("shapes_faster_than_cublas")
    failures = metrics.get("failures")
    line = (f"{name}: {metrics.get('entries')} entries, {metrics.get('shapes_covered')}/{metrics.get('shapes')} "
            f"shapes, {'-' if tflops is None else f'{tflops:.1f}'} TFLOP/s geomean, speedup_vs_cublas "
            f"{'-' if speedup is None else f'{speedup:.3f}x'}, {faster} shapes faster than cuBLAS")
    return line + (f", {failures} failed configurations" if failures else "")


def metrics_lines(names: Sequence[str], *, root: Path = Path(".")) -> list[str]:
    """A line per table or dispatch list whose metrics JSON is there."""
    lines = []
    for name in names:
        path = root / paths.metrics(name)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict):
            lines.append(table_line(data))
    return lines


def changed_files(*, pathspecs: Sequence[str], root: Path = Path(".")) -> list[str] | None:
    """Tracked files under ``pathspecs`` that differ from git's HEAD (None outside a git work tree)."""
    done = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", *pathspecs], cwd=root,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return None
    return [line[3:] for line in done.stdout.splitlines() if len(line) > 3]


def changed_line(files: Sequence[str] | None) -> str | None:
    """What the run changed against git (None outside git)."""
    if files is None:
        return None
    if not files:
        return "changed against git: nothing (manifests, generated tables, metrics and plots as committed)"
    shown = ", ".join(files[:6]) + (f" and {len(files) - 6} more" if len(files) > 6 else "")
    return f"changed against git: {shown} (review: git diff, tunetable audit)"


def summary(*, served: Mapping[str, int], restored: int, backend: str, names: Sequence[str],
            pathspecs: Sequence[str], root: Path = Path(".")) -> str:
    """The closing lines of a main-job run, each prefixed ``tunetable: ``."""
    lines = [shards_line(served=served, restored=restored, backend=backend), *metrics_lines(names, root=root)]
    changed = changed_line(changed_files(pathspecs=pathspecs, root=root))
    lines += [changed] if changed else []
    lines.append(VERBOSE_HINT)
    return "\n".join(f"tunetable: {line}" for line in lines)
