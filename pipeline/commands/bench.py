"""``tunetable bench``: measure a table's shards (cuda) or serve them from a recording (replay)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from tunetable import paths
from tunetable.numbers import number_cell
from tunetable.bench.devices import visible_gpu_ids
from tunetable.bench.live import LiveRunner, estimate_seconds
from tunetable.bench.runner import Runner, run_shards
from tunetable.console_table import ConsoleTable, print_table
from tunetable.errors import TuneTableError
from tunetable.measurement_plan import parse_shapes, plan_measurement, recording_path, resolve_backend
from tunetable.params import load_params, table_spec
from tunetable.search.driver import expected_measurements


def _summary(rows_by_shard: dict[Path, list[dict[str, Any]]]) -> ConsoleTable:
    """A rich table per shard: ok/failed counts, the best configuration and its TFLOP/s against cuBLAS."""
    table = ConsoleTable(title="bench summary (median of rounds)")
    for column in ("M", "N", "K", "ok", "failed", "best config", "best TFLOP/s", "cuBLAS TFLOP/s",
                   "speedup_vs_cublas"):
        table.add_column(column, justify="right")
    shard_rows = sorted(rows_by_shard.values(), key=lambda rows: (rows[0]["N"], rows[0]["K"], rows[0]["M"]))
    for rows in shard_rows:
        kernels = [r for r in rows if r["kind"] == "kernel"]
        ok = [r for r in kernels if r["status"] == "ok"]
        best = min(ok, key=lambda r: (r["median_ms"], r["config_id"])) if ok else None
        base = next((r for r in rows if r["kind"] == "baseline" and r["status"] == "ok"), None)
        ratio = number_cell(best["tflops"] / base["tflops"]) if best and base else "-"   # tunetable.numbers
        table.add_row(str(rows[0]["M"]), str(rows[0]["N"]), str(rows[0]["K"]), str(len(ok)),
                      str(len(kernels) - len(ok)), best["config_id"] if best else "-",
                      f"{best['tflops']:.1f}" if best else "-",
                      f"{base['tflops']:.1f}" if base else "-", ratio)
    return table


class BenchProgress:
    """Rich progress fed by runner events: configurations done / failed / remaining, current best, ETA."""

    def __init__(self, console: Console, total: int):
        self.console = console
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("failed {task.fields[failed]}"), TextColumn("{task.fields[best]}"),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console,
        )
        self.task = self.progress.add_task("configs", total=total, failed=0, best="")
        self.failed = 0
        self.best: dict[tuple[int, int, int], tuple[str, float]] = {}
        self.lock = threading.Lock()

    def __call__(self, kind: str, job: Any, record: dict[str, Any]) -> None:
        with self.lock:
            if kind == "sample":
                self.progress.update(self.task, description=f"M={job.m} N={job.n} K={job.k}")
            elif kind == "final":  # a failed configuration (build, verify, launch, timeout)
                self.failed += 1
                self.progress.update(self.task, advance=1, failed=self.failed)
            elif kind == "config":  # a configuration with all its samples
                self.progress.update(self.task, advance=1)
                if record["kind"] == "kernel" and record["tflops"] > self.best.get(job.shape, ("", 0.0))[1]:
                    self.best[job.shape] = (record["config_id"], record["tflops"])
                    self.progress.update(self.task, best=f"best@{job.m}x{job.n}x{job.k}: {record['config_id']} "
                                                          f"{record['tflops']:.0f} TFLOP/s")
            elif kind == "shard" and not self.console.is_terminal:  # a log file: one line per shard
                name, tflops = self.best.get(job.shape, ("-", 0.0))
                self.console.print(f"shard M={job.m} N={job.n} K={job.k} done: {record['rows']} rows, best {name} "
                                   f"{tflops:.1f} TFLOP/s; {self.failed} failed so far")


@click.command("bench")
@click.option("--table", "table_name", required=True, help="Table declared in params.yaml.")
@click.option("--shape", "shape_texts", multiple=True, help="M,N,K (repeatable).")
@click.option("--all-shapes", is_flag=True, help="Every shape of the table.")
@click.option("--backend", type=click.Choice(["cuda", "replay", "auto"]), default=None,
              help="Default: params.yaml bench.backend.")
@click.option("--allow-missing", is_flag=True, help="Replay: unrecorded entries become `missing` rows.")
@click.option("--gpus", default=None, help="Comma-separated GPU ids (default: every visible GPU).")
@click.option("--results-root", type=click.Path(path_type=Path), default=paths.RESULTS, show_default=True)
@click.option("--params", "params_path", type=click.Path(path_type=Path), default=Path("params.yaml"),
              show_default=True)
def command(table_name: str, shape_texts: tuple[str, ...], all_shapes: bool, backend: str | None,
            allow_missing: bool, gpus: str | None, results_root: Path, params_path: Path) -> None:
    """Measure (or replay) one shard per shape; each shard's pickle is written atomically at its end.

    With the table's `search:` in params.yaml (a strategy and budget other than the default
    unbudgeted exhaustive run), each shape's search picks the configurations to measure and the
    shard holds only those (see docs/pipeline.md, Search).
    """
    console = Console(stderr=True)
    params = load_params(params_path)
    table = table_spec(params, table_name, path=params_path)
    if all_shapes == bool(shape_texts):
        raise TuneTableError("give --shape M,N,K (repeatable) or --all-shapes, not both or neither", where="bench")
    shapes = table.shapes() if all_shapes else parse_shapes(shape_texts)
    choice = resolve_backend(requested=backend or (params.get("bench") or {}).get("backend", "auto"),
                             recording=recording_path(table=table))
    console.print(f"[bold yellow]>>> {choice.reason}[/bold yellow]")
    gpu_ids = [g.strip() for g in gpus.split(",") if g.strip()] if gpus else visible_gpu_ids()
    if choice.backend == "cuda" and not gpu_ids:
        # Before anything else (reading reports, building payloads): the answer is the same, only later.
        raise TuneTableError("the cuda backend needs a GPU and none is visible here (no /dev/nvidia*, or libcuda does "
                             "not load): run on a GPU host, or --backend replay to serve the recording",
                             where="--backend")
    plan = plan_measurement(params=params, table=table, shapes=shapes, choice=choice, results_root=results_root,
                            allow_missing=allow_missing, params_path=params_path)
    if plan.search is not None:
        console.print(f"[bold]search[/bold] {plan.search.label} per shape (params.yaml tables.{table.name}.search); "
                      "each shard holds the configurations it measured")
    if choice.backend == "cuda":
        budget = None
        if plan.search is not None:
            def budget(job: Any) -> int:
                """Measurements the search budget allows in one shard (kernels within it, plus cuBLAS)."""
                return expected_measurements(settings=plan.search, tasks=job.tasks)
        estimate = estimate_seconds(jobs=plan.jobs, settings=plan.settings, gpus=len(gpu_ids), measurements=budget)
        each = (budget(plan.jobs[0]) if budget else len(plan.jobs[0].tasks)) if plan.jobs else 0
        console.print(f"{len(plan.jobs) + plan.done} shards ({plan.done} already measured: only the other "
                      f"{len(plan.jobs)} run), {each} measurements each{' (the search budget)' if budget else ''}, "
                      f"on GPUs {','.join(gpu_ids)}: estimated {estimate / 60:.1f} min ({estimate:.0f} s)")
    # The replay's runner (its recording loaded by the plan), or the live one: a worker per GPU.
    runner: Runner = (plan.replay if plan.replay is not None
                      else LiveRunner(backend=choice.backend, settings=plan.settings, gpus=gpu_ids or [None]))
    progress = BenchProgress(console, total=plan.expected)
    with progress.progress:
        rows_by_shard = run_shards(jobs=plan.jobs, runner=runner, search=plan.table_search, on_event=progress)
    verb = "replayed" if choice.backend == "replay" else "measured"
    console.print(f"{verb} {len(rows_by_shard)} shards into {paths.raw_dir(table.name, plan.key, root=results_root)}")
    print_table(console, _summary(rows_by_shard))
