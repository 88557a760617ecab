"""Loading shards and kbench pickles into polars: spec parsing, shape columns, invalid files."""

from __future__ import annotations

import pickle

import polars as pl
import pytest
from result_rows import kbench_pickle, row, shard

from tunetable import resultset
from tunetable.errors import TuneTableError


def test_parse_specs_types_values_and_runtime_keys():
    specs = pl.Series(["matmul/TUNE_BM=128/SWAP=True/dtype=bf16/$M=64/$N=4096",
                       "matmul/TUNE_BM=64/SWAP=False/dtype=bf16/$M=128/$N=4096"])
    parsed, keys = resultset.parse_specs(specs=specs)
    assert keys.parameters == ("TUNE_BM", "SWAP", "dtype")
    assert keys.runtime == ("M", "N")
    assert parsed["name"].to_list() == ["matmul", "matmul"]
    assert parsed["TUNE_BM"].to_list() == [128, 64]
    assert parsed["SWAP"].to_list() == [True, False]
    assert parsed["dtype"].to_list() == ["bf16", "bf16"]
    assert parsed["M"].to_list() == [64, 128]


def test_float_values_parse_as_floats():
    parsed, _ = resultset.parse_specs(specs=pl.Series(["k/ALPHA=0.5/$M=1", "k/ALPHA=2/$M=2"]))
    assert parsed["ALPHA"].to_list() == [0.5, 2.0]


def test_kbench_pickle_shape_from_dollar_keys(tmp_path):
    path = kbench_pickle(tmp_path / "k.pkl", ["mm/BM=64/BN=32/$M=8/$N=16", "mm/BM=128/BN=32/$M=8/$N=16"], [2.0, 1.0])
    result = resultset.load_file(path=path)
    assert result.parameters == ("BM", "BN")
    assert result.shape == ("M", "N")
    assert result.frame["BM"].to_list() == [64, 128]
    assert result.name == "bench"


def test_kbench_pickle_without_runtime_keys_uses_single_valued_columns(tmp_path):
    path = kbench_pickle(tmp_path / "k.pkl", ["mm/BM=64/M=8/N=16", "mm/BM=128/M=8/N=16"], [2.0, 1.0])
    result = resultset.load_file(path=path)
    assert result.shape == ("M", "N")
    assert result.parameters == ("BM",)


def test_project_shard_keeps_its_columns(tmp_path):
    path = shard(tmp_path / "s.pkl", [row(m=64, config="ca", median=1.0), row(m=64, config="cublas", median=2.0)])
    result = resultset.load_file(path=path)
    assert result.shape == ("M", "N", "K")
    assert result.parameters[:2] == ("BLOCK_M", "BLOCK_N")
    assert result.frame["samples_ms"].to_list()[0] == [1.0, 1.0, 1.0]
    assert result.frame["config_id"].to_list() == ["ca", "cublas"]


def test_invalid_files_are_counted_and_the_rest_load(tmp_path):
    good = shard(tmp_path / "good.pkl", [row(m=1, config="ca", median=1.0)])
    garbage = tmp_path / "garbage.pkl"
    garbage.write_bytes(b"not a pickle")
    no_df = tmp_path / "nodf.pkl"
    no_df.write_bytes(pickle.dumps({"name": "x"}))
    report = resultset.load_files(paths=[garbage, good, tmp_path / "missing.pkl", no_df])
    assert [r.path for r in report.results] == [str(good)]
    assert [i.path for i in report.invalid] == [str(garbage), str(tmp_path / "missing.pkl"), str(no_df)]
    assert all("Invalid pkl" in i.reason for i in report.invalid)


def test_all_invalid_is_an_error_naming_the_files(tmp_path):
    garbage = tmp_path / "garbage.pkl"
    garbage.write_bytes(b"\x80\x04junk")
    with pytest.raises(TuneTableError, match=r"Invalid pkl \[.*garbage.pkl\]"):
        resultset.load_files(paths=[garbage])


def test_combine_adds_file_column(tmp_path):
    a = shard(tmp_path / "a.pkl", [row(m=1, config="ca", median=1.0)])
    b = shard(tmp_path / "b.pkl", [row(m=8, config="cb", median=2.0)])
    frame = resultset.combine(results=resultset.load_files(paths=[a, b]).results)
    assert frame["file"].to_list() == [str(a), str(b)]
    assert frame["M"].to_list() == [1, 8]


def test_specs_with_different_layouts_fill_missing_keys_with_null():
    parsed, keys = resultset.parse_specs(specs=pl.Series(["mm/A=1/$M=2", "mm/B=x/$M=3"]))
    assert keys.parameters == ("A", "B") and keys.runtime == ("M",)
    assert parsed.rows() == [("mm", 1, None, 2), ("mm", None, "x", 3)]
