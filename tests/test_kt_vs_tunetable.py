"""CPU side of benchmarks/kt_vs_tunetable.py: what Kernel Tuner is given matches tunetable's grid and launch."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
from bench_support import load_benchmark_script

from tunetable.kernels.families import FAMILIES
from tunetable import paths
from tunetable.kernels.jit import render_define
from tunetable.errors import TuneTableError
from tunetable.grid import load_table_grid
from tunetable.params import load_params

REPO = Path(__file__).resolve().parents[1]


ktv = load_benchmark_script("kt_vs_tunetable")


def _configs(filters: tuple[str, ...]):
    return load_table_grid(params_path=REPO / "params.yaml", table="gemm_mma", filter_options=filters).result.kept


@pytest.fixture(scope="module")
def kept():
    """Every configuration of the default grid, split-K ones included (what both tools tune)."""
    return _configs(ktv.make_plan(quick=False, subset=False, filters=[], shapes=[], kt_iterations=7,
                                  params_path=REPO / "params.yaml").filters)


def _declared_split_ks() -> set:
    """Every SPLIT_K value params.yaml's gemm_mma groups declare."""
    groups = load_params(REPO / "params.yaml")["tables"]["gemm_mma"]["grid"]["groups"]
    return {value for group in groups for value in group["SPLIT_K"]}


def _kt_key(config) -> tuple:
    defines = config.defines()
    return (*(value for _, value in config.params), defines["THREADS"])


def test_kt_searchspace_is_exactly_the_grid(kept):
    util = pytest.importorskip("kernel_tuner.searchspace", reason="kernel_tuner (dev extra) is not installed")
    space = ktv.kt_space(configs=kept)
    searchspace = util.Searchspace(ktv.kt_tune_params(space=space), ktv.kt_restriction(space=space), 1024)
    assert searchspace.size == len(kept)
    assert set(searchspace.list) == {_kt_key(config) for config in kept}
    # Split-K is one launch now: KT tunes every SPLIT_K the grid declares, not only SPLIT_K=1.
    assert {config.defines()["SPLIT_K"] for config in kept} == _declared_split_ks()


def test_kt_launch_matches_the_family_geometry(kept):
    util = pytest.importorskip("kernel_tuner.util", reason="kernel_tuner (dev extra) is not installed")
    space = ktv.kt_space(configs=kept)
    family = FAMILIES["gemm_mma"]
    for shape in ktv.SHAPES:
        inputs = ktv.KtInputs(arguments=[], answer=[])
        options = ktv.kt_options(space=space, shape=shape, kernel_path=FAMILIES["gemm_mma"].source, flags=[],
                                 iterations=7, inputs=inputs, rtol=0.02)
        for config in kept:
            params = dict(zip(space.names, _kt_key(config)))
            threads, grid = util.setup_block_and_grid(
                options["problem_size"], (options["grid_div_x"], options["grid_div_y"], options["grid_div_z"]),
                params, [*options["block_size_names"], "block_size_y", "block_size_z"])
            launch = family.launch(config.defines(), *shape)
            assert (threads, grid) == (launch.block, launch.grid), (config.label(), shape)
            smem = util.get_smem_args(options["smem_args"], params)["size"]
            assert smem == launch.smem_bytes == dict(config.derived)["SMEM_BYTES"]


def _kt_kernel_string(space, config, shape=(512, 4096, 4096)) -> str:
    core = pytest.importorskip("kernel_tuner.core", reason="kernel_tuner (dev extra) is not installed")
    options = ktv.kt_options(space=space, shape=shape, kernel_path=FAMILIES["gemm_mma"].source, flags=[],
                             iterations=7, inputs=ktv.KtInputs(arguments=[], answer=[]), rtol=0.02)
    source = core.KernelSource(options["kernel_name"], options["kernel_source"], "pycuda", options["defines"])
    params = dict(zip(space.names, _kt_key(config)))
    launch = FAMILIES["gemm_mma"].launch(config.defines(), *shape)
    _, text, _ = source.prepare_list_of_files("gemm_mma", params, launch.grid, launch.block,
                                              [*options["block_size_names"], "block_size_y", "block_size_z"])
    return text


def test_kt_kernel_string_carries_exactly_the_grid_defines(kept):
    space = ktv.kt_space(configs=kept)
    for config in kept:
        prefix = _kt_kernel_string(space, config).split("#line 1\n")[0]
        expected = [f"#define {name} {render_define(value)}" for name, value in config.defines().items()]
        assert prefix.splitlines() == expected


def test_kt_compiler_options_find_the_kernels_local_headers(kept):
    """KT compiles a copy of the source elsewhere: its options name the kernel's folder, where every include is."""
    flags = [str(flag) for flag in load_params(REPO / "params.yaml")["compile"]["nvcc_flags"]]
    source = FAMILIES["gemm_mma"].source
    options = ktv.kt_options(space=ktv.kt_space(configs=kept), shape=ktv.SHAPES[0],
                             kernel_path=source, flags=flags, iterations=7,
                             inputs=ktv.KtInputs(arguments=[], answer=[]), rtol=0.02)
    assert options["compiler_options"] == [*flags, f"-I{source.parent}", f"-I{REPO / 'kernels'}"]
    local = re.findall(r'^#include "([^"]+)"', source.read_text(), flags=re.MULTILINE)
    assert local and all((REPO / "kernels" / name).is_file() for name in local)


