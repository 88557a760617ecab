"""The analytical performance model: occupancy, wave quantisation, roofline, and its ordering on the recording."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tunetable.config import KernelConfig
from tunetable.search.prior import (
    SATURATING_WARPS,
    GemmTile,
    PersistentTile,
    Resources,
    blocks_per_sm,
    predict_persistent_seconds,
    predict_seconds,
    predict_space,
    resources_for,
    roofline_floor_s,
    top_k,
)

RECORDING = Path(__file__).resolve().parents[1] / "data/recordings/h200_gemm_mma.parquet"
WGMMA_RECORDING = RECORDING.with_name("h200_gemm_wgmma.parquet")


def _config(**params: int) -> KernelConfig:
    base = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "WARPS_M": 2, "WARPS_N": 2, "WARPS_K": 1, "STAGES": 3,
            "SPLIT_K": 1, "GROUP_M": 8}
    return KernelConfig.from_dict("gemm_mma", {**base, **params})


def _wgmma(**params: int) -> KernelConfig:
    base = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "STAGES": 4, "CONSUMERS": 2, "CLUSTER_M": 1,
            "CLUSTER_N": 1, "RASTER": 1, "GROUP_M": 8, "SPLIT_K": 1}
    return KernelConfig.from_dict("gemm_wgmma", {**base, **params})


def _persistent_s(config: KernelConfig, m: int, n: int, k: int) -> float:
    return predict_persistent_seconds(tile=PersistentTile.from_config(config), m=m, n=n, k=k)


def test_blocks_per_sm_from_registers_smem_and_threads() -> None:
    # 128 regs x 32 lanes = 4096 per warp -> 16 warps -> 4 blocks of 4 warps; smem 233472 // 50176 = 4.
    assert blocks_per_sm(Resources(registers=128, smem_bytes=49152, threads=128)) == 4
    # 255 regs round up to 8192 per warp -> 8 warps -> 2 blocks of 4 warps.
    assert blocks_per_sm(Resources(registers=255, smem_bytes=40960, threads=128)) == 2
    # 200 KiB of smem: one block per SM.
    assert blocks_per_sm(Resources(registers=64, smem_bytes=200 * 1024, threads=256)) == 1
    # More smem than an SM has: cannot launch, predicted infinitely slow.
    too_big = Resources(registers=64, smem_bytes=240 * 1024, threads=128)
    assert blocks_per_sm(too_big) == 0
    assert predict_seconds(tile=GemmTile.from_config(_config()), resources=too_big, m=128, n=128, k=128) == math.inf


def test_roofline_floor_matches_design_numbers() -> None:
    # DESIGN.md: M=1, N=K=4096 has an 8.1 us bandwidth floor.
    assert roofline_floor_s(m=1, n=4096, k=4096) == pytest.approx(8.1e-6, rel=0.01)
    # 8192^3 is compute-bound: 2 * 8192^3 / 800 TFLOP/s = 1.374 ms.
    assert roofline_floor_s(m=8192, n=8192, k=8192) == pytest.approx(1.374e-3, rel=0.01)


def test_no_prediction_beats_the_roofline() -> None:
    for m in (1, 64, 1024, 8192):
        for config in (_config(),
                       _config(BLOCK_M=16, BLOCK_N=64, WARPS_M=1, WARPS_N=4, STAGES=4, SPLIT_K=4, BLOCK_K=64)):
            predicted = predict_seconds(tile=GemmTile.from_config(config), resources=resources_for(config=config),
                                        m=m, n=4096, k=4096)
            assert predicted >= roofline_floor_s(m=m, n=4096, k=4096)


def test_one_tile_past_a_full_wave_costs_a_second_wave() -> None:
    # 128x128 tiles, 1 block per SM (big smem): 12 x 11 = 132 tiles fill one wave; 12 x 12 = 144 need two.
    tile = GemmTile.from_config(_config(STAGES=4, BLOCK_K=64))
    resources = Resources(registers=128, smem_bytes=200 * 1024, threads=128)
    one_wave = predict_seconds(tile=tile, resources=resources, m=128 * 12, n=128 * 11, k=16384)
    two_waves = predict_seconds(tile=tile, resources=resources, m=128 * 12, n=128 * 11 + 8, k=16384)
    assert two_waves / one_wave > 1.8


def test_split_k_is_predicted_to_help_skinny_m() -> None:
    skinny = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=64, WARPS_M=1, WARPS_N=4, STAGES=4, GROUP_M=1)
    times = {}
    for split in (1, 4):
        config = _config(**skinny, SPLIT_K=split)
        times[split] = predict_seconds(tile=GemmTile.from_config(config), resources=resources_for(config=config),
                                       m=1, n=4096, k=4096)
    assert times[4] < times[1]


def _one_block_per_sm_s(config: KernelConfig, m: int, n: int, k: int) -> float:
    """Predicted seconds with residency pinned to one block per SM (by shared memory), whatever the warps."""
    tile = GemmTile.from_config(config)
    resources = Resources(registers=64, smem_bytes=200 * 1024, threads=tile.threads)
    assert blocks_per_sm(resources) == 1
    return predict_seconds(tile=tile, resources=resources, m=m, n=n, k=k)


def test_sliced_k_counts_every_slice_in_the_threads_and_defaults_to_one_slice() -> None:
    tile = dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, WARPS_M=1, WARPS_N=4, STAGES=4, SPLIT_K=2, GROUP_M=1)
    plain, sliced = _config(**tile), _config(**tile, WARPS_K=4)
    before_slices = KernelConfig.from_dict("gemm_mma", {name: v for name, v in plain.params if name != "WARPS_K"})
    assert GemmTile.from_config(before_slices) == GemmTile.from_config(plain)   # no WARPS_K: one slice
    assert GemmTile.from_config(sliced).threads == 4 * GemmTile.from_config(plain).threads
    assert resources_for(config=sliced).threads == GemmTile.from_config(sliced).threads
    # Every slice holds a whole warp tile of accumulators: the estimate per thread does not shrink.
    assert resources_for(config=sliced).registers == resources_for(config=plain).registers


def test_sliced_k_helps_an_underfilled_sm_and_only_costs_a_saturated_one() -> None:
    # Same warp tiles, so the same smem bytes per flop: the slices change the warp fill and add their reduction.
    skinny = dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, WARPS_M=1, WARPS_N=4, STAGES=4, GROUP_M=1)
    assert GemmTile.from_config(_config(**skinny)).threads // 32 < SATURATING_WARPS
    assert GemmTile.from_config(_config(**skinny, WARPS_K=2)).threads // 32 >= SATURATING_WARPS
    shape = dict(m=32, n=4096, k=14336)   # one row of tiles, long K: tensor-core work dwarfs the reduction
    assert _one_block_per_sm_s(_config(**skinny, WARPS_K=2), **shape) <= _one_block_per_sm_s(_config(**skinny), **shape)

    saturated = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, WARPS_M=2, WARPS_N=4, STAGES=4)
    assert GemmTile.from_config(_config(**saturated)).threads // 32 >= SATURATING_WARPS
    times = [_one_block_per_sm_s(_config(**saturated, WARPS_K=slices), m=4096, n=4096, k=4096) for slices in (1, 2, 4)]
    assert times == sorted(times)   # more slices: no more warp fill to gain, a larger reduction to pay


def test_build_failures_are_ranked_last_and_top_k_keeps_the_best() -> None:
    configs = [_config(), _config(BLOCK_N=256, WARPS_N=4), _config(STAGES=4)]
    records = {configs[1].id: {"status": "build"}}
    predictions = predict_space(configs=configs, m=4096, n=4096, k=4096, compile_records=records)
    assert predictions[1] == math.inf
    assert top_k(predictions=predictions, k=3)[-1] == 1
    assert sorted(top_k(predictions=predictions, k=2)) == [0, 2]


def test_compile_report_resources_override_estimates() -> None:
    config = _config()
    estimated = resources_for(config=config)
    reported = resources_for(config=config, compile_record={"status": "ok", "registers": 232, "smem_bytes": 50000})
    assert (reported.registers, reported.smem_bytes) == (232, 50000)
    assert estimated.smem_bytes == 3 * (128 + 128) * 32 * 2   # STAGES x (BM + BN) x BK bf16


def _top_picks_against_chance(*, path: Path, table: str, within: float, picks: int = 5) -> tuple[float, float]:
    """Share of shapes whose model top ``picks`` hold one within ``within`` x the optimum, and chance's share."""
    from tunetable.search.replay import load_recorded_table

    recorded = load_recorded_table(path=str(path), table=table, family=table)
    hits, chance = 0, 0.0
    for shape in recorded.shapes:
        optimum = recorded.optimum_ms(shape)
        good = {cid for cid, t in recorded.outcomes[shape].items() if isinstance(t, float) and t <= within * optimum}
        prior = recorded.prior(shape)
        assert prior is not None
        hits += bool({recorded.space.configs[p].id for p in top_k(predictions=prior, k=picks)} & good)
        # Probability that ``picks`` configurations drawn at random include one of the good ones.
        size = len(recorded.space)
        chance += 1.0 - math.comb(size - len(good), picks) / math.comb(size, picks)
    return hits / len(recorded.shapes), chance / len(recorded.shapes)


