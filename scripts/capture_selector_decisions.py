"""Write the runtime's decisions on every recorded and validation shape to a JSON fixture.

Run from the repository root: ``python scripts/capture_selector_decisions.py tests/fixtures/selector_decisions.json``.
It was run once on the code before the shape selector became a data file (issue 48), so that
tests/test_selector_decisions.py can check the new code decides exactly as the old one did. The shapes:
every M x (N, K) of params.yaml's tables, the validation shapes (data/validation_shapes.csv), Ms
between the measured ones (the selector's ``between`` answers) for every held (N, K), and a grid of
unrecorded (N, K) x M (``GRID_NK``, ``GRID_MS``).
"""

from __future__ import annotations

import csv
import json
import sys
import warnings
from pathlib import Path

from tunetable.kernels.runtime import decide
from tunetable.params import load_params

# Ms between the measured ones, and a few beyond them (the selector answers these for a held (N, K)).
BETWEEN_MS = (2, 3, 5, 16, 48, 100, 150, 200, 300, 400, 700, 1500, 3000, 6000, 12000)
# Unrecorded (N, K) x M: the lattice's corners and between its points (what the selector's cells pick).
GRID_NK = (1024, 2048, 3000, 5120, 12288, 28672)
GRID_MS = (1, 7, 64, 333, 2048, 9000)
TOP = 3   # predictions per shape beyond the choice (the online tuner's ranking starts from them)


def recorded_shapes(params: dict) -> set[tuple[int, int, int]]:
    """Every M x (N, K) of params.yaml's tables, and the between-Ms of each (N, K)."""
    found = set()
    for table in params["tables"].values():
        shapes = table["shapes"]
        for n, k in shapes["NK"]:
            found.update((m, n, k) for m in (*shapes["M"], *BETWEEN_MS))
    return found


def grid_shapes() -> set[tuple[int, int, int]]:
    """GRID_MS x GRID_NK x GRID_NK."""
    return {(m, n, k) for m in GRID_MS for n in GRID_NK for k in GRID_NK}


def validation_shapes(path: Path) -> set[tuple[int, int, int]]:
    """The M,N,K rows of data/validation_shapes.csv (comment lines skipped)."""
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return {(int(row["M"]), int(row["N"]), int(row["K"])) for row in csv.DictReader(lines)}


def prediction_record(prediction) -> dict:
    """A prediction as JSON: the candidate's table and id, its predicted seconds and cuBLAS's."""
    return {"table": prediction.candidate.table, "config_id": prediction.candidate.config_id,
            "seconds": prediction.seconds, "cublas_seconds": prediction.cublas_seconds}


def decision_record(m: int, n: int, k: int) -> dict:
    """What gemm() runs for (M, N, K) and what the selector predicts there."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = decide.dispatcher().decide(m=m, n=n, k=k)
    selector = decide.shape_selector()
    ranked = selector.rank(m=m, n=n, k=k)
    return {
        "shape": [m, n, k],
        "config_id": found.entry.config_id,
        "kernel": type(found.entry).__name__,
        "index": found.index,
        "fallback": found.fallback,
        "dispatch_table": None if found.choice is None else found.choice.table,
        "prediction": None if found.prediction is None else prediction_record(found.prediction),
        "ranking": [prediction_record(item) for item in ranked[:TOP]],
        "neighbours": [prediction_record(item) for item in selector.rank(m=m, n=n, k=k, neighbours=True)[:TOP]],
    }


def main(out: str) -> None:
    """Write the fixture: one record per shape and line, sorted by shape."""
    params = load_params("params.yaml")
    shapes = sorted(recorded_shapes(params) | grid_shapes() | validation_shapes(Path("data/validation_shapes.csv")))
    records = [decision_record(*shape) for shape in shapes]
    lines = ",\n".join(json.dumps(record, separators=(",", ":")) for record in records)
    Path(out).write_text(f'{{"shapes": {len(records)}, "decisions": [\n{lines}\n]}}\n')


if __name__ == "__main__":
    main(sys.argv[1])
