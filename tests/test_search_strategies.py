"""Search strategies: budgets, failures, determinism under a seed, priors, transfer seeds, settings."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tunetable.config import KernelConfig
from tunetable.search import SearchSettings, make_strategy
from tunetable.search.base import Budget, Failure, run_search
from tunetable.search.space import SearchSpace
from tunetable.search.evolutionary import GeneticAlgorithm
from tunetable.search.exhaustive import Exhaustive
from tunetable.search.model import BayesianOptimisation
from tunetable.search.random_sample import RandomSample
from tunetable.yamlio import load_yaml_file

STRATEGIES = [Exhaustive(), RandomSample(), BayesianOptimisation(), GeneticAlgorithm()]


def _configs() -> list[KernelConfig]:
    """A hand-made 12-point grid: BLOCK_N x STAGES x SPLIT_K, with (256, 4, 4) ruled out."""
    configs = []
    for block_n, stages, split_k in itertools.product([64, 128, 256], [3, 4], [1, 4]):
        if (block_n, stages, split_k) == (256, 4, 4):
            continue
        configs.append(KernelConfig.from_dict("toy", {"BLOCK_N": block_n, "STAGES": stages, "SPLIT_K": split_k}))
    return configs


# Hand-written costs (ms) per (BLOCK_N, STAGES, SPLIT_K); (64, 3, 4) fails to launch.
TIMES = {
    (64, 3, 1): 0.90, (64, 4, 1): 0.85, (64, 3, 4): None, (64, 4, 4): 0.70,
    (128, 3, 1): 0.60, (128, 4, 1): 0.55, (128, 3, 4): 0.50, (128, 4, 4): 0.45,
    (256, 3, 1): 0.40, (256, 4, 1): 0.30, (256, 3, 4): 0.35,
}


class CountingMeasure:
    """The recorded cost of a configuration, counting calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, config: KernelConfig) -> float | Failure:
        self.calls.append(config.id)
        value = TIMES[tuple(v for _, v in config.params)]
        return Failure("launch", "too many resources") if value is None else value


def _space() -> SearchSpace:
    return SearchSpace.from_configs(_configs())


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_max_fevals_counts_unique_evaluations_and_failures(strategy) -> None:
    measure = CountingMeasure()
    result = run_search(strategy=strategy, space=_space(), measure=measure, budget=Budget(max_fevals=5), seed=7)
    assert len(result.trace) == 5
    assert len(measure.calls) == 5
    assert len(set(measure.calls)) == 5
    assert result.stop_reason == "max_fevals"


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_unlimited_budget_measures_every_configuration_once(strategy) -> None:
    measure = CountingMeasure()
    result = run_search(strategy=strategy, space=_space(), measure=measure, budget=Budget(), seed=3)
    assert sorted(measure.calls) == sorted(c.id for c in _configs())
    assert result.best_ms == 0.30
    best = next(c for c in _configs() if c.as_dict() == {"BLOCK_N": 256, "STAGES": 4, "SPLIT_K": 1})
    assert result.best_config_id == best.id
    failed = next(c for c in _configs() if c.as_dict() == {"BLOCK_N": 64, "STAGES": 3, "SPLIT_K": 4})
    assert [e.outcome for e in result.trace if e.config_id == failed.id] == [Failure("launch", "too many resources")]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_time_limit_stops_between_measurements(strategy) -> None:
    ticks = iter(range(1000))
    clock = lambda: float(next(ticks))  # noqa: E731 - each reading advances one second
    result = run_search(strategy=strategy, space=_space(), measure=CountingMeasure(),
                        budget=Budget(time_limit=3.5), seed=1, clock=clock)
    # Readings: start 0; each check before a measurement reads 1, 2, 3 (< 3.5) and each record one more.
    assert result.stop_reason == "time_limit"
    assert 1 <= len(result.trace) <= 3


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_same_seed_same_trace(strategy) -> None:
    prior = np.linspace(1.0, 2.0, len(_configs()))
    first = run_search(strategy=strategy, space=_space(), measure=CountingMeasure(), budget=Budget(max_fevals=8),
                       seed=11, prior=prior)
    second = run_search(strategy=strategy, space=_space(), measure=CountingMeasure(), budget=Budget(max_fevals=8),
                        seed=11, prior=prior)
    assert [e.config_id for e in first.trace] == [e.config_id for e in second.trace]