@pytest.mark.skipif(not RECORDING.is_file(), reason=f"the H200 recording {RECORDING.name} has not landed yet")
def test_model_ordering_beats_chance_on_the_recording() -> None:
    """On the real H200 recording the model's top 5 holds a near-optimal configuration far more often than chance."""
    hits, chance = _top_picks_against_chance(path=RECORDING, table="gemm_mma", within=1.05)
    assert hits >= 0.5
    assert hits > 1.5 * chance


def test_persistent_predictions_never_beat_the_roofline() -> None:
    configs = (_wgmma(), _wgmma(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, STAGES=6, CONSUMERS=1, SPLIT_K=2),
               _wgmma(BLOCK_N=64, STAGES=8, CLUSTER_N=2), _wgmma(CLUSTER_M=2))
    for m in (1, 64, 1024, 8192):
        for config in configs:
            assert _persistent_s(config, m, 4096, 4096) >= roofline_floor_s(m=m, n=4096, k=4096)


def test_persistent_items_past_the_resident_blocks_cost_another_round() -> None:
    # 128 x 256 tiles, no clusters: 132 items are one per SM; 12 x 11 = 132, 12 x 12 = 144 takes two rounds.
    one_round = _persistent_s(_wgmma(), 128 * 12, 256 * 11, 16384)
    two_rounds = _persistent_s(_wgmma(), 128 * 12, 256 * 12, 16384)
    assert two_rounds / one_round > 1.8


