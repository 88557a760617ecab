"""Where every stage reads and writes: the one place that names result paths."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path("results")


def shape_name(m: int, n: int, k: int) -> str:
    """File stem of a (table, shape) shard: ``M77_N4096_K4096``."""
    return f"M{m}_N{n}_K{k}"


def raw_dir(table: str, key: str, *, root: Path = RESULTS) -> Path:
    """Folder of a table's raw result shards for one content key."""
    return root / "raw" / table / key


def raw_shard(table: str, key: str, m: int, n: int, k: int, *, root: Path = RESULTS) -> Path:
    """A shard's result file (kbench-compatible pickle)."""
    return raw_dir(table, key, root=root) / f"{shape_name(m, n, k)}.pkl"


def journal(table: str, key: str, m: int, n: int, k: int, *, root: Path = RESULTS) -> Path:
    """A shard's append-only journal (one JSON line per measured configuration)."""
    return raw_dir(table, key, root=root) / f"{shape_name(m, n, k)}.journal.jsonl"


def compile_report(table: str, *, root: Path = RESULTS) -> Path:
    """The compile report of a table (JSON: one record per configuration)."""
    return root / "compile" / f"{table}.json"


def grid_file(table: str, *, root: Path = RESULTS) -> Path:
    """The expanded configuration list of a table (JSON)."""
    return root / "grid" / f"{table}.json"


def ranked(table: str, *, root: Path = RESULTS, suffix: str = ".parquet") -> Path:
    """The ranked table of a table (parquet; .csv and .md beside it)."""
    return root / "ranked" / f"{table}{suffix}"


def metrics(table: str, *, root: Path = RESULTS) -> Path:
    """Metrics JSON of a table for ``dvc metrics diff``."""
    return root / "metrics" / f"{table}.json"


def plot_data(table: str, *, root: Path = RESULTS) -> Path:
    """Per-shape TFLOP/s vs cuBLAS (CSV) for ``dvc plots``."""
    return root / "plots" / f"{table}.csv"
