"""The host's plan of the TMA kernels' last wave (families/common.py's tail_split_plan and tail_pieces), pure Python.

The kernel's own walk is held against these in tests/test_gemm_wgmma_schedule_nvcc.py (compiled for the host).
"""

from __future__ import annotations

import math

import pytest

from tunetable.kernels.families import FAMILIES
from tunetable.kernels.families.common import MAX_TAIL_SPLITS, tail_pieces, tail_split_plan


@pytest.mark.parametrize("streamk", [False, True], ids=["equal_runs", "stream_k"])
@pytest.mark.parametrize(("tiles", "units", "k_tiles"), [
    (512, 132, 64), (128, 132, 224), (144, 132, 64), (256, 66, 64), (3, 132, 1), (45, 132, 3), (4, 132, 16384),
    (131, 132, 2), (133, 132, 5), (1, 1, 7)])
def test_every_k_tile_of_the_last_wave_lands_in_exactly_one_piece(tiles: int, units: int, k_tiles: int,
                                                                  streamk: bool) -> None:
    plan = tail_split_plan(tiles=tiles, units=units, k_tiles=k_tiles, streamk=streamk)
    assert plan.whole_tiles + plan.shared_tiles == tiles and plan.whole_tiles % units == 0
    covered: dict[int, list[tuple[int, int, int, int]]] = {}
    for unit in range(units):
        for piece in tail_pieces(plan, k_tiles=k_tiles, unit=unit, streamk=streamk):
            assert 0 <= piece.kt_begin < piece.kt_end <= k_tiles and 0 <= piece.split < piece.splits <= plan.max_splits
            assert piece.kt_end - piece.kt_begin <= plan.per_split
            covered.setdefault(piece.tile, []).append((piece.kt_begin, piece.kt_end, piece.split, piece.splits))
    assert sorted(covered) == list(range(plan.shared_tiles))
    for runs in covered.values():
        runs.sort()
        assert [r[0] for r in runs[1:]] == [r[1] for r in runs[:-1]] and runs[0][0] == 0 and runs[-1][1] == k_tiles
        assert sorted(r[2] for r in runs) == list(range(len(runs))) and {r[3] for r in runs} == {len(runs)}
    assert plan.max_splits <= MAX_TAIL_SPLITS + 1


def test_the_stream_k_tail_gives_each_cluster_an_equal_share_where_equal_runs_cannot_split() -> None:
    # 4096^3 in 128 x 256 tiles: 512 tiles on 132 SMs, a last wave of 116. Equal runs cannot split it (132 // 116 = 1);
    # the stream-K tail cuts its 116 x 64 k-tiles into 132 runs of 56 or 57 (worked by hand: 7424 / 132 = 56.24).
    equal = tail_split_plan(tiles=512, units=132, k_tiles=64)
    assert (equal.shared_tiles, equal.max_splits, equal.runs) == (116, 1, 116)
    streamk = tail_split_plan(tiles=512, units=132, k_tiles=64, streamk=True)
    assert (streamk.whole_tiles, streamk.shared_tiles, streamk.per_split, streamk.runs) == (396, 116, 57, 132)
    shares = {sum(p.kt_end - p.kt_begin for p in tail_pieces(streamk, k_tiles=64, unit=unit, streamk=True))
              for unit in range(132)}
    assert shares == {56, 57}
    # A small last wave keeps to MAX_TAIL_SPLITS runs per tile: 1100 x 4096^2, 12 tiles over 96 runs of 8 k-tiles.
    small = tail_split_plan(tiles=144, units=132, k_tiles=64, streamk=True)
    assert (small.shared_tiles, small.runs, small.per_split, small.max_splits) == (12, 96, 8, 9)


def test_the_stream_k_run_bounds_fit_the_kernels_32_bit_arithmetic() -> None:
    # The kernel computes u x work / runs and (x + 1) x runs in unsigned 32 bits. The host lets through M x K and
    # N x K up to 2^31 - 1 (check_gemm_shape); the most tiles (64 x 32) at the longest K each M, N allows.
    worst = 0
    for m in range(1, 1400, 11):
        for n in range(8, 1400, 24):
            k = (2**31 - 1) // max(m, n) // 8 * 8
            k_tiles = math.ceil(k / 64)
            plan = tail_split_plan(tiles=math.ceil(m / 64) * math.ceil(n / 32), units=132, k_tiles=k_tiles,
                                   streamk=True)
            worst = max(worst, plan.runs * plan.shared_tiles * k_tiles)
    assert 2**30 < worst < 2**31  # the search reaches the hard cases, and they fit (the kernel comment says 2^31)


def test_the_swap_familys_launch_takes_every_sm_and_the_stream_k_workspace_only_with_the_define() -> None:
    # 200 x 14336 x 4096 in 200 x 128 tiles: 112 tiles, 64 k-tiles. As recorded: 112 blocks, no workspace. With the
    # probe variant's TAIL_SPLIT = 2: 132 blocks, runs of 54-55 k-tiles, so a tile meets at most 1 + ceil(63 / 54) = 3
    # runs: 3 x 112 fp32 tiles of 200 x 128 and 112 x 2 counters = 34,406,400 + 896 bytes (worked by hand).
    family = FAMILIES["gemm_wgmma_swap"]
    defines = {"BLOCK_M": 200, "BLOCK_N": 128, "BLOCK_K": 64, "STAGES": 5, "CONSUMERS": 2, "SPLIT_K": 1}
    recorded = family.launch(defines, 200, 14336, 4096)
    assert (recorded.grid[0], recorded.workspace_bytes) == (112, 0)
    streamk = family.launch({**defines, "TAIL_SPLIT": 2}, 200, 14336, 4096)
    assert (streamk.grid[0], streamk.workspace_bytes) == (132, 34_406_400 + 896)
