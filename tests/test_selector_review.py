"""`tunetable audit` reviews a shape-selector change by what it chooses: the cells whose choice changed, the
predictions that moved, the recordings behind it; in under 100 lines."""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from tunetable.commands.audit import _print_selector_review
from tunetable.kernels.runtime.decide import selector_candidates
from tunetable.kernels.tuning_configs import SELECTOR_FILES
from tunetable.params import load_params, selector_spec, table_spec
from tunetable.selector_fit import build_selector, load_table_measurements
from tunetable.selector_review import LISTED, SelectorSide, cell_shapes, review_selector

REPO = Path(__file__).resolve().parents[1]
PARAMS = load_params(REPO / "params.yaml")
SPEC = selector_spec(PARAMS, "gemm_selector")


@pytest.fixture(scope="module")
def refit() -> SelectorSide:
    """The selector refitted on the committed recordings with shorter shortlists (4 candidates, not 12), and one
    recording's data hash changed in its provenance: a change whose effect the review must show."""
    tables = [load_table_measurements(root=REPO, spec=table_spec(PARAMS, name)) for name in SPEC.tables]
    build = build_selector(tables=tables, candidates=4)
    provenance = {**dict(SELECTOR_FILES["gemm_selector"].provenance), "gemm_wgmma_data_hash": "0123456789abcdef"}
    return SelectorSide(label="refit", candidates=build.candidates, provenance=provenance, source=SPEC.data)


def current() -> SelectorSide:
    """The committed selector, as the runtime reads it."""
    return SelectorSide(label="HEAD", candidates=selector_candidates("gemm_selector"),
                        provenance=dict(SELECTOR_FILES["gemm_selector"].provenance), source=SPEC.data)


def test_an_unchanged_selector_reviews_as_no_change() -> None:
    review = review_selector(name="gemm_selector", before=current(), after=current())
    assert review.cells == len(cell_shapes(current().candidates)) > 1000
    assert (review.choices, review.moved, review.provenance) == ((), (), ())


def test_a_refit_lists_the_cells_whose_choice_changed_and_the_recordings(refit: SelectorSide) -> None:
    review = review_selector(name="gemm_selector", before=current(), after=refit)
    assert review.choices
    assert review.provenance == (("gemm_wgmma_data_hash", "33cb6f920748ab67", "0123456789abcdef"),)
    kept = {c.config_id for c in refit.candidates}
    for cell in review.choices:
        assert cell.before.candidate.config_id != cell.after.candidate.config_id or (
            cell.before.candidate.table != cell.after.candidate.table)
        assert cell.after.candidate.config_id in kept and cell.span[0] <= cell.shape[0] < cell.span[1]
    for cell in review.moved:
        assert cell.before.candidate.config_id == cell.after.candidate.config_id
        assert abs(cell.ratio - 1) > review.threshold * 0.95


def test_the_review_prints_under_100_lines(refit: SelectorSide) -> None:
    review = review_selector(name="gemm_selector", before=current(), after=refit)
    out = io.StringIO()
    _print_selector_review(Console(file=out, width=200), review, rev_a="HEAD", rev_b="refit")
    lines = out.getvalue().splitlines()
    assert len(lines) < 100
    assert f"{len(review.choices)} choices changed" in out.getvalue()
    assert "provenance gemm_wgmma_data_hash: 33cb6f920748ab67 -> 0123456789abcdef" in out.getvalue()
    assert sum("gemm_" in line and "µs" in line for line in lines) <= 2 * LISTED


def test_a_side_that_cannot_be_read_is_one_line_and_nothing_compared() -> None:
    broken = dataclasses.replace(current(), candidates=(), gap="kernels/data/gemm_selector.json is absent at v0")
    review = review_selector(name="gemm_selector", before=broken, after=current())
    out = io.StringIO()
    _print_selector_review(Console(file=out, width=200), review, rev_a="v0", rev_b="HEAD")
    assert review.cells == 0 and "not compared: kernels/data/gemm_selector.json is absent at v0" in out.getvalue()


def test_audit_reads_an_older_revision_whose_selector_was_a_manifest() -> None:
    """b7ce3b9 (main before issue 48) generated the selector into kernels/tuning_configs.py from its manifest's entries:
    the audit reads those as candidates, and the data file that replaced them chooses the same everywhere."""
    done = subprocess.run([sys.executable, "-m", "tunetable", "audit", "b7ce3b9", "HEAD", "--table", "gemm_selector"],
                          cwd=REPO, capture_output=True, text=True, check=False, env={**os.environ, "COLUMNS": "200"})
    if "unknown git revision" in done.stdout + done.stderr:
        pytest.skip("a shallow clone without b7ce3b9")
    assert done.returncode == 0, done.stderr
    assert "497 -> 497 candidates" in done.stdout and "0 choices changed, 0 predictions moved" in done.stdout
