"""Every external input read and checked in one place (tunetable.inputs): the defects of issue 47.

Each test names one kind of input a user really passes (a Kernel Tuner cache, a profiler trace, a
shapes CSV, a recording, a selector manifest, ``--query`` / ``--filter``) that once gave a file
written outside the output folder, silently wrong data, or a traceback. Each must now be one
error line naming the file and the place, exit 2, and nothing written (badinput_support's checks).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import polars as pl
import pytest
from badinput_support import PROJECT_FILES, RECORDINGS, REPO, Project, make_project, run_cli, snapshot
from result_rows import row, shard

from tunetable.errors import TuneTableError

REC = "data/recordings/h200_gemm_mma.parquet"
SIDECAR = "data/recordings/h200_gemm_mma.json"
E_REC = r"error: data/recordings/h200_gemm_mma\.parquet"


def kt_document(entries: dict[str, dict], *, shape=(64, 4096, 4096), keys=("BLOCK_M", "BLOCK_N")) -> dict:
    """A Kernel Tuner cache document (the layout KT 1.x writes)."""
    return {"device_name": "NVIDIA H200", "kernel_name": "gemm_mma", "problem_size": list(shape),
            "tune_params_keys": list(keys), "tune_params": {}, "objective": "time", "cache": entries}


def good_entry(**params) -> dict:
    """One measured KT entry."""
    return {"BLOCK_M": 64, "BLOCK_N": 64, **params, "time": 0.5, "times": [0.5, 0.5, 0.5], "compile_time": 1.0}


def kt_project(tmp_path: Path, data: str | bytes) -> Project:
    """An empty project holding one cache ``run.json`` (nested two levels below tmp_path, so escapes show)."""
    project = make_project(tmp_path / "a" / "b", files=())
    project.root.mkdir(parents=True)
    project.write("run.json", data)
    project.freeze()
    return project


def kt_import(project: Project):
    """``kt import run.json --family gemm_mma --out out``."""
    return run_cli(project, "kt", "import", "run.json", "--family", "gemm_mma", "--out", "out")


# -- 1. a shape key with a path in its value --------------------------------------------------------------

def test_kt_import_never_writes_outside_out(tmp_path):
    document = kt_document({"64,64,x": good_entry(M="/../../../../escaped")}, keys=("BLOCK_M", "BLOCK_N", "M"))
    before = snapshot(tmp_path)
    project = kt_project(tmp_path, json.dumps(document))
    before = {k: v for k, v in snapshot(tmp_path).items()}
    kt_import(project).expect_error(r"error: run\.json: tune_params_keys\[2\]: 'M' is not a tunable of family "
                                    r"gemm_mma .*")
    assert snapshot(tmp_path) == before


# -- 3. problem sizes and tunables of the wrong type or range ---------------------------------------------

@pytest.mark.parametrize("m", [-64, 0, True, 2**40, "64", 64.0])
def test_kt_import_refuses_a_bad_problem_size(tmp_path, m):
    project = kt_project(tmp_path, json.dumps(kt_document({"64,64": good_entry()}, shape=(m, 4096, 4096))))
    kt_import(project).expect_error(r"error: run\.json: problem_size: M must be .*")


@pytest.mark.parametrize("value", ["64", True, -1, 2**40, 64.5, None])
def test_kt_import_refuses_a_tunable_that_is_not_an_int32(tmp_path, value):
    project = kt_project(tmp_path, json.dumps(kt_document({"k": good_entry(BLOCK_M=value)})))
    kt_import(project).expect_error(r"error: run\.json: cache\[k\]: BLOCK_M must be .*")


# -- 7. KT caches that gave tracebacks --------------------------------------------------------------------

KT_TRACEBACKS = {
    "deeply-nested": ('{"a": ' * 100_000 + "1" + "}" * 100_000, r"error: run\.json: nested deeper than 64 levels"),
    "huge-int": (json.dumps(kt_document({"64,64": good_entry()}))[:-1] + ', "x": ' + "9" * 5000 + "}",
                 r"error: run\.json: an integer of 5000 digits \(at most 20\)"),
    "not-utf8": (b'{"kernel_name": "g\xff"}', r"error: run\.json: line 1: not UTF-8 text \(byte \d+\)"),
    "cache-is-a-list": (json.dumps({**kt_document({}), "cache": [good_entry()]}),
                        r"error: run\.json: cache: must be a mapping of cache keys to entries, got a list"),
    "entry-not-a-mapping": (json.dumps(kt_document({"64,64": [1, 2]})),
                            r"error: run\.json: cache\[64,64\]: an entry must be a mapping, got a list"),
    "unhashable-value": (json.dumps(kt_document({"64,64": good_entry(BLOCK_M=[64])})),
                         r"error: run\.json: cache\[64,64\]: BLOCK_M must be an integer, got \[64\]"),
    "keys-not-a-list": (json.dumps({**kt_document({"64,64": good_entry()}), "tune_params_keys": "BLOCK_M"}),
                        r"error: run\.json: tune_params_keys: must be a list of names, got a str"),
}


@pytest.mark.parametrize("name", sorted(KT_TRACEBACKS))
def test_kt_import_bad_cache_is_one_line(tmp_path, name):
    data, error = KT_TRACEBACKS[name]
    kt_import(kt_project(tmp_path, data)).expect_error(error)


def test_kt_import_of_a_good_cache_still_writes_its_shard(tmp_path):
    project = kt_project(tmp_path, json.dumps(kt_document({"64,64": good_entry()})))
    kt_import(project).expect_ok(new=[r"out/M64_N4096_K4096\.(pkl|journal\.jsonl)"])


# -- 4. and 7. shapes import: int32 and nesting -----------------------------------------------------------

def trace_of(*dims: list[list[int]]) -> str:
    """A torch.profiler chrome trace with one aten::mm per dims pair."""
    events = [{"name": "aten::mm", "ph": "X", "ts": 10.0 * i, "dur": 1.0, "pid": 1, "tid": 1,
               "args": {"Input Dims": list(pair)}} for i, pair in enumerate(dims)]
    return json.dumps({"traceEvents": events})


def shapes_project(tmp_path: Path, name: str, data: str) -> Project:
    """A project holding one workload file."""
    project = make_project(tmp_path, files=())
    project.root.mkdir(parents=True)
    project.write(name, data)
    project.freeze()
    return project


def test_shapes_import_refuses_m_beyond_int32(tmp_path):
    project = shapes_project(tmp_path, "trace.json", trace_of([[2**31, 64], [64, 128]]))
    run_cli(project, "shapes", "import", "trace.json", "--out", "shapes.csv").expect_error(
        r"error: trace\.json: traceEvents\[0\]: M must be in 1\.\.2147483647, got 2147483648")


def test_shapes_import_refuses_a_flattened_m_beyond_int32(tmp_path):
    events = [{"name": "aten::linear", "ph": "X", "ts": 0.0, "dur": 1.0, "pid": 1, "tid": 1,
               "args": {"Input Dims": [[65536, 65536, 64], [128, 64]]}}]
    project = shapes_project(tmp_path, "trace.json", json.dumps({"traceEvents": events}))
    run_cli(project, "shapes", "import", "trace.json", "--out", "shapes.csv").expect_error(
        r"error: trace\.json: traceEvents\[0\]: M must be in 1\.\.2147483647, got 4294967296")


@pytest.mark.parametrize("name", ["trace.json", "shapes.csv"])
def test_shapes_import_deeply_nested_is_one_line(tmp_path, name):
    project = shapes_project(tmp_path, name, "[" * 50_000 + "]" * 50_000)
    run_cli(project, "shapes", "import", name, "--out", "out.csv").expect_error(
        rf"error: {name.replace('.', '[.]')}: nested deeper than 64 levels")


def test_shapes_import_huge_int_is_one_line(tmp_path):
    project = shapes_project(tmp_path, "trace.json", trace_of([[64, 64], [64, 128]]).replace("128", "1" * 5000))
    run_cli(project, "shapes", "import", "trace.json", "--out", "out.csv").expect_error(
        r"error: trace\.json: an integer of 5000 digits \(at most 20\)")


def test_params_shapes_list_deeply_nested_is_one_line(tmp_path):
    project = make_project(tmp_path)
    project.write("shapes/deep.csv", "[" * 50_000 + "]" * 50_000)
    project.edit("params.yaml", "    shapes:\n      NK:", "    shapes:\n      list: shapes/deep.csv\n      NK:")
    project.freeze()
    outcome = run_cli(project, "grid", "--table", "gemm_mma", "--dry-run")
    outcome.expect_error(r"error: params\.yaml: tables\.gemm_mma\.shapes\.list: .*shapes/deep\.csv: "
                         r"nested deeper than 64 levels")


# -- 2. and 7. recordings: validated as a whole before anything is served -----------------------------

def recording_project(tmp_path) -> Project:
    """The project's params, manifests and the committed recordings."""
    return make_project(tmp_path, files=(*PROJECT_FILES, *RECORDINGS))


