"""Where the rules' files live: stamps (outputs standing for checked-in files), manifests, ranked and metrics files.

Checked-in files (manifests/*.yaml, kernels/tuning_configs.py) are never Snakemake outputs:
Snakemake deletes a job's outputs before it runs and after it fails, which would delete reviewed
files. The select and codegen rules write them in place (atomically, through the CLI) and declare
a stamp under results/stamps/ as their output.
"""

from __future__ import annotations

from pathlib import Path

from tunetable import paths

STAMPS = paths.RESULTS / "stamps"


def manifest_path(table: str) -> Path:
    """The checked-in manifest of a table."""
    return Path("manifests") / f"{table}.yaml"


def select_stamp(table: str) -> Path:
    """Stamp written after select rewrote manifests/<table>.yaml (holds its sha256)."""
    return STAMPS / "select" / f"{table}.sha256"


def metrics_stamp(table: str) -> Path:
    """Stamp written after metrics rewrote a table's metrics JSON, plot CSV and PNG (holds their sha256)."""
    return STAMPS / "metrics" / f"{table}.sha256"


def codegen_stamp() -> Path:
    """Stamp written after codegen rewrote and re-checked every generated table."""
    return STAMPS / "codegen.ok"


def compile_stamp(*, table: str, key: str) -> str:
    """Stamp of a table's grid file + compile report for one content key."""
    return str(STAMPS / "compile" / table / f"{key}.ok")


def park_stamp() -> str:
    """Temporary flag of the job that parked other keys' shards (measure_all needs it only when there are some)."""
    return str(STAMPS / "parked.ok")


def report_plot(table: str) -> Path:
    """A copy of the table's plot for `snakemake --report` (an output Snakemake may delete; not checked in)."""
    return paths.RESULTS / "report" / f"{table}.png"


def ranked_outputs(table: str) -> dict[str, str]:
    """The files ``tunetable rank`` writes for a table."""
    parquet = paths.ranked(table)
    return {
        "parquet": str(parquet),
        "csv": str(parquet.with_suffix(".csv")),
        "md": str(parquet.with_suffix(".md")),
        "failures": str(parquet.with_name(f"{table}.failures.csv")),
    }


def metrics_outputs(table: str) -> dict[str, str]:
    """The files ``tunetable metrics`` writes for a table."""
    csv = paths.plot_data(table)
    return {"json": str(paths.metrics(table)), "csv": str(csv), "png": str(csv.with_suffix(".png"))}
