"""Property-based tests (Hypothesis) over every reader of external input: arbitrary mutations of real files.

Each reader gets real inputs (the committed recording and its sidecar, the committed manifests and
params.yaml, a Kernel Tuner cache, a profiler trace and a shapes CSV of the kind the tests elsewhere
use) mutated at random: a value anywhere in the JSON / YAML tree replaced by any JSON value or
deleted, the text truncated, bytes inserted, nesting added; a recording's cell set to null, NaN, a
negative or huge number, a string, a row duplicated or dropped. The contract, for every example:

- exit 0, no traceback, only the expected outputs written, and the output correct (it reads back
  through the project's own reader); or
- exit 2 (1 for a stale ``--check``), exactly one ``error:`` line, no traceback, every file of the
  project byte-identical, nothing written anywhere outside the project.

The default run draws a few examples per reader (``FAST``); the slow run many more (``SLOW``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from badinput_support import PROJECT_FILES, Outcome, Project, make_project, run_cli, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tunetable.shapes import read_workload
from tunetable.yamlio import load_yaml

FAST = settings(max_examples=8, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SLOW = settings(max_examples=40, deadline=None, derandomize=False, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

REC = "data/recordings/h200_gemm_mma.parquet"
SIDECAR = "data/recordings/h200_gemm_mma.json"
MANIFEST = "manifests/gemm_mma.yaml"
SELECTOR = "manifests/gemm_selector.yaml"

# -- strategies ----------------------------------------------------------------------------------------------

LEAVES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                   st.sampled_from([0, -1, 1, 2**31 - 1, 2**31, 2**63, -(2**63) - 1]),
                   st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
                   st.sampled_from(["../../x", "/etc/passwd", "M", "", "\x00", "ok", "NaN", "1e999"]))
JSON_VALUES = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                           st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                           max_leaves=6)


def node_paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys / indexes) to a node of a parsed JSON / YAML value, the root included."""
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += node_paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += node_paths(child, (*prefix, index))
    return found


def replaced(value: Any, path: tuple, new: Any, *, delete: bool) -> Any:
    """A copy of ``value`` with the node at ``path`` replaced by ``new`` (or deleted)."""
    if not path:
        return new
    copy = list(value) if isinstance(value, list) else dict(value)
    head, rest = path[0], path[1:]
    if not rest and delete:
        del copy[head]
    else:
        copy[head] = replaced(value[head], rest, new, delete=delete)
    return copy


@st.composite
def tree_mutation(draw: st.DrawFn, document: Any) -> Any:
    """``document`` with one node replaced by any JSON value, or deleted."""
    paths = node_paths(document)
    path = draw(st.sampled_from(paths))
    delete = bool(path) and draw(st.booleans())
    return replaced(document, path, draw(JSON_VALUES), delete=delete)


@st.composite
def text_mutation(draw: st.DrawFn, text: str) -> bytes:
    """``text`` (UTF-8) truncated, with bytes inserted or replaced, nested deeply, or a huge number spliced in."""
    data = text.encode("utf-8")
    kind = draw(st.sampled_from(["truncate", "insert", "replace", "nest", "number", "invalid-utf8"]))
    at = draw(st.integers(min_value=0, max_value=len(data)))
    if kind == "truncate":
        return data[:at]
    if kind == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    if kind == "replace":
        return data[:at] + draw(st.sampled_from([b",", b"]", b"}", b"[", b"{", b":", b'"', b"\n", b"-", b"9"])) \
            + data[at + 1:]
    if kind == "nest":
        depth = draw(st.integers(min_value=60, max_value=5000))
        return data[:at] + b"[" * depth + b"1" + b"]" * depth + data[at:]
    if kind == "number":
        number = draw(st.sampled_from([b"9" * 5000, b"0x" + b"f" * 5000, b"1e999", b"-0", b"NaN"]))
        return data[:at] + number + data[at:]
    return data[:at] + b"\xff\xfe" + data[at:]


def as_json(draw: st.DrawFn, document: Any) -> bytes:
    """A mutation of ``document`` as JSON bytes: in the tree, or in its text."""
    if draw(st.booleans()):
        return json.dumps(draw(tree_mutation(document))).encode("utf-8")
    return draw(text_mutation(json.dumps(document, indent=1)))


# -- the contract --------------------------------------------------------------------------------------------

