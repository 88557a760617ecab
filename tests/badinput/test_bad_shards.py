"""Bad shards and kbench pickles: nothing in a .pkl runs, a damaged shard stops the command, nothing crashes.

Shards are real (tunetable.results.write_shard, their checksum recorded in the journal beside them);
kbench files from elsewhere are the committed fixtures (tests/fixtures/pickles: real pandas 3.1, 2.2
and 2.1 pickles). Payload pickles name globals that would run code and touch MARKER; the restricted
reader refuses them by name. ``rank`` is the command of the main job; ``profile`` reads files from
anywhere.
"""

from __future__ import annotations

import pickle
import random
import struct
from pathlib import Path

import pytest
from badinput_support import REPO, Case, Project, ids, make_project, run_cli
from result_rows import row, shard

from tunetable import resultset
from tunetable.errors import TuneTableError

KEY = "0123456789abcdef"
SHARD = f"results/raw/gemm_mma/{KEY}/M1_N4096_K4096.pkl"
JOURNAL = f"results/raw/gemm_mma/{KEY}/M1_N4096_K4096.journal.jsonl"
OTHER = f"results/raw/gemm_mma/{KEY}/M8_N4096_K4096.pkl"
FOREIGN = "colleague/kbench_output.pkl"
FIXTURES = REPO / "tests" / "fixtures" / "pickles"
RANKED_OUT = "results/ranked/gemm_mma.parquet"


def shard_project(tmp_path: Path) -> Project:
    """Two real shards (M=1, M=8) with their journals, and a kbench file from elsewhere; no params.yaml."""
    project = make_project(tmp_path, files=())
    project.root.mkdir(parents=True)
    for m, path in ((1, SHARD), (8, OTHER)):
        rows = [row(m=m, config="ca", median=1.0 + m), row(m=m, config="cb", median=0.5 + m),
                row(m=m, config="cublas", median=2.0 + m)]
        project.path(path).parent.mkdir(parents=True, exist_ok=True)
        shard(project.path(path), rows)
    project.write(FOREIGN, (FIXTURES / "pandas22_numpy2_kbench_p4.pkl").read_bytes())
    return project


def rank(project: Project, *files: str):
    """The main job's rank command over the given files."""
    return run_cli(project, "rank", "--table", "gemm_mma", "--out", RANKED_OUT, *files)


class Reduce:
    """Pickles as ``callable(*args)``: how a .pkl runs code under the stock unpickler."""

    def __init__(self, function, *args):
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


def payload(p: Project, function, *args, where: str = "merged_df") -> bytes:
    """A kbench-shaped pickle whose ``where`` entry is the call ``function(*args)``."""
    data = {"name": "bench", "file": "x.mojo", "merged_df": None, "build_df": None, where: Reduce(function, *args)}
    return pickle.dumps(data, protocol=4)


def touch(p: Project) -> str:
    """A shell command creating the marker file."""
    return f"touch {p.marker}"


def code_payloads() -> list[Case]:
    """Globals that run code (each would touch the marker under pickle.load), refused by name."""
    import builtins
    import copyreg
    import functools
    import importlib
    import os
    import subprocess

    import numpy
    import pandas

    def case(name, build, refused):
        def mutate(p: Project) -> None:
            p.write(FOREIGN, build(p))
        return Case(name, mutate, rf"error: {FOREIGN}: refused global '{refused}': tunetable reads kbench pickles "
                                  r"of pandas/numpy data only and never runs code from a \.pkl")

    return [
        case("os-system", lambda p: payload(p, os.system, touch(p)), r"posix\.system"),
        case("builtins-eval", lambda p: payload(p, builtins.eval, f"__import__('os').system('{touch(p)}')"),
             r"builtins\.eval"),
        case("builtins-exec", lambda p: payload(p, builtins.exec, f"import os; os.system('{touch(p)}')"),
             r"builtins\.exec"),
        case("subprocess-popen", lambda p: payload(p, subprocess.Popen, ["touch", str(p.marker)]),
             r"subprocess\.Popen"),
        case("builtins-import", lambda p: payload(p, builtins.__import__, "os"), r"builtins\.__import__"),
        case("importlib", lambda p: payload(p, importlib.import_module, "os"), r"importlib\.import_module"),
        case("getattr-chain", lambda p: payload(p, builtins.getattr, "text", "join"), r"builtins\.getattr"),
        case("functools-partial", lambda p: payload(p, functools.partial, os.system, touch(p)),
             r"functools\.partial"),
        case("copyreg-reconstructor", lambda p: payload(p, copyreg._reconstructor, object, object, None),
             r"copyreg\._reconstructor"),
        case("pandas-read-pickle", lambda p: payload(p, pandas.read_pickle, "/tmp/other.pkl"),
             r"pandas[.a-z]*\.read_pickle"),
        case("pandas-eval", lambda p: payload(p, pandas.eval, "1 + 1"), r"pandas[.a-z]*\.eval"),
        case("numpy-load", lambda p: payload(p, numpy.load, "/tmp/x.npy", None, True), r"numpy\.load"),
        case("hidden-in-provenance", lambda p: payload(p, os.system, touch(p), where="provenance"), r"posix\.system"),
    ]


