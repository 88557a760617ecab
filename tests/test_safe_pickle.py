"""The restricted pickle reader (tunetable.safe_pickle) and shard checksums (tunetable.results).

The pickles under tests/fixtures/pickles were written by real pandas 3.1, 2.2 and 2.1 (numpy 2 and 1)
with protocols 4 and 5, as a tunetable shard and as a Modular kbench result (make_pickles.py there).
"""

from __future__ import annotations

import importlib.util
import pickle
from pathlib import Path

import pandas as pd
import pytest

from tunetable import results
from tunetable.errors import TuneTableError
from tunetable.safe_pickle import ALLOWED, RefusedFile, load_pickle

FIXTURES = Path(__file__).parent / "fixtures" / "pickles"
PICKLES = sorted(FIXTURES.glob("*.pkl"))
def _load_generator():
    """tests/fixtures/pickles/make_pickles.py, the script that wrote the fixtures (imported by path)."""
    spec = importlib.util.spec_from_file_location("make_pickles", FIXTURES / "make_pickles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_pickles = _load_generator()


@pytest.mark.parametrize("path", PICKLES, ids=[p.stem for p in PICKLES])
def test_real_pickles_of_three_pandas_versions_read(path):
    payload = load_pickle(path.read_bytes(), path=path)
    merged = payload["merged_df"]
    if "_shard_" in path.name:
        assert list(merged["config_id"]) == ["c0a1b2c3d4e", "c5f6a7b8c9d", "cublas"]
        assert merged["BLOCK_M"].dtype == "Int64" and merged["BLOCK_M"].isna().tolist() == [False, False, True]
        assert merged["samples_ms"].iloc[2] == [0.021, 0.021, 0.022]
        assert merged["error"].isna().all() and merged["median_ms"].tolist() == [0.02, 0.03, 0.021]
        assert payload["provenance"]["settings"] == {"rounds": 3, "warmup_ms": 25.0, "l2_factor": 3.0}
        assert list(payload["build_df"]["config_id"]) == ["c0a1b2c3d4e", "c5f6a7b8c9d"]
    else:
        assert list(merged.columns) == ["mesh_idx", "name", "met (ms)", "iters", "Arithmetic (GFLOPS/s)", "spec",
                                        "kbench_filter"]
        assert merged["spec"].iloc[1] == "bench_matmul/dtype=DType.bfloat16/stages=4/$M=256/$N=4096/$K=4096"
        assert merged["met (ms)"].tolist() == pytest.approx([0.35, 0.225, 0.1625])
        assert payload["name"] == "bench_matmul" and len(payload["build_df"]) == 3


def test_same_frames_as_were_pickled(tmp_path):
    """Every fixture reads back as the frames make_pickles.py built before pickling them (with whichever pandas
    wrote it). String columns get the installed pandas's default string type, whichever string type the
    writer used (kbench's explicit "string" dtype included); every other dtype is kept."""
    for path in PICKLES:
        kind = "shard" if "_shard_" in path.name else "kbench"
        expected = make_pickles.shard_payload() if kind == "shard" else make_pickles.kbench_payload()
        got = load_pickle(path.read_bytes(), path=path)
        for key in ("merged_df", "build_df"):
            pd.testing.assert_frame_equal(got[key], expected[key], check_dtype=False)
            strings = [c for c in expected[key].columns if pd.api.types.is_string_dtype(expected[key][c])]
            assert got[key].drop(columns=strings).dtypes.equals(expected[key].drop(columns=strings).dtypes)
            assert all(got[key][c].dtype == pd.Series(["x"]).dtype or got[key][c].dtype == object for c in strings)


class Payload:
    """A pickle whose loading would run ``os.system`` (creating a marker file), the classic attack."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_a_payload_is_refused_by_name_and_never_runs(tmp_path):
    marker = tmp_path / "ran"
    data = pickle.dumps({"merged_df": Payload(marker)})
    with pytest.raises(RefusedFile) as caught:
        load_pickle(data, path="evil.pkl")
    assert str(caught.value) == ("evil.pkl: refused global 'posix.system': tunetable reads kbench pickles of "
                                 "pandas/numpy data only and never runs code from a .pkl")
    assert not marker.exists()


def test_allow_list_is_reconstructors_only():
    modules = {module.split(".")[0] for module, _ in ALLOWED}
    assert modules == {"builtins", "numpy", "pandas", "pyarrow"}
    assert {name for module, name in ALLOWED if module == "builtins"} == {"bytearray", "slice"}


def test_write_records_the_checksum_and_read_verifies_it(tmp_path):
    shard = tmp_path / "raw" / "t" / "0123456789abcdef" / "M1_N8_K8.pkl"
    digest = results.write_shard(shard, table="t", rows=[{"config_id": "c1", "spec": "t/$M=1"}], build_rows=[],
                                 provenance={})
    journal = results.journal_of(shard)
    assert results.recorded_checksums(journal.read_text(), name=shard.name) == [(digest,
                                                                                   shard.stat().st_size)]
    assert list(results.read_shard(shard)["merged_df"]["config_id"]) == ["c1"]
    data = shard.read_bytes()
    shard.write_bytes(data[:-7])
    with pytest.raises(RefusedFile, match=rf"M1_N8_K8.pkl: truncated \({len(data) - 7} of {len(data)} bytes\): "):
        results.read_shard(shard)
    shard.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    with pytest.raises(RefusedFile, match=r"corrupt or replaced: sha256 [0-9a-f]{16} does not match"):
        results.read_result_file(shard)
    shard.write_bytes(data)
    journal.unlink()
    with pytest.raises(RefusedFile, match=r"no checksum recorded: its journal M1_N8_K8.journal.jsonl is missing"):
        results.read_result_file(shard)  # laid out as a shard: a checksum is required


def test_a_kbench_file_from_elsewhere_needs_no_journal(tmp_path):
    path = tmp_path / "colleague.pkl"
    path.write_bytes((FIXTURES / "pandas22_numpy2_kbench_p4.pkl").read_bytes())
    assert len(results.read_result_file(path)["merged_df"]) == 3


def test_garbage_is_one_error_not_a_refusal(tmp_path):
    with pytest.raises(TuneTableError) as caught:
        load_pickle(b"not a pickle", path="x.pkl")
    assert not isinstance(caught.value, RefusedFile)
    assert str(caught.value).startswith("x.pkl: not a readable pickle: UnpicklingError")