@pytest.mark.nvcc
def test_kt_compile_of_the_prepared_kernel_passes_the_kernel_checks(kept, tmp_path):
    """The nvcc line pycuda builds for KT, in a folder of its own, compiles the prepended defines and the includes."""
    space = ktv.kt_space(configs=kept)
    small = next(c for c in kept if dict(c.derived)["SMEM_BYTES"] <= 48 * 1024)
    large = next(c for c in kept if dict(c.derived)["SMEM_BYTES"] > 48 * 1024)
    split = next(c for c in kept if c.defines()["SPLIT_K"] > 1)
    flags = [str(flag) for flag in load_params(REPO / "params.yaml")["compile"]["nvcc_flags"]]
    options = ktv.kt_options(space=space, shape=ktv.SHAPES[0], kernel_path=FAMILIES["gemm_mma"].source,
                             flags=flags, iterations=7, inputs=ktv.KtInputs(arguments=[], answer=[]), rtol=0.02)
    for config in (small, large, split):
        source = tmp_path / f"{config.id}.cu"
        source.write_text(_kt_kernel_string(space, config))
        ptx = tmp_path / f"{config.id}.ptx"
        done = subprocess.run(
            ["nvcc", "--ptx", "-Xcompiler=-Wall", *options["compiler_options"], "-e", "gemm_mma", "-rdc=true",
             "-arch", "compute_90", "-code", "sm_90", "-o", str(ptx), str(source)],
            capture_output=True, text=True, check=False, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        entries = re.findall(r"\.entry\s+(\w+)", ptx.read_text())
        assert "gemm_mma" in entries


def test_bf16_bits_round_to_nearest_even():
    values = np.array([1.0, -2.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 0.5], dtype=np.float32)
    assert ktv.to_bf16_bits(values).tolist() == [0x3F80, 0xC000, 0x3F80, 0x3F82, 0x3F00]
    assert ktv.from_bf16_bits(np.array([0x3F80, 0xC000], dtype=np.uint16)).tolist() == [1.0, -2.0]
    assert np.isnan(ktv.from_bf16_bits(np.array([ktv.BF16_NAN], dtype=np.uint16))[0])


def test_kt_inputs_are_random_poisoned_and_verified(kept):
    pytest.importorskip("kernel_tuner", reason="kernel_tuner (dev extra) is not installed")
    m, n, k = 3, 16, 32
    inputs = ktv.kt_inputs(space=ktv.kt_space(configs=kept), shape=(m, n, k), seed=7)
    a, b, c, _workspace, *sizes = inputs.arguments
    assert (a.size, b.size, c.size) == (m * k, n * k, m * n)
    assert a.dtype == b.dtype == c.dtype == np.uint16
    assert np.count_nonzero(ktv.from_bf16_bits(a)) == m * k and np.count_nonzero(ktv.from_bf16_bits(b)) == n * k
    assert np.all(c == ktv.BF16_NAN)
    assert [int(s) for s in sizes] == [m, n, k]
    # An independent float64 product, rounded to bf16, is a right answer; the untouched C and zeros are not.
    exact = ktv.from_bf16_bits(a).reshape(m, k).astype(np.float64) @ ktv.from_bf16_bits(b).reshape(n, k).T
    right = ktv.to_bf16_bits(exact.astype(np.float32)).ravel()
    verify = ktv.Bf16Verify(rtol=0.02)
    assert verify(inputs.answer, [None, None, right], atol=1e-6)
    assert not verify(inputs.answer, [None, None, c])
    assert not verify(inputs.answer, [None, None, np.zeros_like(c)])


@pytest.mark.parametrize("shape", [(1, 4096, 4096), (333, 264, 328), (512, 4096, 4096)])
def test_kt_workspace_is_zeroed_big_enough_and_shared_only_within_one_split_k(kept, shape):
    """The workspace KT passes each point (the Tunable's pick): zeroed, big enough for the launch, and shared
    only by configurations of one SPLIT_K, whose counters all sit at the same offset after the partials."""
    pytest.importorskip("kernel_tuner", reason="kernel_tuner (dev extra) is not installed")
    space = ktv.kt_space(configs=kept)
    inputs = ktv.kt_inputs(space=space, shape=shape, seed=7)
    users: dict[int, set] = {}
    for config in kept:
        params = dict(zip(space.names, _kt_key(config)))
        workspace = inputs.arguments[3].select_for_configuration(params)
        launch = FAMILIES["gemm_mma"].launch(config.defines(), *shape)
        assert workspace.dtype == np.float32 and workspace.nbytes >= max(launch.workspace_bytes, 1), config.label()
        users.setdefault(id(workspace), set()).add(config.defines()["SPLIT_K"])
    for splits in users.values():
        assert len(splits) == 1  # counters sit at SPLIT_K * M * N floats: one offset per shared buffer
    for workspace in inputs.arguments[3].values():
        assert not workspace.any()
    assert len(users) == len(_declared_split_ks())


def test_kt_accepts_the_argument_list(kept):
    """KT's own argument check takes the per-SPLIT_K workspace (a Tunable) in the kernel's workspace slot."""
    util = pytest.importorskip("kernel_tuner.util", reason="kernel_tuner (dev extra) is not installed")
    space = ktv.kt_space(configs=kept)
    inputs = ktv.kt_inputs(space=space, shape=(8, 64, 64), seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # uint16 bit patterns for __nv_bfloat16, as in the script
        util.check_argument_list("gemm_mma", _kt_kernel_string(space, kept[0]), inputs.arguments)


def test_compare_winners_uses_our_medians_with_a_one_percent_tie():
    ours = {"ca": 1.000, "cb": 1.005, "cc": 1.200}
    near = ktv.compare_winners(ours=ours, kt_times={"cb": 0.90, "ca": 0.95})
    assert (near["ours"], near["kt"], near["agree"]) == ("ca", "cb", True)
    assert near["kt_winner_slower_by_our_medians"] == pytest.approx(0.005)
    far = ktv.compare_winners(ours=ours, kt_times={"cc": 0.5, "ca": 1.0})
    assert (far["kt"], far["agree"]) == ("cc", False)
    assert far["kt_winner_slower_by_our_medians"] == pytest.approx(0.2)
    same = ktv.compare_winners(ours=ours, kt_times={"ca": 2.0})
    assert same["agree"] is True
    failed = ktv.compare_winners(ours=ours, kt_times={})
    assert (failed["kt"], failed["agree"]) == (None, False)


def test_plan_and_our_commands(tmp_path):
    plan = ktv.make_plan(quick=True, subset=False, filters=[], shapes=[], kt_iterations=7,
                         params_path=REPO / "params.yaml")
    assert plan.filters == ktv.QUICK_SUBSET and plan.shapes == ktv.QUICK_SHAPES
    steps = dict(ktv.ours_commands(plan=plan, root=tmp_path, python="python3"))
    assert list(steps) == ["grid", "compile", "bench"]
    for name in ("grid", "compile"):
        assert [steps[name][i + 1] for i, arg in enumerate(steps[name]) if arg == "--filter"] == list(plan.filters)
    assert "--no-cache" in steps["compile"]
    assert steps["grid"][-1] == str(paths.grid_file("gemm_mma", root=tmp_path))
    assert steps["compile"][-1] == str(paths.compile_report("gemm_mma", root=tmp_path))
    bench = steps["bench"]
    assert bench[bench.index("--backend") + 1] == "cuda" and bench[bench.index("--gpus") + 1] == "0"
    assert bench[bench.index("--shape") + 1] == "512,4096,4096"
    full = ktv.make_plan(quick=False, subset=False, filters=[], shapes=[], kt_iterations=7, params_path=REPO)
    assert full.filters == () and full.shapes == ktv.SHAPES
    assert "--filter" not in dict(ktv.ours_commands(plan=full, root=tmp_path, python="python3"))["grid"]
    with pytest.raises(TuneTableError, match=r"--shape\[1\]"):
        ktv.make_plan(quick=False, subset=False, filters=[], shapes=["1,8,8", "4096,4096"], kt_iterations=7,
                      params_path=REPO)


@pytest.mark.nvcc
@pytest.mark.slow
def test_our_grid_and_compile_steps_build_exactly_the_configs_kt_gets(tmp_path):
    """The real CLI steps (grid, compile --no-cache) into a scratch root: the same configs KT is given, all ok."""
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")  # the kernel is the family folder's
    plan = ktv.make_plan(quick=True, subset=False, filters=[], shapes=[], kt_iterations=7,
                         params_path=tmp_path / "params.yaml")
    root = tmp_path / "results"
    for name, command in ktv.ours_commands(plan=plan, root=root)[:2]:
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
        assert done.returncode == 0, (name, done.stderr[-2000:])
    space = ktv.kt_space(configs=_configs(plan.filters))
    kt_ids = {config.id for config in space.by_key.values()}
    grid_ids = {entry["id"] for entry in json.loads(paths.grid_file("gemm_mma", root=root).read_text())["configs"]}
    records = json.loads(paths.compile_report("gemm_mma", root=root).read_text())["records"]
    assert grid_ids == kt_ids
    assert {r["config_id"] for r in records if r["status"] == "ok"} == kt_ids
    # The quick subset is a smoke test of both shared-memory paths and of split-K.
    configs = space.by_key.values()
    assert {dict(c.derived)["SMEM_BYTES"] > 48 * 1024 for c in configs} == {False, True}
    assert {c.defines()["SPLIT_K"] > 1 for c in configs} == {False, True}