def replay(project: Project):
    """Replay one shape of gemm_mma from its recording."""
    return run_cli(project, "bench", "--table", "gemm_mma", "--backend", "replay", "--shape", "1,4096,4096",
                   "--results-root", "results")


def test_a_duplicated_measurement_row_stops_replay(tmp_path):
    project = recording_project(tmp_path)
    frame = pl.read_parquet(project.path(REC))
    first = frame.filter(pl.col("M") == 1).head(1).with_columns(pl.col("median_ms") / 2)
    pl.concat([frame, first]).write_parquet(project.path(REC))
    project.freeze()
    replay(project).expect_error(rf"{E_REC}: row {frame.height}: measurement M=1 N=4096 K=4096 config c[0-9a-f]+ "
                                 rf"kernel [0-9a-f]+ is also row \d+ \(a recording holds each measurement once\)")


def test_a_string_m_column_is_one_line(tmp_path):
    project = recording_project(tmp_path)
    frame = pl.read_parquet(project.path(REC))
    frame.with_columns(pl.col("M").cast(pl.String)).write_parquet(project.path(REC))
    project.freeze()
    replay(project).expect_error(rf"{E_REC}: column M must hold positive integers")


def test_a_recording_that_disagrees_with_its_sidecar_stops_replay(tmp_path):
    project = recording_project(tmp_path)
    frame = pl.read_parquet(project.path(REC))
    frame.filter(pl.int_range(pl.len()) != 5).write_parquet(project.path(REC))   # one row dropped
    sidecar = json.loads(project.text(SIDECAR))   # its hash made to agree: the row count still tells
    sidecar["parquet_sha256"] = hashlib.sha256(project.path(REC).read_bytes()).hexdigest()
    project.write(SIDECAR, json.dumps(sidecar))
    project.freeze()
    replay(project).expect_error(rf"{E_REC}: holds {frame.height - 1} rows, its sidecar "
                                 r"h200_gemm_mma\.json says \d+")


