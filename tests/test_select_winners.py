"""select: winners per M, near-tie breaking, [M, M_END) ranges, byte-stable manifests, codegen round trip."""

from __future__ import annotations

import re

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from result_rows import GRID, row, shard

from tunetable import rank, resultset
from tunetable import select_winners as select
from tunetable.yamlio import load_yaml

REPO = Path(__file__).resolve().parents[1]
MAX = 2147483647

# (N, K) = (4096, 4096): cc wins M=1 and M=64, ca wins M=8 by 1 % of noise and M=256 clearly.
MEASURED = [
    (1, "cc", 0.010), (1, "ca", 0.020),
    (8, "ca", 0.0100), (8, "cc", 0.0101),
    (64, "cc", 0.020), (64, "ca", 0.030),
    (256, "ca", 0.050), (256, "cc", 0.080),
]

EXPECTED_BODY = """defaults: &defaults
  BLOCK_K: 64
  WARPS_N: 4
  WARPS_K: 1
  KERNEL: gemm_mma
params:
  - <<: *defaults
    M: 1
    M_END: 256
    N: 4096
    K: 4096
    BLOCK_M: 16
    BLOCK_N: 64
    WARPS_M: 1
    STAGES: 4
    SPLIT_K: 4
    GROUP_M: 1
    CONFIG_ID: cc
  - <<: *defaults
    M: 256
    M_END: 2147483647
    N: 4096
    K: 4096
    BLOCK_M: 128
    BLOCK_N: 128
    WARPS_M: 2
    STAGES: 4
    SPLIT_K: 1
    GROUP_M: 8
    CONFIG_ID: ca
  - <<: *defaults
    M: 1
    M_END: 2147483647
    N: 14336
    K: 4096
    BLOCK_M: 64
    BLOCK_N: 128
    WARPS_M: 2
    STAGES: 3
    SPLIT_K: 1
    GROUP_M: 8
    CONFIG_ID: cb
"""


def ranked_from(tmp_path: Path, *, backend: str = "cuda", content_key: str = "live0001",
                measured=MEASURED) -> pl.DataFrame:
    rows = [row(m=m, config=c, median=t, backend=backend, content_key=content_key) for m, c, t in measured]
    rows.append(row(m=1, n=14336, config="cb", median=0.030, backend=backend, content_key=content_key))
    rows.append(row(m=1, n=14336, config="cd", median=None, status="build", backend=backend, content_key=content_key))
    path = shard(tmp_path / f"{backend}.pkl", rows)
    frame = resultset.combine(results=resultset.load_files(paths=[path]).results)
    return rank.rank_rows(rows=frame, parameters=GRID).ranked


def test_merge_ranges_first_starts_at_1_last_ends_at_int32_max():
    choices = [select.Choice(m=m, config_id=c, strict_winner=c)
               for m, c in [(1, "a"), (8, "a"), (32, "b"), (64, "b"), (128, "a")]]
    assert select.merge_ranges(choices=choices) == [(1, 32, "a"), (32, 128, "b"), (128, MAX, "a")]
    assert select.merge_ranges(choices=[select.Choice(m=16, config_id="a", strict_winner="a")]) == [(1, MAX, "a")]


def test_near_tie_goes_to_the_config_winning_more_neighbours():
    chosen = select.choose_winners(ties_by_m=[(1, ["b"]), (8, ["a", "b"]), (32, ["b"])])
    assert [c.config_id for c in chosen] == ["b", "b", "b"]
    # No neighbour won by either candidate: the faster (first) one stays.
    chosen = select.choose_winners(ties_by_m=[(1, ["c"]), (8, ["a", "b"]), (32, ["c"])])
    assert [c.config_id for c in chosen] == ["c", "a", "c"]


def ties_of(rows: pl.DataFrame, tolerance: float) -> list[str]:
    shaped = rows.with_columns(pl.lit(1).alias("M"), pl.lit(8).alias("N"), pl.lit(8).alias("K"))
    return select.near_ties_by_shape(rows=shaped, tolerance=tolerance)["ties"].to_list()[0]


def test_near_ties_use_tolerance_or_iqr():
    rows = pl.DataFrame({"config_id": ["x", "y", "z"], "median_ms": [1.0, 1.009, 1.05], "iqr_ms": [0.0, 0.0, 0.0]})
    assert ties_of(rows, 0.01) == ["x", "y"]
    assert ties_of(rows, 0.0) == ["x"]
    noisy = rows.with_columns(pl.Series("iqr_ms", [0.06, 0.0, 0.0]))
    assert ties_of(noisy, 0.0) == ["x", "y", "z"]
    # only the winner's IQR counts as noise, not a slower config's
    slow_noisy = rows.with_columns(pl.Series("iqr_ms", [0.0, 0.0, 0.5]))
    assert ties_of(slow_noisy, 0.0) == ["x"]


def test_equal_medians_break_by_config_id():
    rows = pl.DataFrame({"config_id": ["zz", "aa"], "median_ms": [1.0, 1.0], "iqr_ms": [0.0, 0.0]})
    assert ties_of(rows, 0.0) == ["aa", "zz"]