def test_random_sample_differs_between_seeds() -> None:
    traces = {tuple(e.config_id for e in run_search(strategy=RandomSample(), space=_space(), measure=CountingMeasure(),
                                                    budget=Budget(max_fevals=6), seed=seed).trace) for seed in range(5)}
    assert len(traces) > 1


def test_repeated_request_is_free() -> None:
    from tunetable.search.base import Evaluator

    measure = CountingMeasure()
    evaluator = Evaluator(space=_space(), measure=measure, budget=Budget(max_fevals=3))
    assert evaluator.evaluate(4) == 0.60
    assert evaluator.evaluate(4) == 0.60
    assert len(measure.calls) == 1
    assert evaluator.remaining() == 2


def test_failure_ranks_as_infinite() -> None:
    from tunetable.search.base import Evaluator

    space = _space()
    evaluator = Evaluator(space=space, measure=CountingMeasure(), budget=Budget())
    assert evaluator.evaluate(space.find((64, 3, 4))) == float("inf")
    assert evaluator.best() is None


def test_model_and_exhaustive_start_from_the_prior_favourite() -> None:
    prior = np.full(len(_configs()), 5.0)
    prior[6] = 1.0   # (128, 4, 1), 7th in grid order, predicted fastest
    for strategy in (BayesianOptimisation(), Exhaustive()):
        result = run_search(strategy=strategy, space=_space(), measure=CountingMeasure(), budget=Budget(max_fevals=1),
                            seed=0, prior=prior)
        assert result.trace[0].config_id == _configs()[6].id


def test_transfer_seeds_are_measured_first() -> None:
    for strategy in (BayesianOptimisation(), GeneticAlgorithm()):
        result = run_search(strategy=strategy, space=_space(), measure=CountingMeasure(), budget=Budget(max_fevals=4),
                            seed=0, prior=np.ones(len(_configs())), seeds=[9, 3])
        assert [e.config for e in result.trace[:2]] == [9, 3]


def test_genetic_algorithm_only_measures_grid_points() -> None:
    # The grid lacks (256, 4, 4): crossover of (256, 4, 1) and (128, 4, 4) can produce it and must repair it.
    measure = CountingMeasure()
    run_search(strategy=GeneticAlgorithm(population=4, mutation_rate=0.9), space=_space(), measure=measure,
               budget=Budget(), seed=5)
    allowed = {c.id for c in _configs()}
    assert set(measure.calls) <= allowed and len(measure.calls) == len(allowed)


def test_space_neighbours_respect_the_rules() -> None:
    space = _space()
    position = space.find((256, 4, 1))
    neighbours = {space.key(p) for p in space.neighbours(position)}
    assert neighbours == {(64, 4, 1), (128, 4, 1), (256, 3, 1)}   # (256, 4, 4) is not in the grid


def test_top_k_prunes_before_measuring() -> None:
    prior = np.array([9, 8, 7, 6, 5, 4, 3, 2, 1.5, 1.2, 1.1], dtype=float)
    plan = make_strategy({"strategy": "exhaustive", "top_k": 3})
    measure = CountingMeasure()
    result = plan.run(configs=_configs(), measure=measure, prior=prior)
    assert sorted(measure.calls) == sorted(c.id for c in _configs()[8:])
    assert result.trace[0].config_id == _configs()[10].id


def test_settings_label_and_validation() -> None:
    settings = SearchSettings.from_mapping({"strategy": "model", "max_fevals": 8, "seed": 3, "top_k": 10})
    assert settings.label == "model(max_fevals=8,seed=3,top_k=10)"
    assert make_strategy(None).label == "exhaustive(seed=0)"
    with pytest.raises(ValueError, match="unknown search strategy 'annealing'"):
        make_strategy({"strategy": "annealing"})
    with pytest.raises(ValueError, match="max_fevals must be a positive integer"):
        make_strategy({"strategy": "random", "max_fevals": 0})
    with pytest.raises(ValueError, match="unknown search setting"):
        make_strategy({"strategy": "random", "budget": 3})
    with pytest.raises(ValueError, match="learn_from informs the model strategy only, not 'random'"):
        make_strategy({"strategy": "random", "learn_from": "rec.parquet"})


