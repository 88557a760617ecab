"""Bad recordings (what replay serves) and bad ranked tables (what select and metrics read).

A recording is checked when it is loaded (readable parquet, the columns replay matches on, known
statuses, integer shapes, a finite positive median on every ok row); a ranked table holds only what
rank writes (integer shapes, config ids, finite positive medians and cuBLAS times). Anything else
is one error line naming the file (and the row), exit 2, and no shard, manifest or metrics file is
written.
"""

from __future__ import annotations

import json

import polars as pl
import pytest
from badinput_support import PROJECT_FILES, RECORDINGS, Case, Project, ids, make_project, run_cli
from result_rows import row, shard

REC = "data/recordings/h200_gemm_mma.parquet"
SIDECAR = "data/recordings/h200_gemm_mma.json"
RANKED = "results/ranked/gemm_mma.parquet"
MANIFEST = "manifests/gemm_mma.yaml"


def recording_project(tmp_path) -> Project:
    """The project's params, manifests and the committed recordings."""
    return make_project(tmp_path, files=(*PROJECT_FILES, *RECORDINGS))


def rewrite(change):
    """Rewrite the gemm_mma recording through polars (``change(frame) -> frame``)."""
    def mutate(p: Project) -> None:
        frame = pl.read_parquet(p.path(REC))
        change(frame).write_parquet(p.path(REC))
    return mutate


def first_ok(column: str, value):
    """Set ``column`` of the recording's first ok row."""
    def change(frame: pl.DataFrame) -> pl.DataFrame:
        first = frame.with_row_index("i").filter(pl.col("status") == "ok")["i"][0]
        return frame.with_columns(pl.when(pl.int_range(pl.len()) == first).then(pl.lit(value))
                                  .otherwise(pl.col(column)).alias(column))
    return change


def first_ok_samples(samples: list[float]):
    """Set samples_ms of the recording's first ok row (a list column: the row's whole list)."""
    def change(frame: pl.DataFrame) -> pl.DataFrame:
        first = frame.with_row_index("i").filter(pl.col("status") == "ok")["i"][0]
        column = frame["samples_ms"].to_list()
        column[first] = samples
        return frame.with_columns(pl.Series("samples_ms", column, dtype=frame.schema["samples_ms"]))
    return change


E_REC = r"error: data/recordings/h200_gemm_mma\.parquet"
RECORDING_CASES = [
    Case("truncated", lambda p: p.write(REC, p.path(REC).read_bytes()[:4000]), rf"{E_REC}: unreadable recording: .*"),
    Case("garbage", lambda p: p.write(REC, b"PAR1 not really"), rf"{E_REC}: unreadable recording: .*"),
    Case("missing", lambda p: p.path(REC).unlink(),
         rf"{E_REC}: no such recording \(make one with `tunetable record` on a GPU\)"),
    Case("sidecar-missing", lambda p: p.path(SIDECAR).unlink(),
         r"error: data/recordings/h200_gemm_mma\.json: recording has no provenance sidecar"),
    Case("sidecar-malformed", lambda p: p.write(SIDECAR, "{ not json"),
         r"error: data/recordings/h200_gemm_mma\.json: line 1: malformed JSON: .*"),
    Case("sidecar-not-utf8", lambda p: p.write(SIDECAR, b'{"device": "H\xff200"}'),
         r"error: data/recordings/h200_gemm_mma\.json: line 1: not UTF-8 text \(byte \d+\)"),
    Case("nan-median-on-an-ok-row", rewrite(first_ok("median_ms", float("nan"))),
         rf"{E_REC}: row \d+: status ok but median_ms nan is not a finite positive time \(M=\d+, config c[0-9a-f]+\)"),
    Case("negative-median-on-an-ok-row", rewrite(first_ok("median_ms", -0.5)),
         rf"{E_REC}: row \d+: status ok but median_ms -0\.5 is not a finite positive time .*"),
    Case("nan-sample-on-an-ok-row", rewrite(first_ok_samples([0.5, float("nan"), 0.6])),
         rf"{E_REC}: row \d+: status ok but samples_ms holds a value that is not a finite positive time "
         r"\(M=\d+, config c[0-9a-f]+\)"),
    Case("zero-sample-on-an-ok-row", rewrite(first_ok_samples([0.5, 0.0])),
         rf"{E_REC}: row \d+: status ok but samples_ms holds a value that is not a finite positive time .*"),
    Case("null-sample-on-an-ok-row", rewrite(first_ok_samples([0.5, None])),
         rf"{E_REC}: row \d+: status ok but samples_ms holds a value that is not a finite positive time .*"),
    Case("unknown-status", rewrite(first_ok("status", "great")),
         rf"{E_REC}: row \d+: status 'great' is not one of ok, build, verify, launch, timeout, missing"),
    Case("lacks-a-column", rewrite(lambda f: f.drop("kernel_hash")), rf"{E_REC}: recording lacks columns kernel_hash"),
    Case("shape-as-floats", rewrite(lambda f: f.with_columns(pl.col("M").cast(pl.Float64))),
         rf"{E_REC}: column M must hold positive integers"),
]


