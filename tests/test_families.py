"""Launch geometry and shape checks of kernels/families/ (CPU only)."""

from __future__ import annotations

import dataclasses

import pytest

from tunetable.kernels.families import FAMILIES, Launch
from tunetable.grid import expand
from tunetable.params import load_params, table_spec

GEMM = FAMILIES["gemm_mma"]

BIG = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "WARPS_M": 2, "WARPS_N": 4, "WARPS_K": 1,
       "STAGES": 4, "SPLIT_K": 1, "GROUP_M": 8}
SKINNY_SPLIT = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64, "WARPS_M": 1, "WARPS_N": 4, "WARPS_K": 1,
                "STAGES": 4, "SPLIT_K": 4, "GROUP_M": 1}


def test_entry_name_matches_the_kernel_source(repo_root):
    """The extern "C" name that the bench looks up is gemm_mma.cu's only kernel (split-K reduces inside it)."""
    source = (repo_root / GEMM.source).read_text()
    assert f"{GEMM.entry}(const __nv_bfloat16*" in source
    assert source.count("__global__") == 1
    assert "splitk_reduce" not in source


def test_no_family_has_a_reduction_kernel_and_all_zero_their_workspace():
    """Every family launches one kernel per GEMM; its split-K tile counters need a zeroed workspace."""
    for family in FAMILIES.values():
        assert not hasattr(family, "reduce_entry"), family.name
        assert family.zeroed_workspace is True, family.name
    assert {field.name for field in dataclasses.fields(Launch)} == {"grid", "block", "smem_bytes", "workspace_bytes"}


def test_big_tile_launch_at_4096_cubed():
    """4096/128 x 4096/256 tiles, 8 warps, 4 stages of (128+256)x64 bf16, no split-K pieces."""
    launch = GEMM.launch(BIG, 4096, 4096, 4096)
    assert launch == Launch(grid=(32 * 16, 1, 1), block=(256, 1, 1), smem_bytes=196608, workspace_bytes=0)


def test_partial_tiles_round_up():
    """M=333 needs 3 row tiles of 128; N=264 needs 2 column tiles of 256."""
    launch = GEMM.launch(BIG, 333, 264, 328)
    assert launch.grid == (3 * 2, 1, 1)


def test_split_k_workspace_holds_partials_then_tile_counters():
    """SPLIT_K=4 at M=7, N=4096: grid z=4; fp32 partials [4, 7, 4096], then one int per 16x64 tile (1 x 64)."""
    launch = GEMM.launch(SKINNY_SPLIT, 7, 4096, 14336)
    assert launch.grid == (1 * 64, 1, 4)
    assert launch.block == (128, 1, 1)
    assert launch.workspace_bytes == 4 * 7 * 4096 * 4 + 64 * 4 == 458_752 + 256
    assert launch.smem_bytes == 4 * (16 + 64) * 64 * 2


def test_split_k_counters_count_partial_tiles_too():
    """M=333, N=264 with 16x64 tiles: 21 row tiles (the last partial) x 5 column tiles = 105 counters."""
    launch = GEMM.launch({**SKINNY_SPLIT, "SPLIT_K": 2}, 333, 264, 328)
    assert launch.grid == (21 * 5, 1, 2)
    assert launch.workspace_bytes == 2 * 333 * 264 * 4 + 105 * 4 == 703_296 + 420


def test_sliced_k_widens_the_block_not_the_grid():
    """WARPS_K=4 k slices of 1 x 4 warps: 512 threads on the same 16x64 tiles, split-K pieces and shared memory."""
    plain = {**SKINNY_SPLIT, "BLOCK_K": 128}
    sliced = {**plain, "WARPS_K": 4}
    one, four = GEMM.launch(plain, 7, 4096, 14336), GEMM.launch(sliced, 7, 4096, 14336)
    assert one.block == (4 * 32, 1, 1) and four.block == (4 * 4 * 32, 1, 1)
    assert (four.grid, four.smem_bytes, four.workspace_bytes) == (one.grid, one.smem_bytes, one.workspace_bytes)


def test_smem_formula_matches_the_derived_value_of_every_default_config(repo_root):
    """params.yaml's SMEM_BYTES (static_asserted by the kernel) equals families.smem_bytes."""
    params = load_params(repo_root / "params.yaml")
    grid = expand(table_spec(params, "gemm_mma"))
    kept = grid.kept
    # Not vacuous: every group params.yaml declares keeps configurations to check.
    declared = {group["name"] for group in params["tables"]["gemm_mma"]["grid"]["groups"]}
    assert {grid.group_of[config.id] for config in kept} == declared
    for config in kept:
        defines = config.defines()
        assert defines["SMEM_BYTES"] == GEMM.smem_bytes(defines), config.label()
        assert defines["THREADS"] == GEMM.threads(defines), config.label()


@pytest.mark.parametrize("M", [1, 7, 77, 333, 4096])
def test_valid_shapes_pass(M):
    """Any M >= 1 with N, K multiples of 8 is accepted."""
    GEMM.check_shape(M, 6144, 4096)
    GEMM.check_shape(M, 8, 8)


@pytest.mark.parametrize(
    "shape,message",
    [
        ((0, 4096, 4096), "M must be >= 1"),
        ((16, 4100, 4096), "N and K must be multiples of 8"),
        ((16, 4096, 4092), "N and K must be multiples of 8"),
        ((16, 0, 4096), "N and K must be multiples of 8"),
        ((16, 4096, 2.0), "K must be an integer"),
        ((2**20, 2**12, 2**12), "exceeds the int32 range"),
    ],
)
def test_invalid_shapes_raise_a_clear_error(shape, message):
    """Bad shapes raise ValueError naming the problem."""
    with pytest.raises(ValueError, match=message):
        GEMM.check_shape(*shape)


def test_launch_rejects_bad_shape_and_missing_define():
    """launch() checks the shape first and names a missing tunable."""
    with pytest.raises(ValueError, match="multiples of 8"):
        GEMM.launch(BIG, 64, 100, 64)
    partial = {k: v for k, v in BIG.items() if k != "STAGES"}
    with pytest.raises(KeyError, match="STAGES"):
        GEMM.launch(partial, 64, 64, 64)


def test_cluster_blocks_of_the_wgmma_grid_and_of_families_without_clusters():
    """Blocks per cluster are CLUSTER_M x CLUSTER_N; gemm_mma's defines have none, so 1."""
    from tunetable.kernels.families import cluster_blocks

    wgmma = table_spec(load_params("params.yaml"), "gemm_wgmma")
    sizes = {cluster_blocks(c.defines()) for c in expand(wgmma).kept}
    assert 1 in sizes and 2 in sizes
    assert cluster_blocks(BIG) == 1


@pytest.mark.parametrize(("grid", "cluster", "fits", "expected"), [
    ((132, 1, 1), 2, 66, (132, 1, 1)),   # every cluster resident: unchanged
    ((132, 1, 1), 2, 60, (120, 1, 1)),   # 60 pairs fit: the other 6 would be a second wave
    ((132, 1, 1), 2, 0, (132, 1, 1)),    # the driver could not say: no cut
    ((64, 1, 1), 2, 60, (64, 1, 1)),     # fewer work items than resident clusters
    ((132, 1, 1), 1, 10, (132, 1, 1)),   # no clusters: never cut
])
def test_persistent_grid_is_cut_to_the_resident_clusters(grid, cluster, fits, expected):
    """The bench and the runtime launch the same persistent grid: whole clusters that fit at once."""
    from tunetable.kernels.driver import cut_to_resident

    assert cut_to_resident(grid, cluster=cluster, fits=fits) == expected