def check_contract(outcome: Outcome, *, outside: Path, outside_before: dict[str, str], new: list[str],
                   changed: tuple[str, ...] = (), on_success: Callable[[Project], None] | None = None,
                   codes: tuple[int, ...] = (2,)) -> None:
    """Exit 0 with only the expected outputs (and ``on_success`` holding), or one error line and nothing written."""
    assert "Traceback" not in outcome.out + outcome.err, outcome.err[-3000:]
    if outcome.code == 0:
        outcome.expect_ok(changed=changed, new=new)
        if on_success is not None:
            on_success(outcome.project)
    else:
        assert outcome.code in codes, f"exit {outcome.code}: {outcome.err[-2000:]}"
        outcome.expect_error(r"error: .+", code=outcome.code)
    assert snapshot(outside) == outside_before, "something was written outside the project"


class Sandbox:
    """A fresh project per example (Hypothesis reuses a test's fixtures across examples), with a watched outside."""

    def __init__(self, files: tuple[str, ...] = ()):
        self.files = files

    def __enter__(self) -> tuple[Project, Path]:
        self._dir = tempfile.mkdtemp(prefix="tt-prop-")
        top = Path(self._dir)
        (top / "outside").mkdir()
        (top / "outside" / "keep.txt").write_text("untouched\n")
        project = make_project(top / "a" / "b", files=self.files)
        project.root.mkdir(parents=True, exist_ok=True)
        return project, top

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


def both(body: Callable[..., None], **strategies: Any) -> tuple[Callable[..., None], Callable[..., None]]:
    """The property under the default run's budget, and a slow twin (its own wrapper) with many more examples."""
    fast = FAST(given(**strategies)(body))
    slow = pytest.mark.slow(SLOW(given(**strategies)(body)))
    return fast, slow


@st.composite
def json_mutation(draw: st.DrawFn, document: Any) -> bytes:
    """A mutation of ``document`` as JSON bytes (``as_json``)."""
    return as_json(draw, document)


# -- Kernel Tuner caches: kt import ---------------------------------------------------------------------------

KT_CACHE = {
    "device_name": "NVIDIA H200", "kernel_name": "gemm_mma", "problem_size": [64, 4096, 4096],
    "tune_params_keys": ["BLOCK_M", "BLOCK_N"], "tune_params": {"BLOCK_M": [64], "BLOCK_N": [64, 128]},
    "objective": "time",
    "cache": {
        "64,64": {"BLOCK_M": 64, "BLOCK_N": 64, "time": 0.5, "times": [0.5, 0.4, 0.6], "compile_time": 1.0,
                  "num_regs": 96, "timestamp": "2026-12-01"},
        "64,128": {"BLOCK_M": 64, "BLOCK_N": 128, "time": "RuntimeFailedConfig", "__error__": "RuntimeFailedConfig"},
    },
}


def _kt_ok(project: Project) -> None:
    """Every shard kt import wrote reads back, its shape in the file name matching its rows."""
    from tunetable.resultset import load_file

    for shard in (project.root / "out").glob("*.pkl"):
        frame = load_file(path=shard).frame
        m, n, k = frame["M"][0], frame["N"][0], frame["K"][0]
        assert shard.name == f"M{m}_N{n}_K{k}.pkl"
        assert all(1 <= v <= 2**31 - 1 for v in (m, n, k))


def _kt_import(data: st.DataObject) -> None:
    mutated = data.draw(json_mutation(KT_CACHE))
    with Sandbox() as (project, top):
        project.write("run.json", mutated)
        project.freeze()
        outside = snapshot(top / "outside")
        outcome = run_cli(project, "kt", "import", "run.json", "--family", "gemm_mma", "--out", "out")
        check_contract(outcome, outside=top / "outside", outside_before=outside,
                       new=[r"out/M\d+_N\d+_K\d+\.(pkl|journal\.jsonl)"], on_success=_kt_ok)


test_kt_import_contract, test_kt_import_contract_slow = both(_kt_import, data=st.data())


# -- profiler traces and shapes CSVs: shapes import ------------------------------------------------------------