def test_a_recording_whose_sidecar_hash_differs_stops_replay(tmp_path):
    project = recording_project(tmp_path)
    sidecar = json.loads(project.text(SIDECAR))
    sidecar["parquet_sha256"] = "0" * 64
    project.write(SIDECAR, json.dumps(sidecar))
    project.freeze()
    replay(project).expect_error(rf"{E_REC}: sha256 [0-9a-f]+ does not match the 0+ its sidecar "
                                 r"h200_gemm_mma\.json records")


def test_a_served_recording_whose_sidecar_records_no_hash_stops_replay(tmp_path):
    project = recording_project(tmp_path)
    sidecar = json.loads(project.text(SIDECAR))
    del sidecar["parquet_sha256"]
    project.write(SIDECAR, json.dumps(sidecar))
    project.freeze()
    replay(project).expect_error(rf"{E_REC}: its sidecar h200_gemm_mma\.json records no parquet_sha256: .+")


@pytest.mark.parametrize("sidecar", sorted((REPO / "data" / "recordings").glob("*.json")), ids=lambda p: p.name)
def test_every_committed_recording_carries_its_own_sha256(sidecar):
    recorded = json.loads(sidecar.read_text())["parquet_sha256"]
    assert recorded == hashlib.sha256(sidecar.with_suffix(".parquet").read_bytes()).hexdigest()