def test_every_schema_strategy_has_an_implementation(repo_root) -> None:

    schema = load_yaml_file(repo_root / "pipeline/schemas/params.schema.yaml")
    search = schema["properties"]["tables"]["additionalProperties"]["properties"]["search"]["properties"]
    for name in search["strategy"]["enum"]:
        assert make_strategy({"strategy": name}).strategy.name == name


def test_neighbour_measurements_steer_the_model() -> None:
    from tunetable.search.base import Related

    # The perf model alone favours position 0 (half the predicted time of the rest); an earlier
    # run on the same shape (distance 0, e.g. before a kernel edit) measured position 10 at a
    # fifth of its prediction and position 0 at twice its prediction.
    prior = np.full(len(_configs()), 2.0)
    prior[0] = 1.0
    related = [Related(config=10, distance=0.0, log_residual=float(np.log(0.2))),
               Related(config=0, distance=0.0, log_residual=float(np.log(2.0)))]
    result = run_search(strategy=BayesianOptimisation(), space=_space(), measure=CountingMeasure(),
                        budget=Budget(max_fevals=1), seed=0, prior=prior, related=related)
    assert result.trace[0].config == 10


def test_band_design_spreads_over_the_models_near_ties() -> None:
    from tunetable.search.model import band_design

    # Positions 0-2 are predicted within 10 % of the best, position 3 is 50 % slower.
    prior = np.array([1.00, 1.05, 1.08, 1.50])
    features = np.array([[0.0, 0.0], [0.1, 0.0], [1.0, 1.0], [1.0, 0.9]])
    # After the favourite (0), the farthest near-tie is 2; 3 is outside the band.
    assert band_design(prior=prior, features=features, first=[0], picks=1) == [2]
    assert band_design(prior=prior, features=features, first=[0], picks=5) == [2, 1]


def test_the_default_measures_everything_and_budgets_change_the_fingerprint() -> None:
    default = SearchSettings.from_mapping(None)
    assert (default.measures_everything
            and SearchSettings.from_mapping({"strategy": "exhaustive", "seed": 4}).measures_everything)
    budgeted = SearchSettings.from_mapping({"strategy": "exhaustive", "max_fevals": 5})
    assert (not budgeted.measures_everything
            and not SearchSettings.from_mapping({"strategy": "random"}).measures_everything)
    prints = {repr(SearchSettings.from_mapping(m).fingerprint()) for m in (
        {"strategy": "model", "max_fevals": 5}, {"strategy": "model", "max_fevals": 6},
        {"strategy": "model", "max_fevals": 5, "seed": 1}, {"strategy": "random", "max_fevals": 5},
        {"strategy": "model", "max_fevals": 5, "top_k": 20}, {"strategy": "model", "max_fevals": 5, "transfer": False})}
    assert len(prints) == 6
    learned = SearchSettings.from_mapping({"strategy": "model", "max_fevals": 5, "learn_from": "rec.parquet"})
    assert learned.label == "model(max_fevals=5,seed=0,learn_from=rec.parquet)"
    assert learned.fingerprint(learn_from_hash="a") != learned.fingerprint(learn_from_hash="b")


@pytest.mark.parametrize("name", ["exhaustive", "random", "model", "evolutionary"])
def test_every_strategy_keeps_its_budget_and_trace_through_the_plan(name: str) -> None:
    prior = np.linspace(2.0, 1.0, len(_configs()))
    traces = []
    for _ in range(2):
        measure = CountingMeasure()
        plan = make_strategy({"strategy": name, "max_fevals": 4, "seed": 9})
        result = plan.run(configs=_configs(), measure=measure, prior=prior,
                          measure_batch=lambda configs, measure=measure: [measure(c) for c in configs])
        assert len(result.trace) == 4 and len(measure.calls) == 4 and result.stop_reason == "max_fevals"
        traces.append([e.config_id for e in result.trace])
    assert traces[0] == traces[1]
