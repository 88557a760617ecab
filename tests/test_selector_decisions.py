"""The runtime decides exactly as it did before the shape selector became a data file (issue 48).

tests/fixtures/selector/decisions.json was written by ``python scripts/capture_selector_decisions.py
tests/fixtures/selector/decisions.json`` on the code of main before that change (the selector then
generated into kernels/tuning_configs.py): per recorded, validation and grid shape, what gemm() runs
(table entry or the selector's choice, its predicted times) and the selector's best three predictions,
with and without the neighbouring ranges. This test recomputes every record with today's code.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "selector" / "decisions.json"


def capture_module():
    """scripts/capture_selector_decisions.py as a module (the one definition of a record)."""
    spec = importlib.util.spec_from_file_location("capture_selector_decisions",
                                                  REPO / "scripts" / "capture_selector_decisions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_recorded_and_validation_shape_decides_as_before() -> None:
    recorded = json.loads(FIXTURE.read_text())["decisions"]
    capture = capture_module()
    assert len(recorded) == 390
    changed = [record["shape"] for record in recorded if capture.decision_record(*record["shape"]) != record]
    assert changed == []


def test_the_fixture_covers_the_validation_and_recorded_shapes() -> None:
    shapes = {tuple(record["shape"]) for record in json.loads(FIXTURE.read_text())["decisions"]}
    capture = capture_module()
    assert capture.validation_shapes(REPO / "data" / "validation_shapes.csv") <= shapes
    assert {(1, 4096, 4096), (8192, 8192, 8192), (112, 14336, 4096)} <= shapes
    assert sum(record["prediction"] is not None for record in json.loads(FIXTURE.read_text())["decisions"]) > 300