# -- 8. a corrupt recording read while Snakemake plans: one line naming the recording ---------------------

def test_a_corrupt_recording_at_plan_time_names_the_recording(tmp_path):
    from tunetable.inputs import read_recording_columns

    path = tmp_path / "rec.parquet"
    path.write_bytes(b"PAR1 not a parquet file PAR1")
    with pytest.raises(TuneTableError, match=rf"^{path}: unreadable recording: "):
        read_recording_columns(path, columns=["M"])


# -- 5. grid --filter with a value no configuration has ---------------------------------------------------

def test_grid_filter_with_an_absent_value_leaves_the_grid_file(tmp_path):
    project = make_project(tmp_path)
    assert run_cli(project, "grid", "--table", "gemm_mma", "--out", "grid.json").code == 0
    project.freeze()
    run_cli(project, "grid", "--table", "gemm_mma", "--out", "grid.json", "--filter", "BLOCK_M=12345").expect_error(
        r"error: --filter: BLOCK_M=12345 matches no configuration of table gemm_mma \(its values: .*\)")


def test_grid_filter_that_leaves_no_valid_configuration_leaves_the_grid_file(tmp_path):
    # Some configurations have THREADS=64, but the family's rules prune every one of them.
    project = make_project(tmp_path)
    assert run_cli(project, "grid", "--table", "gemm_mma", "--out", "grid.json").code == 0
    project.freeze()
    run_cli(project, "grid", "--table", "gemm_mma", "--out", "grid.json", "--filter", "THREADS=64").expect_error(
        r"error: --filter: THREADS=64 leaves no configuration of table gemm_mma: \d+ matched, every one pruned .*")


# -- 6. profile: an all-NaN metric, a zero-row frame ------------------------------------------------------

def test_profile_of_an_all_nan_metric_writes_no_manifest(tmp_path):
    project = make_project(tmp_path, files=())
    project.root.mkdir(parents=True)
    shard(project.path("s.pkl"), [row(m=64, config="ca", median=None, status="ok") | {"met (ms)": float("nan")},
                                  row(m=64, config="cb", median=None, status="ok") | {"met (ms)": float("nan")}])
    project.freeze()
    run_cli(project, "profile", "s.pkl", "-o", "best.yaml").expect_error(
        r"error: s\.pkl: metric 'met \(ms\)' has no finite value in any row")


def test_profile_of_a_zero_row_kbench_frame_is_one_line(tmp_path):
    import pickle

    import pandas as pd

    project = make_project(tmp_path, files=())
    project.root.mkdir(parents=True)
    frame = pd.DataFrame({"mesh_idx": pd.Series([], dtype="int64"), "name": pd.Series([], dtype="object"),
                          "met (ms)": pd.Series([], dtype="float64"), "iters": pd.Series([], dtype="int64"),
                          "spec": pd.Series([], dtype="object")})
    project.write("empty.pkl", pickle.dumps({"name": "x", "file": "x", "merged_df": frame}))
    project.freeze()
    run_cli(project, "profile", "empty.pkl").expect_error(r"error: empty\.pkl: no rows to profile")


# -- 7. --query: nesting and length -----------------------------------------------------------------------

@pytest.mark.parametrize("query", ["(" * 5000 + "M > 1" + ")" * 5000, "~" * 20_000 + "M", "M > 1 & " * 12_500 + "M",
                                   "(" * 1000 + "M > 1" + ")" * 1000, "~" * 4000 + "M", "-" * 4000 + "M > 1"],
                         ids=["nested-brackets", "nested-not", "100k-chars", "1000-brackets", "4000-nots",
                              "4000-minus"])
def test_profile_query_bombs_are_one_line(tmp_path, query):
    project = make_project(tmp_path)
    project.freeze()
    run_cli(project, "profile", "manifests/gemm_mma.yaml", "--merge", "--query", query).expect_error(
        r"error: --query: (query of \d+ characters \(at most 4096\)|query nested too deeply"
        r"|query nested deeper than 64 brackets)")