def test_manifest_text(tmp_path):
    text = select.build_manifest(table="gemm_mma", kernel="gemm_mma", ranked=ranked_from(tmp_path))
    assert text.endswith(EXPECTED_BODY)
    provenance = load_yaml(text)["provenance"]
    assert {k: v for k, v in provenance.items() if k != "data_hash"} == {
        "table": "gemm_mma", "results_key": "live0001", "kernel_hash": "kh00112233445566", "device": "NVIDIA H200",
        "driver": "580.95.05", "backend": "cuda", "date": "2026-11-29", "git_rev": "0123abcd4567"}
    assert len(provenance["data_hash"]) == 16


def test_without_tolerance_the_tie_splits_the_range(tmp_path):
    entries = select.select_entries(ranked=ranked_from(tmp_path), tolerance=0.0)
    assert [(e.m, e.m_end, e.config_id) for e in entries if e.n == 4096] == [
        (1, 8, "cc"), (8, 64, "ca"), (64, 256, "cc"), (256, MAX, "ca")]


def test_only_ok_rows_are_eligible(tmp_path):
    ranked = ranked_from(tmp_path)
    faster_but_failed = ranked.filter(pl.col("config_id") == "ca").head(1).with_columns(
        pl.lit(0.0001).alias("median_ms"), pl.lit("verify").alias("status"), pl.lit("cd").alias("config_id"))
    entries = select.select_entries(ranked=pl.concat([ranked, faster_but_failed]))
    assert "cd" not in {e.config_id for e in entries}


def test_manifest_round_trips_through_safe_load(tmp_path):
    data = load_yaml(select.build_manifest(table="gemm_mma", kernel="gemm_mma", ranked=ranked_from(tmp_path)))
    assert data["params"][2] == {"BLOCK_K": 64, "WARPS_N": 4, "WARPS_K": 1, "KERNEL": "gemm_mma", "M": 1, "M_END": MAX,
                                 "N": 14336, "K": 4096, "BLOCK_M": 64, "BLOCK_N": 128, "WARPS_M": 2, "STAGES": 3,
                                 "SPLIT_K": 1, "GROUP_M": 8, "CONFIG_ID": "cb"}


def test_replayed_rows_give_byte_identical_manifest(tmp_path):
    live = select.build_manifest(table="gemm_mma", kernel="gemm_mma", ranked=ranked_from(tmp_path))
    replay = select.build_manifest(table="gemm_mma", kernel="gemm_mma",
                                   ranked=ranked_from(tmp_path, backend="replay", content_key="replay99"))
    assert replay == live


def test_data_hash_follows_the_measurements(tmp_path):
    before = select.data_hash(ranked=ranked_from(tmp_path))
    changed = [(m, c, t * 1.5 if (m, c) == (256, "cc") else t) for m, c, t in MEASURED]
    assert select.data_hash(ranked=ranked_from(tmp_path, measured=changed)) != before


def test_yaml_scalars_round_trip():
    for value in ["plain", "NVIDIA H200", "2026-11-29", "0123", "true", "null", "a: b", "1e5", 7, 2.5, True, None]:
        assert load_yaml(f"k: {select.yaml_scalar(value)}")["k"] == value


def run_select(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tunetable", "select", "--table", "gemm_mma",
                           "--params", str(REPO / "params.yaml"), *args], capture_output=True, text=True, cwd=tmp_path)


def test_select_cli_byte_stable_and_codegen_round_trip(tmp_path):
    ranked = ranked_from(tmp_path)
    ranked_path = tmp_path / "ranked.parquet"
    ranked.write_parquet(ranked_path)
    out = tmp_path / "manifests" / "gemm_mma.yaml"
    first = run_select(tmp_path, "--ranked", str(ranked_path), "--out", str(out))
    assert first.returncode == 0, first.stderr
    content = out.read_bytes()
    assert run_select(tmp_path, "--ranked", str(ranked_path), "--out", str(out)).returncode == 0
    assert out.read_bytes() == content
    assert content.decode().endswith(EXPECTED_BODY)

    codegen = pytest.importorskip("tunetable.codegen")
    snippet = (REPO / "kernels" / "families" / "gemm_mma" / "gemm_mma.snippet").read_text()
    region = codegen.render_region(codegen.load_manifest(out), snippet, source_label="manifests/gemm_mma.yaml")
    first_entry = region.split("# index: [1]")[0]
    for line in ("m=1,", "m_end=256,", "n=4096,", "k=4096,", 'kernel="gemm_mma",', 'config_id="cc",', "block_m=16,",
                 "block_k=64,", "warps_k=1,", "split_k=4,", "group_m=1)"):
        assert re.search(rf"(\(|, |^ +){re.escape(line)}", first_entry, flags=re.MULTILINE), line   # a whole field
    assert region.count("# Automatically generated from [manifests/gemm_mma.yaml]") == 3


def test_select_cli_errors(tmp_path):
    missing = run_select(tmp_path, "--ranked", str(tmp_path / "nope.parquet"), "--out", str(tmp_path / "m.yaml"))
    assert missing.returncode == 2
    assert "nope.parquet: no such file" in missing.stderr
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    broken = run_select(tmp_path, "--ranked", str(bad), "--out", str(tmp_path / "m.yaml"))
    assert broken.returncode == 2 and "not a ranked parquet" in broken.stderr and "Traceback" not in broken.stderr
    assert not (tmp_path / "m.yaml").exists()