class ArrayState:
    """Pickles as numpy does an ndarray (``_reconstruct`` + BUILD), with a state chosen by the test."""

    def __init__(self, state):
        self.state = state

    def __reduce__(self):
        import numpy

        return numpy._core.multiarray._reconstruct, (numpy.ndarray, (0,), b"b"), self.state


def array_pickle(shape: tuple[int, ...], dtype: str, data) -> bytes:
    """A kbench-shaped pickle whose merged_df is an ndarray with this (inconsistent) state."""
    import numpy

    return pickle.dumps({"merged_df": ArrayState((1, shape, numpy.dtype(dtype), False, data))}, protocol=4)


def raw(opcodes: bytes) -> bytes:
    """A protocol-4 pickle from raw opcodes."""
    return b"\x80\x04" + opcodes + b"."


def frame_like(p: Project, change) -> bytes:
    """The pandas 3.1 kbench fixture with one byte-level change applied (``change(bytes) -> bytes``)."""
    return change((FIXTURES / "pandas31_numpy2_kbench_p4.pkl").read_bytes())


def content_payloads() -> list[Case]:
    """Inconsistent data inside allowed reconstructors: refused before pandas or polars see it."""
    def case(name, build, message):
        def mutate(p: Project) -> None:
            p.write(FOREIGN, build(p))
        return Case(name, mutate, rf"error: {FOREIGN}: not read: {message} \(not the pandas/numpy data of a kbench "
                                  r"pickle\)")

    def swap(old: bytes, new: bytes):
        def change(data: bytes) -> bytes:
            assert old in data
            return data.replace(old, new, 1)
        return change

    # slice(0, 7, 1) is the columns' placement of the first block (7 columns): point it past the end
    return [
        case("block-placed-outside-the-frame",
             lambda p: frame_like(p, swap(b"K\x00K\x01K\x01\x87", b"K\x00K\x09K\x01\x87")),
             r"a block (placed outside the frame|whose shape does not match its columns and rows)"),
        case("array-buffer-shorter-than-its-shape",
             lambda p: frame_like(p, swap(b"K\x01K\x03\x86", b"K\x01K\x09\x86")),
             r"(array buffer size does not match its shape|a block whose shape does not match .*)"),
        case("structured-dtype", lambda p: pickle.dumps({"merged_df": __import__("numpy").zeros(
            2, dtype=[("a", "i8"), ("b", "O")])}), r"numpy dtype \('V16',\) is not one a frame column uses"),
        case("datetime-dtype", lambda p: pickle.dumps({"merged_df": __import__("numpy").zeros(2, dtype="M8[ns]")}),
             r"numpy dtype \('M8',\) is not one a frame column uses"),
        case("object-array-from-raw-bytes", lambda p: array_pickle((2,), "O", b"A" * 16),
             r"object array whose items do not match its shape"),
        case("array-buffer-of-another-size", lambda p: array_pickle((10 ** 7,), "i8", b"A" * 8),
             r"array buffer size does not match its shape"),
        case("array-shape-of-a-trillion", lambda p: array_pickle((10 ** 12,), "i8", b"A" * 8),
             r"array shape \(1000000000000,\)"),
        case("nested-a-thousand-lists", lambda p: raw(b"]" * 1000 + b"a" * 999), r"values nested too deeply"),
        case("integer-beyond-64-bits", lambda p: pickle.dumps({"merged_df": 2 ** 200}), r"an integer beyond 64 bits"),
        case("arrow-offsets-outside-their-data",
             lambda p: frame_like(p, swap(b"\x0f\x00\x00\x00\x00\x00\x00\x00", b"\xff\x00\x00\x00\x00\x00\x00\x00")),
             r"pyarrow string offsets outside their data"),
        case("arrow-string-not-utf8", lambda p: frame_like(p, swap(b"buildbuildbuild", b"build\xffuildbuild")),
             r"a pyarrow string that is not UTF-8"),
    ]


