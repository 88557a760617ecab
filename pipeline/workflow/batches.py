"""The measuring rules of a run: each table's missing shards cut into batches (ShardBatch), one job each.

Scale (tens of thousands of shards): Snakemake checks a requested file against every output of a
candidate rule, formats every wildcard constraint into the output pattern, and costs ~0.4 ms per job
and per input it checks. So no rule lists an unbounded number of outputs (replay serves at most
REPLAY_CHUNK shards per job, a live bench job measures at most LIVE_CHUNK), no constraint lists shard
names, existing shards are ``before_update`` inputs (never looked up), and only rank takes every
shard as an input (metrics take one per table, for the content key). Both DAGs grow linearly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tunetable.workflow.run_plan import Plan, Shard, is_missing, parked_shards
from tunetable.workflow.stamps import STAMPS

# Missing shards one replay job serves at most: Snakemake matches a requested shard against at most
# this many outputs of its rule (so the DAG grows linearly), and one process start (~0.8 s) serves
# this many shards (~3 ms each). docs/workflow.md, "How it is wired", names this number.
REPLAY_CHUNK = 100
# A live bench job measures up to LIVE_CHUNK missing shards of one table in one process (one CUDA context,
# one compile report read; Snakemake itself costs ~0.4 ms per job, so one job per shard made the DAG of
# 20 k missing shards 15 s), and a table's shards are cut into at least LIVE_SPREAD windows (a job each)
# while it has that many, so that a host with several GPUs (--resources gpu=N) keeps each busy.
LIVE_CHUNK = 20
LIVE_SPREAD = 8
# Minutes one live shard may take (SLURM's `runtime` of a bench job is this times its shards, unless a
# profile's set-resources gives `bench: runtime:` per shard).
LIVE_SHARD_MINUTES = 20


@dataclass(frozen=True)
class ShardBatch:
    """One measuring rule: missing shards of one table, served (replay) or measured (bench) by one process."""

    name: str                  # <verb>_<table>, or <verb>_<table>_part<i> when a table needs several
    table: str
    shards: tuple[Shard, ...]
    log: str


def shard_batches(plan: Plan, *, verb: str, size: Callable[[int], int]) -> list[ShardBatch]:
    """Each table's shards in shape order, cut into windows of ``size(table's shard count)``; a rule per window
    holding missing shards (those only), named ``<verb>_<table>`` or ``<verb>_<table>_part<i>`` (i: the window).

    Windows over every shard of the table, not over the missing ones: a cluster job re-parses the
    Snakefile when it starts, after other jobs may have finished, and must find its rule with the same
    name and outputs (a window's missing shards are made by its own job only).
    """
    jobs = []
    for spec in plan.tables:
        shards = plan.shards[spec.name]
        windows = chunks(shards, size=size(len(shards)))
        folder = STAMPS.parent / "logs" / "bench" / spec.name / plan.keys[spec.name]
        for index, window in enumerate(windows, start=1):
            missing = tuple(shard for shard in window if is_missing(plan, shard))
            suffix = f"_part{index}" if len(windows) > 1 else ""
            if missing:
                jobs.append(ShardBatch(name=f"{verb}_{spec.name}{suffix}", table=spec.name, shards=missing,
                                       log=str(folder / f"{verb}{suffix}.log")))
    return jobs


def replay_batches(plan: Plan, *, chunk: int = REPLAY_CHUNK) -> list[ShardBatch]:
    """The replay rules of a run: each table's shards in windows of REPLAY_CHUNK, a rule per window missing any."""
    return shard_batches(plan, verb="replay", size=lambda _count: chunk) if plan.backend == "replay" else []


def live_chunk_size(count: int, *, chunk: int = LIVE_CHUNK, spread: int = LIVE_SPREAD) -> int:
    """Shards per live bench window of a table of ``count`` shards: at most ``chunk``, at least ``spread`` windows."""
    return max(1, min(chunk, count // spread))  # floor: count // size >= spread windows


def live_batches(plan: Plan, *, chunk: int = LIVE_CHUNK, spread: int = LIVE_SPREAD) -> list[ShardBatch]:
    """The live bench rules of a run: each table's shards in windows of live_chunk_size, a rule per window to make."""
    if plan.backend != "cuda":
        return []
    return shard_batches(plan, verb="bench", size=lambda count: live_chunk_size(count, chunk=chunk, spread=spread))


def bench_resources(*, shards: int) -> dict[str, int]:
    """A live bench rule's own resources: one GPU, LIVE_SHARD_MINUTES per shard."""
    return {"gpu": 1, "runtime": LIVE_SHARD_MINUTES * shards}


def apply_bench_profile(resources: Any, overrides: Mapping[str, Any], *, shards: int) -> None:
    """Give a bench rule a profile's ``set-resources: bench:``, as Snakemake does for a rule named bench (the
    bench rules are named per chunk); ``runtime`` there is minutes per shard, times the rule's ``shards``."""
    given = overrides.get("bench")
    if not given:
        return
    resources.update(given)
    runtime = given.get("runtime")
    if runtime is not None and not runtime.is_evaluable() and isinstance(runtime.value, int):
        resources["runtime"] = runtime.value * shards


def restore_jobs(plan: Plan, *, chunk: int = REPLAY_CHUNK) -> list[tuple[str, tuple[Shard, ...]]]:
    """(rule name, shards) of the rules that rename parked shards back, REPLAY_CHUNK per rule."""
    parts = chunks(parked_shards(plan), size=chunk)
    return [(f"restore_parked{f'_part{index}' if len(parts) > 1 else ''}", part)
            for index, part in enumerate(parts, start=1)]


def chunks(shards: Sequence[Shard], *, size: int) -> list[tuple[Shard, ...]]:
    """``shards`` in order, cut into tuples of at most ``size``."""
    return [tuple(shards[start:start + size]) for start in range(0, len(shards), size)]