def test_a_tail_split_takes_back_the_idle_last_round_and_costs_nothing_on_a_full_last_wave() -> None:
    # 12 x 12 = 144 tiles of 128 x 256: one round whole, then 12 tiles on 132 SMs; split 8 ways (132 // 12 = 11,
    # capped at 8) the second round is an eighth of a tile plus the partials' fix-up, not a whole tile.
    whole = _persistent_s(_wgmma(), 128 * 12, 256 * 12, 16384)
    split = _persistent_s(_wgmma(TAIL_SPLIT=1), 128 * 12, 256 * 12, 16384)
    assert split < 0.7 * whole
    # 12 x 11 = 132 tiles, one full wave: nothing to split, the same time.
    assert _persistent_s(_wgmma(TAIL_SPLIT=1), 128 * 12, 256 * 11, 16384) == _persistent_s(_wgmma(), 128 * 12,
                                                                                          256 * 11, 16384)


def test_a_last_wave_too_full_to_split_runs_whole_as_without_the_tail_split() -> None:
    # 12 x 20 = 240 tiles on 132 SMs: 108 in the last wave, 132 // 108 = 1 split each; the kernel stores them
    # whole (no partials, no fix-up), exactly as the tile without TAIL_SPLIT does.
    m, n, k = 128 * 12, 256 * 20, 16384
    assert _persistent_s(_wgmma(TAIL_SPLIT=1), m, n, k) == _persistent_s(_wgmma(), m, n, k)


def test_multicast_relieves_a_feed_bound_tile() -> None:
    # 128 x 64 tiles read 128 + 64 rows per k for 128 x 64 outputs: L2-bound; a 1 x 2 cluster halves the A reads.
    alone = _persistent_s(_wgmma(BLOCK_N=64, STAGES=8), 4096, 4096, 4096)
    paired = _persistent_s(_wgmma(BLOCK_N=64, STAGES=8, CLUSTER_N=2), 4096, 4096, 4096)
    assert paired < alone


def test_one_consumer_is_slower_than_two_on_a_compute_bound_shape() -> None:
    two = _persistent_s(_wgmma(BLOCK_N=128, STAGES=6), 8192, 8192, 8192)
    one = _persistent_s(_wgmma(BLOCK_N=128, STAGES=6, CONSUMERS=1), 8192, 8192, 8192)
    assert one > two


def test_predict_space_picks_the_model_by_the_tunables_and_refuses_other_families() -> None:
    mixed = predict_space(configs=[_config(), _wgmma()], m=4096, n=4096, k=4096)
    assert np.isfinite(mixed).all()
    other = KernelConfig.from_dict("other", {"TILE": 64})
    with pytest.raises(ValueError, match="lacks"):
        predict_space(configs=[other], m=64, n=64, k=64)


@pytest.mark.skipif(not WGMMA_RECORDING.is_file(), reason=f"the H200 recording {WGMMA_RECORDING.name} is absent")
def test_persistent_model_ordering_beats_chance_on_the_wgmma_recording() -> None:
    """On the gemm_wgmma recording the model's top 5 holds one within 2 % of the optimum far above chance."""
    hits, chance = _top_picks_against_chance(path=WGMMA_RECORDING, table="gemm_wgmma", within=1.02)
    assert hits >= 0.5
    assert hits > 1.5 * chance
