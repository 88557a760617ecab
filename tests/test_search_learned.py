"""The learned prior: other shapes' profiles -> a Gaussian over this shape's configurations (never its own data)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from tunetable.config import KernelConfig
from tunetable.search import make_strategy
from tunetable.search.base import Budget, run_search
from tunetable.search.space import SearchSpace
from tunetable.search.learned import (
    Profile,
    learned_prior,
    profiles_from_outcomes,
    shape_distance,
)
from tunetable.search.model import BayesianOptimisation

REPO = Path(__file__).resolve().parents[1]
RECORDING = REPO / "data" / "recordings" / "h200_gemm_mma.parquet"


def _space() -> SearchSpace:
    return SearchSpace.from_configs([KernelConfig.from_dict("toy", {"A": a, "B": b})
                                     for a, b in itertools.product([1, 2, 4], [1, 2])])


def _profiles(space: SearchSpace, shapes_and_times: dict) -> list[Profile]:
    return [Profile(shape=shape, times=dict(zip((c.id for c in space.configs), times)))
            for shape, times in shapes_and_times.items()]


# Two regimes over the six configurations: on "small" shapes position 1 wins, on "large" ones position 4.
SMALL = [2.0, 1.0, 2.0, 3.0, 4.0, 3.0]
LARGE = [4.0, 3.0, 2.0, 3.0, 1.0, 2.0]


def test_the_evaluated_shape_is_never_learned_from() -> None:
    space = _space()
    target = (64, 4096, 4096)
    profiles = _profiles(space, {target: LARGE, (1, 4096, 4096): SMALL, (8, 4096, 4096): SMALL})
    learned = learned_prior(space=space, shape=target, profiles=profiles, base=lambda s: None)
    assert learned is not None and target not in learned.shapes
    assert int(np.argmin(learned.mean)) == 1   # only the small-shape profiles were used
    assert learned_prior(space=space, shape=target, profiles=profiles[:2], base=lambda s: None) is None  # one left


def test_nearer_shapes_weigh_more_and_a_measurement_conditions_the_rest() -> None:
    space = _space()
    profiles = _profiles(space, {(1, 4096, 4096): SMALL, (2, 4096, 4096): SMALL,
                                 (4096, 4096, 4096): LARGE, (8192, 4096, 4096): LARGE})
    near_small = learned_prior(space=space, shape=(4, 4096, 4096), profiles=profiles, base=lambda s: None)
    near_large = learned_prior(space=space, shape=(2048, 4096, 4096), profiles=profiles, base=lambda s: None)
    assert int(np.argmin(near_small.mean)) == 1 and int(np.argmin(near_large.mean)) == 4
    # Halfway, both regimes weigh in: measuring positions 1 and 2 tells which one this shape follows.
    middle = learned_prior(space=space, shape=(64, 4096, 4096), profiles=profiles, base=lambda s: None)
    unseen = [0, 3, 4, 5]
    like_large, std = middle.posterior(seen=[1, 2], values=np.log(np.array([3.0, 2.0]) * 1e-3), unseen=unseen)
    like_small, _ = middle.posterior(seen=[1, 2], values=np.log(np.array([1.0, 2.0]) * 1e-3), unseen=unseen)
    assert unseen[int(np.argmin(like_large))] == 4 and unseen[int(np.argmin(like_small))] == 0
    assert (std > 0).all()


def test_shape_distance_is_in_octaves() -> None:
    assert shape_distance((1, 8, 8), (4, 8, 8)) == pytest.approx(2.0)
    assert shape_distance((2, 2, 2), (4, 4, 4)) == pytest.approx(math.sqrt(3))


def test_learned_search_budget_and_determinism() -> None:
    space = _space()
    profiles = _profiles(space, {(1, 64, 64): SMALL, (2, 64, 64): SMALL, (4096, 64, 64): LARGE})
    learned = learned_prior(space=space, shape=(4, 64, 64), profiles=profiles, base=lambda s: None)
    calls: list[str] = []

    def measure(config: KernelConfig) -> float:
        calls.append(config.id)
        return SMALL[space.configs.index(config)]

    traces = []
    for _ in range(2):
        result = run_search(strategy=BayesianOptimisation(), space=space, measure=measure, budget=Budget(max_fevals=3),
                            seed=4, learned=learned)
        assert len(result.trace) == 3 and result.stop_reason == "max_fevals"
        traces.append([e.config for e in result.trace])
    assert traces[0] == traces[1] and traces[0][0] == 1   # the learned favourite first
    assert len(calls) == 6


@pytest.mark.skipif(not RECORDING.is_file(), reason="the H200 recording is not committed")
def test_leave_one_shape_out_on_the_recording_meets_the_budget_target() -> None:
    """Issue 9's target on the real H200 data: within 2 % of the optimum in <= 10 % of the grid on >= 95 % of shapes."""
    from tunetable.params import load_params, table_spec
    from tunetable.search.replay import grid_parameter_names, load_recorded_table

    spec = table_spec(load_params(REPO / "params.yaml"), "gemm_mma")
    recorded = load_recorded_table(path=str(RECORDING), table="gemm_mma", family=spec.family,
                                   names=grid_parameter_names(spec.grid))
    profiles = profiles_from_outcomes(recorded.outcomes)
    priors = {shape: recorded.prior(shape) for shape in recorded.shapes}
    budget = len(recorded.space) // 10
    plan = make_strategy({"strategy": "model", "max_fevals": budget})
    reached = 0
    for shape in recorded.shapes:
        result = plan.run(configs=recorded.space.configs, measure=recorded.measure(shape), prior=priors[shape],
                          shape=shape, profiles=[p for p in profiles if p.shape != shape], predict=priors.get)
        reached += result.evaluations_to_within(target_ms=recorded.optimum_ms(shape), tolerance=0.02) is not None
    assert reached / len(recorded.shapes) >= 0.95
