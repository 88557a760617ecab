"""The TMA + wgmma families on the H200 (`pytest -m gpu`): every default-grid configuration of gemm_wgmma
and of gemm_wgmma_swap (swap-AB) verified through the bench harness on odd shapes, and
tunetable.kernels.gemm / gemm_with / autotune running their entries.

Self-contained: it compiles the default grid with the machine's nvcc into a temporary cache (all
cores, a few seconds) and measures with a one-round harness setting, so it adds well under a
minute to the GPU suite.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path

import pytest

from tunetable.bench.tasks import BenchSettings, ConfigTask, baseline_task
from tunetable.bench.live import LiveRunner
from tunetable.bench.runner import ShardJob, run_shards
from tunetable.measurement_plan import shard_payloads
from tunetable.compile import compile_configs
from tunetable.grid import DeviceLimits, expand
from tunetable.kernels.families import FAMILIES
from tunetable.keys import kernel_source_hash
from tunetable.params import table_spec
from tunetable.yamlio import load_yaml_file

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

REPO = Path(__file__).resolve().parents[2]
TABLE = "gemm_wgmma"
TMA_TABLES = ("gemm_wgmma", "gemm_wgmma_swap")  # tables whose whole grid is verified below
REL_TOL = 1e-2  # bf16 output, fp32 accumulation
# M in {1, 7, 77, 333, 4096}, non-square N and K (LLM projections), and two small shapes whose N and K
# are multiples of no tile (TMA fills the edges with zeros; empty K splits must still add up).
SHAPES = [(1, 4096, 4096), (7, 14336, 4096), (77, 4096, 14336), (333, 6144, 4096), (4096, 4096, 4096),
          (7, 136, 200), (333, 264, 328)]
# One verified launch and one timed round per configuration: correctness, not timing.
SETTINGS = BenchSettings(warmup_ms=0.0, rounds=1, min_batch_ms=0.05, l2_factor=1.0, timeout_s=30.0,
                         verify_rtol=REL_TOL)


def params() -> dict:
    # The YAML loader without the schema check: the GPU image may lack jsonschema (CI validates params.yaml).
    return load_yaml_file(REPO / "params.yaml")


@pytest.fixture(scope="module", params=TMA_TABLES)
def table_tasks(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[ConfigTask]]:
    """A table and every kept configuration of its default grid, compiled (fresh cache) into harness tasks."""
    settings = params()
    spec = table_spec(settings, request.param)
    kept = expand(spec, limits=DeviceLimits.from_params(settings)).kept
    results = compile_configs(kept, kernel_path=REPO / spec.kernel, flags=settings["compile"]["nvcc_flags"],
                              arch=spec.arch, cache_dir=tmp_path_factory.mktemp("cubins"), workers=os.cpu_count() or 4)
    failed = {cid: r.error for cid, r in results.items() if r.status != "ok"}
    assert not failed, failed
    return request.param, [ConfigTask(config_id=config.id, kind="kernel", mesh_idx=index, family=spec.family,
                                      params=tuple(config.params), defines=tuple(config.defines().items()),
                                      cubin=results[config.id].cubin)
                           for index, config in enumerate(kept)]


def test_every_default_config_is_verified_by_the_harness_on_odd_shapes(table_tasks, tmp_path: Path) -> None:
    table, tasks = table_tasks
    spec = table_spec(params(), table)
    all_tasks = (*tasks, baseline_task())
    kernel_hash = kernel_source_hash(FAMILIES[spec.family].source)
    jobs = [ShardJob(table=spec.name, m=m, n=n, k=k, tasks=all_tasks,
                     payloads=shard_payloads(tasks=all_tasks, m=m, n=n, k=k, families=FAMILIES),
                     journal_path=tmp_path / f"M{m}_N{n}_K{k}.journal.jsonl",
                     shard_path=tmp_path / f"M{m}_N{n}_K{k}.pkl",
                     content_key="gputest", kernel_hash=kernel_hash)
            for m, n, k in SHAPES]
    rows_by_shard = run_shards(jobs=jobs, runner=LiveRunner(backend="cuda", settings=SETTINGS, gpus=[None]))
    assert len(rows_by_shard) == len(SHAPES)
    failures = []
    for rows in rows_by_shard.values():
        assert len(rows) == len(all_tasks)
        for row in rows:
            if row["status"] != "ok" or not (row["rel_err"] is not None and row["rel_err"] <= REL_TOL):
                failures.append(f"M={row['M']} N={row['N']} K={row['K']} {row['config_id']}: {row['status']} "
                                f"rel_err={row['rel_err']} {row.get('error') or ''}")
    assert not failures, f"{len(failures)} of {len(SHAPES) * len(all_tasks)} wrong:\n" + "\n".join(failures)


# --- the runtime: tunetable.kernels.gemm through the dispatch list, gemm_with, autotune ---------------------

@pytest.fixture(scope="module")
def torch():
    """torch for the runtime tests (the harness test above needs none)."""
    return pytest.importorskip("torch")


def operands(torch, m: int, n: int, k: int, seed: int = 0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.float32).to(torch.bfloat16)
    b = torch.randn((n, k), generator=gen, device="cuda", dtype=torch.float32).to(torch.bfloat16)
    return a, b


def rel_err(c, a, b) -> float:
    ref = a.float() @ b.float().T
    return float((c.float() - ref).norm() / ref.norm())


def assert_right_and_the_same_on_every_repeat(torch, *, tunables: dict, family: str,
                                              shape: tuple[int, int, int]) -> None:
    """Three launches into a NaN-filled C: each right, and bit-equal to the first (split order is fixed)."""
    import tunetable.kernels

    m, n, k = shape
    a, b = operands(torch, m, n, k)
    out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    first = None
    for _ in range(3):
        out.fill_(float("nan"))
        tunetable.kernels.gemm_with(tunables, a, b, out=out, family=family)
        torch.cuda.synchronize()
        assert rel_err(out, a, b) < REL_TOL
        first = out.clone() if first is None else first
        assert torch.equal(out, first)


def test_kernels_gemm_runs_the_family_the_dispatch_list_names(torch) -> None:
    from tunetable.kernels.families.common import INT32_MAX
    from tunetable.kernels.runtime import decide, launch
    from tunetable.kernels.tuning_configs import TABLES, FamilyChoice

    entry = decide.make_entry(tunables=dataclasses.asdict(FAMILIES[TABLE].default_tunables), n=6144, k=4096,
                              kernel=TABLE)
    choice = FamilyChoice(m=1, m_end=INT32_MAX, n=6144, k=4096, kernel=TABLE, table=TABLE,
                          config_id=entry.config_id, speedup_vs_cublas=1.0)
    serving = launch.runtime().table.device   # the recorded device whose tables gemm() serves this GPU
    decide.set_dispatcher(decide.FamilyDispatcher(choices=[choice],
                                                      tables={"gemm_mma": TABLES["gemm_mma"], TABLE: [entry]}),
                          device=serving)
    try:
        a, b = operands(torch, 333, 6144, 4096)
        c = launch.gemm(a, b)
        torch.cuda.synchronize()
        assert rel_err(c, a, b) < REL_TOL
        decision = decide.dispatcher(device=serving).decide(m=333, n=6144, k=4096)
        assert decision.entry == entry and decision.choice == choice and not decision.fallback
        plan = launch.runtime().plan(entry, m=333, n=6144, k=4096)
        assert plan.plan.kernel is not None and plan.encodes == 1   # a driver kernel (by-value tensor maps)
        out = torch.full((333, 6144), float("nan"), device="cuda", dtype=torch.bfloat16)
        for _ in range(2):  # the prepared launch encodes (A, B) once, then rewrites C's slot per call
            launch.gemm(a, b, out=out)
        torch.cuda.synchronize()
        assert rel_err(out, a, b) < REL_TOL and plan.encodes == 2
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", decide.FallbackWarning)
            assert decide.dispatcher(device=serving).decide(m=77, n=4096, k=4096).entry.kernel == "gemm_mma"
    finally:
        decide.set_dispatcher(None, device=serving)


@pytest.mark.parametrize("family", TMA_TABLES)
@pytest.mark.parametrize("split_k", [1, 4, 8])
def test_gemm_with_wgmma_is_right_on_every_repeat(torch, split_k: int, family: str) -> None:
    """Split-K counters start zeroed and each launch's last split resets them: repeats stay right, bit-equal."""
    tunables = {**dataclasses.asdict(FAMILIES[family].skinny_tunables), "split_k": split_k}
    assert_right_and_the_same_on_every_repeat(torch, tunables=tunables, family=family, shape=(7, 4096, 14336))