@pytest.mark.parametrize("case", RECORDING_CASES, ids=ids(RECORDING_CASES))
def test_bad_recording_writes_no_shard(tmp_path, case):
    project = recording_project(tmp_path)
    case.mutate(project)
    project.freeze()
    run_cli(project, "bench", "--table", "gemm_mma", "--backend", "replay", "--shape", "1,4096,4096",
            "--results-root", "results").expect_error(case.error)


def ranked_project(tmp_path) -> Project:
    """params, manifests and a ranked table made by rank from two real shards (M=1, M=8)."""
    project = make_project(tmp_path)
    paths = []
    for m in (1, 8):
        rows = [row(m=m, config="ca", median=1.0 + m), row(m=m, config="cb", median=0.5 + m),
                row(m=m, config="cublas", median=2.0 + m)]
        path = project.path(f"shards/M{m}.pkl")
        path.parent.mkdir(parents=True, exist_ok=True)
        paths.append(str(shard(path, rows).relative_to(project.root)))
    project.freeze()
    run_cli(project, "rank", "--table", "gemm_mma", "--out", RANKED, *paths).expect_ok(
        new=[r"shards/.*", r"results/ranked/.*"])
    return project


def ranked(change):
    """Rewrite the ranked parquet through polars (``change(frame) -> frame``)."""
    def mutate(p: Project) -> None:
        frame = pl.read_parquet(p.path(RANKED))
        change(frame).write_parquet(p.path(RANKED))
    return mutate


def row_value(column: str, value, *, at: int = 1):
    """Set ``column`` of ranked row ``at``."""
    return lambda f: f.with_columns(pl.when(pl.int_range(pl.len()) == at).then(pl.lit(value, dtype=f.schema[column]))
                                    .otherwise(pl.col(column)).alias(column))


E_RANKED = r"error: results/ranked/gemm_mma\.parquet"
TIME_PROBLEM = r"is not a finite positive time"
RANKED_CASES = [
    Case("nan-median", ranked(row_value("median_ms", float("nan"))),
         rf"{E_RANKED}: row 1: median_ms {TIME_PROBLEM} \(median_ms nan\) \(M=1, N=4096, K=4096, config_id=ca\); "
         r"rank wrote no such row: rank the shards again"),
    Case("infinite-median", ranked(row_value("median_ms", float("inf"))),
         rf"{E_RANKED}: row 1: median_ms {TIME_PROBLEM} \(median_ms inf\) .*"),
    Case("zero-median", ranked(row_value("median_ms", 0.0)), rf"{E_RANKED}: row 1: median_ms {TIME_PROBLEM} .*"),
    Case("negative-cublas", ranked(row_value("cublas_ms", -3.0)),
         rf"{E_RANKED}: row 1: cublas_ms {TIME_PROBLEM} \(cublas_ms -3\.0\) .*"),
    Case("null-config-id", ranked(row_value("config_id", None)), rf"{E_RANKED}: row 1: config_id is missing .*"),
    Case("shape-as-floats", ranked(lambda f: f.with_columns(pl.col("M").cast(pl.Float64))),
         rf"{E_RANKED}: column M is Float64, not integers"),
    Case("median-as-text", ranked(lambda f: f.with_columns(pl.col("median_ms").cast(pl.Utf8))),
         rf"{E_RANKED}: column median_ms is String, not numbers"),
    Case("lacks-median", ranked(lambda f: f.drop("median_ms")), rf"{E_RANKED}: missing column median_ms"),
    Case("garbage", lambda p: p.write(RANKED, b"not parquet"), rf"{E_RANKED}: not a ranked parquet \(.*\)"),
    Case("truncated", lambda p: p.write(RANKED, p.path(RANKED).read_bytes()[:300]),
         rf"{E_RANKED}: not a ranked parquet .*"),
    Case("empty-file", lambda p: p.write(RANKED, b""), rf"{E_RANKED}: not a ranked parquet .*"),
]


@pytest.mark.parametrize("case", RANKED_CASES, ids=ids(RANKED_CASES))
def test_bad_ranked_table_never_reaches_the_manifest(tmp_path, case):
    project = ranked_project(tmp_path)
    case.mutate(project)
    project.freeze()
    run_cli(project, "select", "--table", "gemm_mma", "--ranked", RANKED, "--out", MANIFEST).expect_error(case.error)


def test_metrics_read_the_same_checked_ranked_table(tmp_path):
    project = ranked_project(tmp_path)
    ranked(row_value("median_ms", float("nan")))(project)
    project.freeze()
    run_cli(project, "metrics", "--table", "gemm_mma", "--ranked", RANKED, "--json", "m.json", "--csv", "m.csv",
            "--png", "m.png", "shards/M1.pkl").expect_error(rf"{E_RANKED}: row 1: median_ms {TIME_PROBLEM} .*")


def test_a_recording_with_bad_json_provenance_names_the_line(tmp_path):
    project = recording_project(tmp_path)
    text = json.dumps(json.loads(project.text(SIDECAR)), indent=2)
    project.write(SIDECAR, text.replace('"device"', '"device" "', 1))
    project.freeze()
    run_cli(project, "bench", "--table", "gemm_mma", "--backend", "replay", "--shape", "1,4096,4096").expect_error(
        r"error: data/recordings/h200_gemm_mma\.json: line \d+: malformed JSON: .*")
