"""Transfer between shapes: tuning order and neighbours' winners as starting points."""

from __future__ import annotations

from tunetable.config import KernelConfig
from tunetable.search.space import SearchSpace
from tunetable.search.transfer import (
    neighbour_seeds,
    neighbours,
    seed_shapes,
    similar_m,
    tuning_order,
)


def test_tuning_order_groups_by_n_k_and_starts_from_the_largest_m() -> None:
    shapes = [(64, 4096, 4096), (1, 8192, 8192), (8, 4096, 4096), (1, 4096, 4096), (512, 8192, 8192)]
    assert tuning_order(shapes) == [(64, 4096, 4096), (8, 4096, 4096), (1, 4096, 4096), (512, 8192, 8192),
                                    (1, 8192, 8192)]


def test_neighbours_share_n_k_and_are_nearest_in_log_m() -> None:
    solved = [(32, 4096, 4096), (64, 4096, 4096), (256, 4096, 4096), (128, 8192, 8192), (1024, 4096, 4096)]
    # 64 and 256 are both one octave from 128: the smaller M comes first; 128 of another N,K never counts.
    assert neighbours(shape=(128, 4096, 4096), solved=solved, count=2) == [(64, 4096, 4096), (256, 4096, 4096)]
    assert neighbours(shape=(128, 14336, 4096), solved=solved) == []


def test_seed_shapes_take_the_nearest_m_of_the_same_n_k_then_of_another() -> None:
    solved = [(32, 4096, 4096), (256, 4096, 4096), (128, 8192, 8192), (128, 14336, 4096), (64, 4096, 14336)]
    # Same (N, K): 256 is nearer than 32. Another (N, K): M=128 twice; 14336x4096 is nearer in N, K.
    assert seed_shapes(shape=(128, 4096, 4096), solved=solved) == [(256, 4096, 4096), (128, 14336, 4096)]
    assert similar_m(shape=(128, 4096, 4096), solved=solved, count=3) == [(128, 14336, 4096), (128, 8192, 8192),
                                                                           (64, 4096, 14336)]
    assert seed_shapes(shape=(1, 6144, 4096), solved=[]) == []


def test_neighbour_seeds_interleave_winners_and_skip_unknown_ids() -> None:
    configs = [KernelConfig.from_dict("toy", {"BLOCK_N": n}) for n in (32, 64, 128, 256)]
    space = SearchSpace.from_configs(configs)
    ids = [c.id for c in configs]
    winners = {
        (64, 4096, 4096): [ids[2], ids[1]],
        (256, 4096, 4096): [ids[3], ids[0]],
        (128, 8192, 8192): ["c-not-in-this-grid", ids[3], ids[1]],
    }
    # Seed shapes of M=128: 64 (same N, K; 256 is as near but larger), then 128 of 8192x8192.
    # Firsts of each, then seconds, without repeats or ids this grid lacks.
    assert neighbour_seeds(shape=(128, 4096, 4096), winners=winners, space=space) == [2, 1, 3]