@pytest.mark.parametrize("cluster_m", [1, 2])
@pytest.mark.parametrize("shape", [(1100, 4096, 4096), (1000, 4096, 4096), (8, 4096, 14336), (333, 264, 328)])
def test_tail_split_is_right_on_every_repeat(torch, shape: tuple[int, int, int], cluster_m: int) -> None:
    """TAIL_SPLIT: a full wave whole and the last wave split (1100 x 4096²: 132 tiles whole, 12 split 8 ways;
    in 2 x 1 clusters 66 whole, 14 split 4 ways), a last wave with no idle SM (1000 x 4096², 128 tiles: all
    whole), less than a wave (8 x 4096 x 14336: 16 tiles split 8 or 4 ways; 333 x 264 x 328: 6 k-tiles split
    6 ways). The last split of a tile sums the splits in order, whichever finishes last: right, and the same
    bits every launch."""
    tunables = {**dataclasses.asdict(FAMILIES[TABLE].default_tunables), "tail_split": 1, "cluster_m": cluster_m}
    assert_right_and_the_same_on_every_repeat(torch, tunables=tunables, family=TABLE, shape=shape)


@pytest.mark.parametrize("table", TMA_TABLES)
def test_generated_wgmma_choices_run_through_kernels_gemm(torch, table: str) -> None:
    """Whatever the checked-in dispatch list sends to a TMA table is right."""
    import tunetable.kernels
    from tunetable.kernels.runtime import launch
    from tunetable.kernels.tuning_configs import DEVICE_TABLES

    serving = launch.runtime().table.device   # this GPU's device's dispatch list (an H100 its own)
    choices = [c for c in DEVICE_TABLES[serving].dispatch["gemm_dispatch"] if c.table == table]
    for choice in choices:
        m = min(max(choice.m, 1), 4096)
        a, b = operands(torch, m, choice.n, choice.k)
        c = tunetable.kernels.gemm(a, b)
        torch.cuda.synchronize()
        assert rel_err(c, a, b) < REL_TOL, choice


def test_autotune_over_wgmma_configurations(torch, tmp_path: Path) -> None:
    import tunetable.kernels
    from tunetable.kernels.autotune import autotune, close_to

    default, skinny = (dataclasses.asdict(FAMILIES[TABLE].default_tunables),
                       dataclasses.asdict(FAMILIES[TABLE].skinny_tunables))
    configs = [default, skinny, {**skinny, "split_k": 4}]
    correct = close_to(lambda args: {"out": args["a"].float() @ args["b"].float().T}, rtol=REL_TOL)

    @autotune(configs=configs, key=["m", "n", "k"], restore_value=["out"], verify=correct, cache_dir=tmp_path,
              rounds=5, warmup_ms=2.0)
    def matmul(a, b, out, m, n, k, *, config):
        return tunetable.kernels.gemm_with(config, a, b, out=out, family=TABLE)

    a, b = operands(torch, 333, 4096, 4096)
    out = torch.full((333, 4096), 7.0, device="cuda", dtype=torch.bfloat16)
    matmul(a, b, out, 333, 4096, 4096)
    torch.cuda.synchronize()
    assert rel_err(out, a, b) < REL_TOL
    trials = next(iter(matmul.trials.values()))
    assert [t.status for t in trials] == ["ok"] * len(configs)
