"""Trust figures of the bench from two independent measurements (separate processes) of a table.

- winner agreement: per shape measured in both, the same winner, or the first run's winner within
  1 % of the second run's best (target >= 95 % of shapes);
- median relative IQR (IQR / median) of the ok kernel rows of shapes >= 1 GFLOP (target <= 1 %).

Inputs are recordings (data/recordings/*.parquet) or shard pickles; only configurations present in
both runs compete. Prints the figures and writes benchmarks/results/bench_trust.json.

    python3 benchmarks/bench_trust.py FIRST.parquet SECOND.parquet [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pandas as pd  # noqa: E402

from tunetable.atomic import atomic_write_text  # noqa: E402
from tunetable.results import read_result_file  # noqa: E402

RESULT = REPO / "benchmarks" / "results" / "bench_trust.json"
TIE = 0.01
GFLOP = 1e9


def load_rows(path: Path) -> pd.DataFrame:
    """Rows of a recording (.parquet) or of a shard (.pkl)."""
    frame = pd.read_parquet(path) if path.suffix == ".parquet" else read_result_file(path)["merged_df"]
    return frame[(frame["kind"] == "kernel") & (frame["status"] == "ok")]


def winner_agreement(first: pd.DataFrame, second: pd.DataFrame) -> dict:
    """Per shared shape: does the first run's winner hold (same, or within TIE of the second's best)?"""
    shapes = []
    for (m, n, k), one in first.groupby(["M", "N", "K"]):
        two = second[(second["M"] == m) & (second["N"] == n) & (second["K"] == k)]
        common = set(one["config_id"]) & set(two["config_id"])
        if not common:
            continue
        one = one[one["config_id"].isin(common)].set_index("config_id")["median_ms"]
        two = two[two["config_id"].isin(common)].set_index("config_id")["median_ms"]
        win_one = min(one.index, key=lambda c: (one[c], c))
        win_two = min(two.index, key=lambda c: (two[c], c))
        slower = float(two[win_one] / two[win_two] - 1)
        shapes.append({"M": int(m), "N": int(n), "K": int(k), "configs": len(common), "winner_first": win_one,
                       "winner_second": win_two, "first_winner_slower_in_second": round(slower, 4),
                       "agree": win_one == win_two or slower <= TIE})
    agreeing = sum(s["agree"] for s in shapes)
    return {"shapes": len(shapes), "agreeing": agreeing,
            "agreement": round(agreeing / len(shapes), 4) if shapes else None, "per_shape": shapes}


def relative_iqr(frame: pd.DataFrame) -> dict:
    """Median IQR/median of ok kernel rows on shapes of at least 1 GFLOP."""
    big = frame[2.0 * frame["M"] * frame["N"] * frame["K"] >= GFLOP]
    values = (big["iqr_ms"] / big["median_ms"]).dropna()
    return {"rows": int(len(values)), "median_relative_iqr": round(float(values.median()), 5) if len(values) else None,
            "p90_relative_iqr": round(float(values.quantile(0.9)), 5) if len(values) else None}


def main() -> None:
    """Compare two runs and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--out", type=Path, default=RESULT)
    options = parser.parse_args()
    first, second = load_rows(options.first), load_rows(options.second)
    agreement = winner_agreement(first, second)
    figures = {
        "first": str(options.first), "second": str(options.second),
        "winner_agreement": {k: v for k, v in agreement.items() if k != "per_shape"}, "target_agreement": 0.95,
        "relative_iqr_first": relative_iqr(first), "relative_iqr_second": relative_iqr(second),
        "target_median_relative_iqr": 0.01, "per_shape": agreement["per_shape"],
    }
    text = json.dumps(figures, indent=2) + "\n"
    print(json.dumps({k: v for k, v in figures.items() if k != "per_shape"}, indent=2))
    atomic_write_text(options.out, text)


if __name__ == "__main__":
    main()