# -- 7. the selector's manifest and data file: integers beyond 4,300 digits ---------------------------------

@pytest.mark.parametrize("value", ["0x" + "f" * 5000, "0b" + "1" * 20_000, "9" * 5000])
def test_selector_manifest_with_a_huge_int_is_one_line(tmp_path, value):
    project = make_project(tmp_path)
    text = project.text("manifests/gemm_selector.yaml")
    first = text.index("  candidates: ", text.index("\ndata:")) + len("  candidates: ")
    end = text.index("\n", first)
    project.write("manifests/gemm_selector.yaml", text[:first] + value + text[end:])
    project.freeze()
    line = text[:first].count("\n") + 1
    run_cli(project, "codegen", "--all", "--check").expect_error(
        r"error: manifests/gemm_selector\.yaml: (data\.candidates: an integer of \d+ bits \(at most 64\)|"
        rf"line {line}: malformed YAML: Exceeds the limit \(4300 digits\).*)")


def test_selector_data_with_a_huge_int_is_one_line(tmp_path):
    """A 5,000-digit integer in the selector's data file (JSON): one line naming the file, before any sha256."""
    project = make_project(tmp_path)
    text = project.text("kernels/data/gemm_selector.json")
    first = text.index('"M":') + len('"M":')
    end = first + len(text[first:]) - len(text[first:].lstrip("0123456789"))
    project.write("kernels/data/gemm_selector.json", text[:first] + "9" * 5000 + text[end:])
    project.freeze()
    run_cli(project, "codegen", "--all", "--check").expect_error(r"error: kernels/data/gemm_selector\.json: .+")


@pytest.mark.slow
def test_a_corrupt_recording_under_snakemake_is_one_line_naming_it(tmp_path):
    """The Snakefile's plan reads the recording when shards are missing: a corrupt or duplicated one is one line."""
    from pipeline_repo import make_project as make_repo
    from pipeline_repo import small_table
    from pipeline_repo import snakemake as run_snakemake

    root = make_repo(tmp_path / "project", remote=None, params_edit=small_table)
    recording = root / REC
    good = recording.read_bytes()
    recording.write_bytes(b"PAR1 this is not a parquet file PAR1")
    done = run_snakemake("--cores", "2", cwd=root, check=False)
    assert done.returncode != 0
    assert "Traceback" not in done.output and "ComputeError" not in done.output, done.output[-3000:]
    errors = [line for line in done.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {REC}: unreadable recording: "), done.output[-3000:]

    recording.write_bytes(good)
    frame = pl.read_parquet(recording)
    pl.concat([frame, frame.filter(pl.col("M") == 1).head(1)]).write_parquet(recording)
    done = run_snakemake("--cores", "2", cwd=root, check=False)
    errors = [line for line in done.output.splitlines() if line.startswith("error: ")]
    assert done.returncode != 0 and "Traceback" not in done.output, done.output[-3000:]
    assert len(errors) == 1 and errors[0].startswith(f"error: {REC}: row {frame.height}: measurement M=1 "), errors
    assert not list((root / "results").rglob("*.pkl")) if (root / "results").is_dir() else True


# -- found by the property-based suite: a trace event's thread must be a plain value ----------------------

@pytest.mark.parametrize("field", ["pid", "tid"])
def test_a_trace_event_whose_thread_is_a_list_is_one_line(tmp_path, field):
    project = make_project(tmp_path)
    event = {"name": "aten::mm", "ph": "X", "ts": 0.0, "dur": 5.0, "pid": 1, "tid": 1,
             "args": {"Input Dims": [[8, 4096], [4096, 4096]]}}
    event[field] = []
    project.write("trace.json", json.dumps({"traceEvents": [event]}))
    project.freeze()
    run_cli(project, "shapes", "import", "trace.json", "--out", "shapes.csv").expect_error(
        r"error: trace\.json: traceEvents\[0\]: pid / tid must be integers or text")