TRACE = {"traceEvents": [
    {"name": "aten::linear", "ph": "X", "ts": 0.0, "dur": 10.0, "pid": 1, "tid": 1,
     "args": {"Input Dims": [[8, 4096], [14336, 4096], [14336]]}},
    {"name": "aten::addmm", "ph": "X", "ts": 1.0, "dur": 5.0, "pid": 1, "tid": 1,
     "args": {"Input Dims": [[14336], [8, 4096], [4096, 14336]]}},
    {"name": "aten::bmm", "ph": "X", "ts": 20.0, "dur": 5.0, "pid": 1, "tid": 1,
     "args": {"Input Dims": [[4, 64, 128], [4, 128, 64]]}},
    {"name": "aten::mm", "ph": "X", "ts": 30.0, "dur": 5.0, "pid": 1, "tid": 2,
     "args": {"Input Dims": [[1, 4096], [4096, 4096]]}},
]}
SHAPES_CSV = "M,N,K,count\n1,4096,4096,3\n# a comment\n\n128,14336,4096\n"


def _shapes_ok(project: Project) -> None:
    """What shapes import wrote reads back through the project's CSV reader (int32 values, counts)."""
    shapes = read_workload(project.root / "shapes.csv")
    assert shapes and all(1 <= v <= 2**31 - 1 for s in shapes for v in (*s.shape, s.count))


def _shapes_import(data: st.DataObject) -> None:
    trace = data.draw(st.booleans())
    if trace:
        mutated = data.draw(json_mutation(TRACE))
    else:
        mutated = data.draw(text_mutation(SHAPES_CSV))
    name = "trace.json" if trace else "workload.csv"
    with Sandbox() as (project, top):
        project.write(name, mutated)
        project.freeze()
        outside = snapshot(top / "outside")
        outcome = run_cli(project, "shapes", "import", name, "--out", "shapes.csv")
        check_contract(outcome, outside=top / "outside", outside_before=outside, new=[r"shapes\.csv"],
                       on_success=_shapes_ok)


test_shapes_import_contract, test_shapes_import_contract_slow = both(_shapes_import, data=st.data())


# -- recordings and their sidecars: replay ---------------------------------------------------------------------

CELL_VALUES = st.one_of(st.none(), st.sampled_from([float("nan"), float("inf"), -1.0, 0.0, 1e300, -64, 0, 2**40]),
                        st.text(max_size=6))
COLUMNS = ("M", "N", "K", "config_id", "kernel_hash", "table", "status", "median_ms")


@st.composite
def recording_mutation(draw: st.DrawFn, frame: pl.DataFrame) -> pl.DataFrame:
    """The recording with one cell changed (any type), a row duplicated or dropped, or a column dropped / retyped."""
    kind = draw(st.sampled_from(["cell", "duplicate", "drop-row", "drop-column", "retype"]))
    shape_rows = frame.with_row_index("i").filter((pl.col("M") == 1) & (pl.col("N") == 4096) & (pl.col("K") == 4096))
    row = draw(st.sampled_from(shape_rows["i"].to_list()))
    column = draw(st.sampled_from(COLUMNS))
    if kind == "duplicate":
        return pl.concat([frame, frame.slice(row, 1)])
    if kind == "drop-row":
        return frame.filter(pl.int_range(pl.len()) != row)
    if kind == "drop-column":
        return frame.drop(column)
    if kind == "retype":
        return frame.with_columns(pl.col(column).cast(pl.String))
    value = draw(CELL_VALUES)
    target = frame
    if isinstance(value, str) or (value is not None and not frame.schema[column].is_numeric()):
        target, value = frame.with_columns(pl.col(column).cast(pl.String)), str(value)
    elif isinstance(value, float):
        target = frame.with_columns(pl.col(column).cast(pl.Float64))
    return target.with_columns(pl.when(pl.int_range(pl.len()) == row).then(pl.lit(value)).otherwise(pl.col(column))
                               .alias(column))


def _replay(data: st.DataObject) -> None:
    frame = _recording_frame()
    mutate_sidecar = data.draw(st.booleans())
    with Sandbox(files=(*PROJECT_FILES, REC, SIDECAR)) as (project, top):
        if mutate_sidecar:
            project.write(SIDECAR, data.draw(json_mutation(_sidecar())))
        else:
            data.draw(recording_mutation(frame)).write_parquet(project.path(REC))
        project.freeze()
        outside = snapshot(top / "outside")
        outcome = run_cli(project, "bench", "--table", "gemm_mma", "--backend", "replay", "--shape", "1,4096,4096",
                          "--results-root", "results")
        check_contract(outcome, outside=top / "outside", outside_before=outside, new=[r"results/.*"])


_CACHE: dict[str, Any] = {}


