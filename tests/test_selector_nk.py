"""The shape selector's bias weighted by (N, K) distance: one rule for the build and the runtime, typed manifests."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from tunetable.kernels.perfmodel import roofline_floor_s
from tunetable.kernels.runtime import selector_serve as runtime
from tunetable.kernels.runtime.decide import selector_candidates
from tunetable.params import load_params, selector_spec, table_spec
from tunetable.selector_fit import build_selector, cublas_seconds, load_table_measurements

REPO = Path(__file__).resolve().parents[1]
PARAMS = load_params(REPO / "params.yaml")
SPEC = selector_spec(PARAMS, "gemm_selector")


def hand_made(**changes) -> runtime.ShapeCandidate:
    """A generated candidate (a real configuration) with hand-written terms over M in [64, 256), scored on every
    (N, K) (no cells) unless ``changes`` say otherwise."""
    return dataclasses.replace(selector_candidates("gemm_selector")[0], m=64, m_end=256, rank=0,
                               **{"cells": (), **changes})


def predicted_bias(prediction: runtime.Prediction, *, m: int, n: int, k: int) -> float:
    """The bias behind a prediction: log(time / cuBLAS) - log(perf model / floor)."""
    c = prediction.candidate
    model = runtime.model_function(family=c.kernel, tunables=dict(c.tunables), registers=c.registers,
                                   smem_bytes=c.smem_bytes)(m, n, k)
    return math.log(prediction.seconds / prediction.cublas_seconds) - math.log(model / roofline_floor_s(m=m, n=n, k=k))


def test_a_two_nk_bias_is_their_distance_weighted_mean(monkeypatch: pytest.MonkeyPatch) -> None:
    """Terms 0.2 at (4096, 4096) and -0.4 at (16384, 4096), the same at both ends, scale 1 octave."""
    monkeypatch.setattr(runtime, "BIAS_NK_SCALE", 1.0)
    terms = ((4096, 4096, 0.2, 1.0, 0.2, 1.0), (16384, 4096, -0.4, 1.0, -0.4, 1.0))
    cublas = ((4096, 4096, 0.5, 1.0, 0.5, 1.0),)
    m = 128
    # (8192, 4096) is one octave from both: the plain mean.
    ranking = runtime.ShapeSelector([hand_made(bias_terms=terms, cublas_terms=cublas)]).rank(m=m, n=8192, k=4096)
    assert predicted_bias(ranking[0], m=m, n=8192, k=4096) == pytest.approx(-0.1, abs=1e-9)
    # (4096, 4096) is 0 and 2 octaves away: weights 1 and e^-2.
    ranking = runtime.ShapeSelector([hand_made(bias_terms=terms, cublas_terms=cublas)]).rank(m=m, n=4096, k=4096)
    expected = (0.2 - 0.4 * math.exp(-2)) / (1 + math.exp(-2))
    assert predicted_bias(ranking[0], m=m, n=4096, k=4096) == pytest.approx(expected, abs=1e-9)
    # Unweighted (scale None), as before this rule: the plain mean everywhere.
    monkeypatch.setattr(runtime, "BIAS_NK_SCALE", None)
    ranking = runtime.ShapeSelector([hand_made(bias_terms=terms, cublas_terms=cublas)]).rank(m=m, n=4096, k=4096)
    assert predicted_bias(ranking[0], m=m, n=4096, k=4096) == pytest.approx(-0.1, abs=1e-9)


def test_end_weights_and_log_m_interpolation_of_the_terms(monkeypatch: pytest.MonkeyPatch) -> None:
    """At M = 64 (the start) a term of weight e^-1 counts e^-1; at M = 128 (halfway in log M) both ends mix."""
    monkeypatch.setattr(runtime, "BIAS_NK_SCALE", 1.0)
    # start: 0.3 (weight 1) and -0.3 (weight e^-1) at equal distance; end: 0.1 and 0.1
    terms = ((4096, 4096, 0.3, 1.0, 0.1, 1.0), (16384, 4096, -0.3, math.exp(-1), 0.1, 1.0))
    cublas = ((4096, 4096, 0.5, 1.0, 0.5, 1.0),)
    selector = runtime.ShapeSelector([hand_made(bias_terms=terms, cublas_terms=cublas)])
    start = (0.3 - 0.3 * math.exp(-1)) / (1 + math.exp(-1))
    assert predicted_bias(selector.choose(m=64, n=8192, k=4096), m=64, n=8192, k=4096) == pytest.approx(start)
    assert predicted_bias(selector.choose(m=128, n=8192, k=4096), m=128, n=8192, k=4096) == pytest.approx(
        0.5 * start + 0.5 * 0.1)


def test_the_predicted_cublas_time_is_distance_weighted_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """log(cuBLAS / floor) of 0.5 at (4096, 4096) and 0.1 at (16384, 4096), scale 0.5: at (4096, 4096)
    the second weighs e^(-2 / 0.5)."""
    monkeypatch.setattr(runtime, "CUBLAS_NK_SCALE", 0.5)
    terms = ((4096, 4096, 0.0, 1.0, 0.0, 1.0),)
    cublas = ((4096, 4096, 0.5, 1.0, 0.5, 1.0), (16384, 4096, 0.1, 1.0, 0.1, 1.0))
    m, n, k = 128, 4096, 4096
    found = runtime.ShapeSelector([hand_made(bias_terms=terms, cublas_terms=cublas)]).choose(m=m, n=n, k=k)
    expected = (0.5 + 0.1 * math.exp(-4)) / (1 + math.exp(-4))
    assert math.log(found.cublas_seconds / roofline_floor_s(m=m, n=n, k=k)) == pytest.approx(expected)


@pytest.fixture(scope="module")
def built():
    """The selector built from the committed recordings (as `tunetable select --selector` builds it)."""
    tables = [load_table_measurements(root=REPO, spec=table_spec(PARAMS, name)) for name in SPEC.tables]
    return tables, build_selector(tables=tables, candidates=SPEC.candidates)


@pytest.mark.parametrize("shape", [(200, 5120, 13824), (3000, 2560, 7168), (24, 11008, 4096)])
def test_the_build_and_the_runtime_predict_the_same_off_the_lattice(built, shape) -> None:
    """SelectorModel.scores (shortlists, seeds) and ShapeSelector (gemm()) agree on every shortlisted candidate,
    and the runtime's cuBLAS time is the recordings' NK-weighted prediction (`tunetable suggest`'s)."""
    tables, build = built
    m, n, k = shape
    ranking = runtime.ShapeSelector(build.candidates).rank(m=m, n=n, k=k)
    assert ranking
    lo, hi = build.model.span(m)
    for prediction in ranking:
        c = prediction.candidate
        column = next(i for i, x in enumerate(build.model.configs) if (x.table, x.config_id) == (c.table, c.config_id))
        score = float(build.model.scores(m=m, n=n, k=k, lo=lo, hi=hi, columns=[column])[0])
        assert math.log(prediction.seconds / prediction.cublas_seconds) == pytest.approx(score, abs=1e-9)
    assert ranking[0].cublas_seconds == pytest.approx(cublas_seconds(tables=tables, shape=shape), rel=1e-3)


def test_the_manifest_entries_carry_each_nk_term_with_its_weight(built) -> None:
    """Every candidate names the recorded (N, K) of its table, and some (N, K) measured it at or around both ends."""
    tables, build = built
    recorded = {t.table: {(s[1], s[2]) for s in t.times} for t in tables}
    for c in build.candidates:
        assert {(row[0], row[1]) for row in c.bias_terms} == recorded[c.table]
        assert any(row[3] == 1.0 for row in c.bias_terms) and any(row[5] == 1.0 for row in c.bias_terms)
        assert all(0.0 <= row[w] <= 1.0 for row in (*c.bias_terms, *c.cublas_terms) for w in (3, 5))


def test_a_float_with_an_exponent_reads_back_as_a_float() -> None:
    """The manifest writer's floats survive YAML 1.1 (which reads 1e-05 as a string)."""
    from tunetable.select_winners import yaml_scalar
    from tunetable.yamlio import load_yaml

    for value in (1e-05, 2.5e-07, -3e-09, 0.3679, 1.0, 1e20):
        assert load_yaml(f"x: {yaml_scalar(value)}\n", path="t.yaml")["x"] == value


def test_trace_shows_each_nk_share_of_an_entry_on_a_shape() -> None:
    """`tunetable trace gemm_selector INDEX --shape M,N,K`: the shares of each end sum to 1, nearer (N', K') weigh
    more (equal weights), and the bias is the one gemm() predicts with for that candidate."""
    from tunetable.selector_trace import trace_selector

    m, n, k = 200, 5120, 13824
    generated = selector_candidates("gemm_selector")
    on_shortlist = runtime.ShapeSelector(generated).shortlist(m=m, n=n, k=k)[0]   # scored on this shape
    index = next(i for i, c in enumerate(generated) if c is on_shortlist)
    tables = {name: table_spec(PARAMS, name) for name in PARAMS["tables"]}
    found = trace_selector(root=REPO, spec=SPEC, tables=tables, index=index, shape=(m, n, k)).on_shape
    for _, terms, _ in found.ends:
        assert sum(t.share for t in terms) == pytest.approx(1.0)
        if len({t.weight for t in terms}) == 1:
            ordered = sorted(terms, key=lambda t: t.octaves)
            assert [t.share for t in ordered] == sorted((t.share for t in ordered), reverse=True)
    prediction = next(p for p in runtime.ShapeSelector(generated).rank(m=m, n=n, k=k)
                      if p.candidate is generated[index])
    assert found.bias == pytest.approx(predicted_bias(prediction, m=m, n=n, k=k), abs=1e-9)


def test_choose_is_the_rankings_first_whichever_comes_first() -> None:
    """gemm() asks choose() only (it skips building every prediction); rank() later starts with that same object."""
    shape = dict(m=300, n=5120, k=13824)
    first = runtime.ShapeSelector(selector_candidates("gemm_selector"))
    chosen = first.choose(**shape)
    assert first.rank(**shape)[0] is chosen and first.choose(**shape) is chosen
    second = runtime.ShapeSelector(selector_candidates("gemm_selector"))
    ranking = second.rank(**shape)
    assert second.choose(**shape) is ranking[0] and ranking[0] == chosen
    assert min(p.seconds for p in ranking) == chosen.seconds