def as_directory(p: Project) -> None:
    p.path(SHARD).unlink()
    p.path(SHARD).mkdir()


def replaced_by_other_data(p: Project) -> None:
    p.write(SHARD, p.path(OTHER).read_bytes())


REMEDY = r"delete it \(and its journal, if any\) to measure or replay it again"
E_SHARD = rf"error: {SHARD}"
INTEGRITY = [
    Case("truncated", lambda p: p.write(SHARD, p.path(SHARD).read_bytes()[:-100]),
         rf"{E_SHARD}: truncated \(\d+ of \d+ bytes\): sha256 [0-9a-f]{{16}} does not match the [0-9"
         rf"a-f]{{16}} recorded "
         rf"in M1_N4096_K4096\.journal\.jsonl; {REMEDY}"),
    Case("empty", lambda p: p.write(SHARD, b""), rf"{E_SHARD}: truncated \(0 of \d+ bytes\): .*"),
    Case("one-bit-flipped", lambda p: p.write(SHARD, _flip(p.path(SHARD).read_bytes(), 700)),
         rf"{E_SHARD}: corrupt or replaced: sha256 [0-9a-f]{{16}} does not match .*"),
    Case("bytes-appended", lambda p: p.write(SHARD, p.path(SHARD).read_bytes() + b"\0" * 16),
         rf"{E_SHARD}: corrupt or replaced: .*"),
    Case("replaced-by-another-shard", replaced_by_other_data, rf"{E_SHARD}: corrupt or replaced: .*"),
    Case("journal-deleted", lambda p: p.path(JOURNAL).unlink(),
         rf"{E_SHARD}: no checksum recorded: its journal M1_N4096_K4096\.journal\.jsonl is missing; {REMEDY}"),
    Case("journal-garbage", lambda p: p.write(JOURNAL, b"\xff\xfe garbage\n"),
         rf"{E_SHARD}: no checksum recorded in its journal M1_N4096_K4096\.journal\.jsonl .*"),
    Case("journal-names-another-file", lambda p: p.edit(JOURNAL, '"file": "M1_N4096_K4096.pkl"', '"file": "x.pkl"'),
         rf"{E_SHARD}: no checksum recorded in its journal .*"),
    Case("a-folder", as_directory, rf"{E_SHARD}: is a directory, expected a file"),
    Case("missing", lambda p: p.path(SHARD).unlink(), rf"{E_SHARD}: no such file"),
]


def _flip(data: bytes, at: int) -> bytes:
    """``data`` with one bit of byte ``at`` flipped."""
    return data[:at] + bytes([data[at] ^ 0x10]) + data[at + 1:]


FOREIGN_CASES = [*code_payloads(), *content_payloads(),
                 Case("persistent-id", lambda p: p.write(FOREIGN, raw(b"\x8c\x04evil\x94Q")),
                      rf"error: {FOREIGN}: refused persistent id: .*"),
                 Case("garbage", lambda p: p.write(FOREIGN, b"\x80\x04not really a pickle"),
                      rf"error: {FOREIGN}: not a readable pickle: UnpicklingError: .*"),
                 Case("huge-length-prefix", lambda p: p.write(FOREIGN, b"\x80\x04\x8d" + struct.pack("<Q", 2 ** 62)),
                      rf"error: {FOREIGN}: not a readable pickle: .*"),
                 Case("no-merged-df", lambda p: p.write(FOREIGN, pickle.dumps({"name": "x"})),
                      rf"error: {FOREIGN}: not a kbench result pickle: no merged_df"),
                 Case("merged-df-a-list", lambda p: p.write(FOREIGN, pickle.dumps({"merged_df": [1, 2]})),
                      rf"error: {FOREIGN}: not a kbench result pickle: merged_df is not a DataFrame")]