def _recording_frame() -> pl.DataFrame:
    """The committed gemm_mma recording (read once)."""
    from badinput_support import REPO

    if "frame" not in _CACHE:
        _CACHE["frame"] = pl.read_parquet(REPO / REC)
    return _CACHE["frame"]


def _sidecar() -> dict[str, Any]:
    """The committed recording's sidecar."""
    from badinput_support import REPO

    return json.loads((REPO / SIDECAR).read_text())


test_replay_contract, test_replay_contract_slow = both(_replay, data=st.data())


# -- manifests (the tables' and the selector's), params.yaml: codegen --check, grid ----------------------------

def _manifests(data: st.DataObject) -> None:
    from badinput_support import REPO

    name = data.draw(st.sampled_from([MANIFEST, SELECTOR]))
    text = (REPO / name).read_text()
    if data.draw(st.booleans()):
        mutated = json.dumps(data.draw(tree_mutation(load_yaml(text)))).encode("utf-8")   # JSON is YAML
    else:
        mutated = data.draw(text_mutation(text))
    with Sandbox(files=PROJECT_FILES) as (project, top):
        project.write(name, mutated)
        project.freeze()
        outside = snapshot(top / "outside")
        outcome = run_cli(project, "codegen", "--all", "--check")
        check_contract(outcome, outside=top / "outside", outside_before=outside, new=[], codes=(1, 2))


test_manifest_contract, test_manifest_contract_slow = both(_manifests, data=st.data())


def _params_shapes_list(data: st.DataObject) -> None:
    mutated = data.draw(text_mutation(SHAPES_CSV))
    with Sandbox(files=PROJECT_FILES) as (project, top):
        project.write("shapes/work.csv", mutated)
        project.edit("params.yaml", "    shapes:\n      NK:", "    shapes:\n      list: shapes/work.csv\n      NK:")
        project.freeze()
        outside = snapshot(top / "outside")
        outcome = run_cli(project, "grid", "--table", "gemm_mma", "--dry-run")
        check_contract(outcome, outside=top / "outside", outside_before=outside, new=[])


test_params_shapes_list_contract, test_params_shapes_list_contract_slow = both(_params_shapes_list, data=st.data())


# -- --query and --filter strings ------------------------------------------------------------------------------

QUERY_ALPHABET = st.sampled_from(["M", "N", "K", "BLOCK_M", " ", "(", ")", "[", "]", "&", "|", "~", "-", "not ",
                                  "==", "<", ">", "1", "64", "9" * 50, ",", ".between(", ".isin(", "`", "'", "@",
                                  "__class__", "and ", "or "])
QUERIES = st.one_of(st.lists(QUERY_ALPHABET, max_size=40).map("".join),
                    st.integers(min_value=1, max_value=20_000).map(lambda n: "(" * n + "M > 1" + ")" * n),
                    st.integers(min_value=1, max_value=20_000).map(lambda n: "~" * n + "M"),
                    st.text(max_size=30))


def _query(query: str) -> None:
    with Sandbox(files=PROJECT_FILES) as (project, top):
        project.freeze()
        outside = snapshot(top / "outside")
        outcome = run_cli(project, "profile", MANIFEST, "--merge", "--query", query)
        check_contract(outcome, outside=top / "outside", outside_before=outside, new=[])


test_query_contract, test_query_contract_slow = both(_query, query=QUERIES)


def _grid_ok(project: Project) -> None:
    """A grid written after --filter holds at least one configuration."""
    grid = json.loads((project.root / "grid.json").read_text())
    assert grid["configs"], "a --filter left an empty grid"


FILTER_VALUES = st.one_of(st.sampled_from(["16", "32", "64", "128", "256", "12345", "true", "-1", "0x40", "9" * 5000,
                                           "", ",", "[64]", "64,128"]), st.text(max_size=8))


FILTER_NAMES = st.sampled_from(["BLOCK_M", "BLOCK_N", "STAGES", "SPLIT_K", "THREADS", "NOPE", ""])


def _filter(name: str, value: str) -> None:
    with Sandbox(files=PROJECT_FILES) as (project, top):
        project.freeze()
        outside = snapshot(top / "outside")
        outcome = run_cli(project, "grid", "--table", "gemm_mma", "--out", "grid.json", "--filter", f"{name}={value}")
        check_contract(outcome, outside=top / "outside", outside_before=outside, new=[r"grid\.json"],
                       on_success=_grid_ok)


test_filter_contract, test_filter_contract_slow = both(_filter, name=FILTER_NAMES, value=FILTER_VALUES)
