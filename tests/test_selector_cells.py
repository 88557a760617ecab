"""The selector's shortlists per (N, K) lattice point: a shape is scored on the shortlist of the point nearest it."""

from __future__ import annotations

import dataclasses

from tunetable.kernels.runtime import selector_serve as runtime
from tunetable.kernels.runtime.decide import selector_candidates


def test_the_lattice_is_1024_to_32768_in_half_octaves_rounded_to_64() -> None:
    assert runtime.LATTICE == (1024, 1408, 2048, 2880, 4096, 5760, 8192, 11584, 16384, 23168, 32768)


def test_a_shape_takes_the_lattice_point_nearest_in_log2_along_each_axis() -> None:
    # log2: 5120 -> 12.32, 4096 -> 12, 5760 -> 12.49: 5760 is nearer; 3584 -> 11.81 is nearer 4096 than 2880 (11.49).
    assert runtime.nearest_cell(n=5120, k=3584) == (5760, 4096)
    # Outside the lattice: its ends.
    assert runtime.nearest_cell(n=64, k=65536) == (1024, 32768)
    # The geometric midpoint of 1024 and 1408 is 1200.8: 1200 goes down, 1208 up.
    assert runtime.nearest_cell(n=1200, k=1208) == (1024, 1408)


def test_cells_are_written_as_runs_of_neighbouring_k_and_read_back() -> None:
    points = [(2048, 1024), (2048, 1408), (2048, 2880), (4096, 1024), (2048, 2048)]
    runs = runtime.cell_runs(points)
    assert runs == ((2048, 1024, 2880), (4096, 1024, 1024))
    assert sorted(runtime.cell_points(runs)) == sorted(points)
    assert runtime.cell_runs([(2048, 1024), (2048, 2048)]) == ((2048, 1024, 1024), (2048, 2048, 2048))


def hand_made(*, config_id: str, cells: tuple[tuple[int, int, int], ...], bias: float):
    """A real generated candidate over M in [64, 256) with a flat bias, on the given cells only."""
    terms = ((4096, 4096, bias, 1.0, bias, 1.0),)
    return dataclasses.replace(selector_candidates("gemm_selector")[0], m=64, m_end=256, rank=0 if bias > 0 else 1,
                               config_id=config_id, bias_terms=terms,
                               cublas_terms=((4096, 4096, 0.0, 1.0, 0.0, 1.0),), cells=cells)


def test_a_shape_is_scored_only_on_its_points_shortlist() -> None:
    """Two copies of one configuration, the second predicted about 2x faster (bias -0.49 against 0.2) but
    shortlisted only at (8192, 8192): at N = K = 4096 the first is chosen, at N = K = 8192 the second."""
    slow = hand_made(config_id="c0000000001", cells=((4096, 4096, 4096),), bias=0.2)
    fast = hand_made(config_id="c0000000002", cells=((8192, 8192, 8192),), bias=-0.49)
    selector = runtime.ShapeSelector([slow, fast])
    assert selector.choose(m=100, n=4096, k=4096).candidate.config_id == "c0000000001"
    assert selector.choose(m=100, n=8192, k=8192).candidate.config_id == "c0000000002"
    assert [c.config_id for c in selector.shortlist(m=100, n=4096, k=4500)] == ["c0000000001"]
    assert len(selector.shortlist(m=100)) == 2          # the range's entries
    # A point no entry of the range names: every entry of the range is scored (the faster wins).
    assert selector.choose(m=100, n=1024, k=1024).candidate.config_id == "c0000000002"


def test_every_generated_shortlist_is_at_most_the_configured_size() -> None:
    from pathlib import Path

    from tunetable.params import load_params, selector_spec

    spec = selector_spec(load_params(Path(__file__).resolve().parents[1] / "params.yaml"), "gemm_selector")
    selector = runtime.ShapeSelector(selector_candidates("gemm_selector"))
    for m in (1, 7, 100, 200, 333, 600, 3000, 100000):
        for n, k in ((4096, 4096), (5120, 13824), (1536, 8960), (28672, 8192)):
            found = selector.shortlist(m=m, n=n, k=k)
            assert 1 <= len(found) <= spec.candidates
            assert all(c.m <= m < c.m_end for c in found)