@pytest.mark.parametrize("case", INTEGRITY, ids=ids(INTEGRITY))
def test_a_damaged_shard_stops_rank(tmp_path, case):
    project = shard_project(tmp_path)
    case.mutate(project)
    project.freeze()
    rank(project, SHARD, OTHER).expect_error(case.error)


@pytest.mark.parametrize("case", FOREIGN_CASES, ids=ids(FOREIGN_CASES))
def test_a_bad_kbench_file_is_refused_by_rank_and_profile(tmp_path, case):
    project = shard_project(tmp_path)
    case.mutate(project)
    project.freeze()
    rank(project, OTHER, FOREIGN).expect_error(case.error)
    if " refused " in case.error or "not read:" in case.error:  # never listed as merely invalid
        run_cli(project, "profile", OTHER, FOREIGN, "--out-dir", "profile_out").expect_error(case.error)


def test_profile_still_lists_a_file_that_is_not_a_pickle_as_invalid(tmp_path):
    """kprofile's behaviour for junk (not an attack): `Invalid pkl [path]`, the other files are shown."""
    project = shard_project(tmp_path)
    project.write(FOREIGN, b"junk")
    project.freeze()
    outcome = run_cli(project, "profile", OTHER, FOREIGN, "--out-dir", "profile_out")
    outcome.expect_ok()
    assert f"Invalid pkl [{FOREIGN}]" in outcome.out and "num invalid pkls: 1 out of num-files: 2" in outcome.out


def corrupt_and_read(seed: int) -> None:
    """A fixture pickle with random damage (seeded) read as a kbench file from elsewhere, down to polars."""
    fixtures = sorted(FIXTURES.glob("*.pkl"))
    rng = random.Random(seed)
    data = bytearray(fixtures[seed % len(fixtures)].read_bytes())
    for _ in range(rng.randint(1, 8)):
        kind = rng.random()
        at = rng.randrange(len(data))
        if kind < 0.5:
            data[at] = rng.randrange(256)
        elif kind < 0.75:
            del data[at: at + rng.randint(1, 64)]
        else:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    from tunetable.results import payload_from_bytes

    try:
        payload = payload_from_bytes(bytes(data), path="fuzzed.pkl")
        resultset.from_payload(payload=payload, path="fuzzed.pkl")
    except TuneTableError as exc:
        assert str(exc).startswith("fuzzed.pkl: ") and "\n" not in str(exc)


@pytest.mark.parametrize("seed", range(40))
def test_random_corruption_never_crashes(seed, capfd):
    """A kbench file from elsewhere (no checksum) with random damage: read cleanly, or one error line; never a
    crash, a traceback or a stray line from the interpreter. Both layers run: the reader and polars."""
    corrupt_and_read(seed)
    assert capfd.readouterr().err == ""


@pytest.mark.slow
def test_random_corruption_never_crashes_five_hundred_more_times(capfd):
    for seed in range(40, 540):
        corrupt_and_read(seed)
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize(("median", "status"), [(float("nan"), "missing"), (float("inf"), "invalid"),
                                               (-1.0, "invalid"), (0.0, "invalid")], ids=["nan", "inf", "negative",
                                                   "zero"])
def test_an_ok_row_without_a_finite_positive_median_never_ranks(tmp_path, median, status):
    """Such a row is a failure (NaN reads as a missing value; the others are `invalid`, with why), never ranked."""
    import polars as pl

    project = make_project(tmp_path, files=())
    project.root.mkdir(parents=True)
    bad = {**row(m=1, config="ca", median=1.0), "median_ms": median, "met (ms)": median, "tflops": None}
    rows = [bad, row(m=1, config="cb", median=2.0), row(m=1, config="cublas", median=3.0)]
    shard(project.path("s.pkl"), rows)
    project.freeze()
    outcome = rank(project, "s.pkl")
    outcome.expect_ok(new=[r"results/ranked/gemm_mma\.(parquet|csv|md|failures\.csv)"])
    ranked = pl.read_parquet(project.path(RANKED_OUT))
    assert ranked["config_id"].to_list() == ["cb"]
    failures = pl.read_csv(project.path("results/ranked/gemm_mma.failures.csv"))
    assert failures.select("config_id", "status").rows() == [("ca", status)]
    if status == "invalid":
        assert "is not a finite positive time" in failures["error"][0]
