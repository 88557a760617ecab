"""CLI polish: profile --top's range, metrics' three outputs land together, trace's unknown-name line,
rank carries the search columns of searched shards.

Bad input ends in exactly one ``error:`` line naming the file, flag or place (exit 2), and nothing
is written. Shards come from the replay backend (the committed H200 recording), never invented.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from bench_support import gemm_mma_only_params
from pipeline_repo import error_line
from tunetable.kernels.families import FAMILIES
from tunetable.atomic import atomic_write_all
from tunetable.errors import TuneTableError
from tunetable.keys import kernel_source_hash
from tunetable.rank import (
    PROVENANCE_COLUMNS,
    SEARCH_TYPES,
    ranked_parameters,
    read_ranked,
)
from tunetable.results import SEARCH_FIELDS, read_shard
from tunetable.select_winners import data_hash
from tunetable.trace import check_traceable

REPO = Path(__file__).resolve().parents[1]
RECORDING = REPO / "data" / "recordings" / "h200_gemm_mma.parquet"
SHAPES = ("64,4096,4096", "8,4096,4096")
SEARCH = {"strategy": "random", "max_fevals": 4, "seed": 1}


def _run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """Run ``python -m tunetable ARGS`` in ``cwd``, capturing text output (wide, one line per message)."""
    return subprocess.run([sys.executable, "-m", "tunetable", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250"}, timeout=300, check=False)


def _files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (hidden temp files included), relative path -> bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _bench(params: Path, root: Path) -> list[Path]:
    """Replay-bench SHAPES of gemm_mma under ``params``; the shards written, sorted."""
    shapes = [arg for shape in SHAPES for arg in ("--shape", shape)]
    done = _run("bench", "--table", "gemm_mma", "--backend", "replay", *shapes, "--params", str(params),
                "--results-root", str(root))
    assert done.returncode == 0, done.stderr
    shards = sorted((root / "raw" / "gemm_mma").glob("*/*.pkl"))
    assert len(shards) == len(SHAPES)
    return shards


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """Exhaustive and searched shards of the same two shapes, replayed from the committed recording."""
    if not RECORDING.is_file():
        pytest.skip(f"{RECORDING} is absent: these tests replay the committed H200 recording")
    sidecar = json.loads(RECORDING.with_suffix(".json").read_text())
    if kernel_source_hash(FAMILIES["gemm_mma"].source) not in sidecar["kernel_hashes"]:
        pytest.skip("kernels/families/gemm_mma/gemm_mma.cu changed since the recording: re-record on the H200")
    root = tmp_path_factory.mktemp("shards")
    return {"exhaustive": _bench(gemm_mma_only_params(root / "plain", search=None), root / "plain" / "results"),
            "searched": _bench(gemm_mma_only_params(root / "searched", search=SEARCH), root / "searched" / "results")}


def _rank(out: Path, shard_paths: list[Path]) -> pl.DataFrame:
    """``tunetable rank`` of ``shard_paths`` into ``out``; the ranked frame."""
    done = _run("rank", "--table", "gemm_mma", "--out", str(out), *map(str, shard_paths))
    assert done.returncode == 0, done.stderr
    return read_ranked(path=out)


# profile -t/--top (kprofile's threshold) and --top-fraction ------------------------------------------

@pytest.mark.parametrize(("flag", "value", "message"), [
    ("-t", "-0.5", "--top: expected a threshold >= 0 (0 for off, the default)"),
    ("-t", "nan", "--top: expected a threshold >= 0 (0 for off, the default)"),
    ("-t", "inf", "--top: expected a threshold >= 0 (0 for off, the default)"),
    ("--top-fraction", "-1", "--top-fraction: expected a fraction in (0, 1], or 0 for off (the default)"),
    ("--top-fraction", "1.5", "--top-fraction: expected a fraction in (0, 1], or 0 for off (the default)"),
    ("--top-fraction", "nan", "--top-fraction: expected a fraction in (0, 1], or 0 for off (the default)"),
])
def test_profile_top_out_of_range_is_one_line(tmp_path: Path, shards: dict[str, list[Path]], flag: str, value: str,
                                              message: str) -> None:
    before = _files(tmp_path)
    result = _run("profile", str(shards["exhaustive"][0]), flag, value, "-c", "-o", str(tmp_path / "sel.yaml"),
                  "--out-dir", str(tmp_path / "out"), cwd=tmp_path)
    assert error_line(result) == f"error: {message}, got {float(value):g}"
    assert result.stdout == ""
    assert _files(tmp_path) == before


@pytest.mark.slow
def test_profile_top_zero_is_off_and_each_rule_names_itself(tmp_path: Path, shards: dict[str, list[Path]]) -> None:
    shard = str(shards["exhaustive"][0])
    off = _run("profile", shard, "--top", "0", cwd=tmp_path)
    assert off.returncode == 0, off.stderr
    assert "most common values" not in off.stdout and "gemm_mma: per shape" in off.stdout
    for flag, value, rule in (("--top", "2", "below min + 2*max"), ("--top", "0.05", "below min + 0.05*max"),
                              ("--top-fraction", "1", "the best 1 of each shape"),
                              ("--top-fraction", "0.25", "the best 0.25 of each shape")):
        shown = _run("profile", shard, flag, value, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        assert f"most common values among entries {rule}" in shown.stdout


# metrics: JSON, CSV and PNG together --------------------------------------------------------------

def test_atomic_write_all_writes_every_file_and_no_temp(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("old\n")
    atomic_write_all(outputs={tmp_path / "a.json": b"{}\n", tmp_path / "sub" / "b.csv": b"x\n"})
    assert _files(tmp_path) == {"a.json": b"{}\n", "sub/b.csv": b"x\n"}


def test_atomic_write_all_failure_leaves_every_old_file(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("old json\n")
    (tmp_path / "b.csv").write_text("old csv\n")
    (tmp_path / "blocker").write_text("a file, not a folder\n")
    before = _files(tmp_path)
    blocked = tmp_path / "blocker" / "c.png"
    with pytest.raises(TuneTableError) as info:
        atomic_write_all(outputs={tmp_path / "a.json": b"new\n", tmp_path / "b.csv": b"new\n", blocked: b"png"})
    assert str(info.value).startswith(f"{blocked}: cannot write")
    assert _files(tmp_path) == before  # old contents, and no temp file left beside them


def test_atomic_write_all_refuses_a_folder_or_a_repeated_target(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("old\n")
    (tmp_path / "plots").mkdir()
    before = _files(tmp_path)
    with pytest.raises(TuneTableError, match="cannot write: is a folder"):
        atomic_write_all(outputs={tmp_path / "a.json": b"new\n", tmp_path / "plots": b"png"})
    with pytest.raises(TuneTableError, match="named twice among the outputs"):
        atomic_write_all(outputs={tmp_path / "a.json": b"new\n", tmp_path / "x" / ".." / "a.json": b"other\n"})
    assert _files(tmp_path) == before


@pytest.mark.slow
def test_metrics_png_failure_leaves_old_json_and_csv(tmp_path: Path, shards: dict[str, list[Path]]) -> None:
    plain = [str(p) for p in shards["exhaustive"]]
    ranked = tmp_path / "ranked" / "gemm_mma.parquet"
    _rank(ranked, shards["exhaustive"])
    manifest = tmp_path / "gemm_mma.yaml"
    done = _run("select", "--table", "gemm_mma", "--ranked", str(ranked), "--out", str(manifest))
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    outputs = {"--json": out / "m.json", "--csv": out / "m.csv", "--png": out / "m.png"}
    flags = [str(a) for flag, path in outputs.items() for a in (flag, path)]
    done = _run("metrics", "--table", "gemm_mma", "--manifest", str(manifest), "--ranked", str(ranked), *flags, *plain)
    assert done.returncode == 0, done.stderr
    written = _files(out)
    assert sorted(written) == ["m.csv", "m.json", "m.png"] and written["m.png"].startswith(b"\x89PNG")
    assert json.loads(written["m.json"])["shapes_covered"] == len(SHAPES)

    (tmp_path / "blocker").write_text("a file, not a folder\n")
    blocked = tmp_path / "blocker" / "m.png"
    (out / "m.json").write_text("old json\n")
    (out / "m.csv").write_text("old csv\n")
    before = _files(tmp_path)
    flags = [str(a) for a in ("--json", out / "m.json", "--csv", out / "m.csv", "--png", blocked)]
    result = _run("metrics", "--table", "gemm_mma", "--manifest", str(manifest), "--ranked", str(ranked), *flags,
                  *plain)
    assert error_line(result).startswith(f"error: {blocked}: cannot write: ")
    assert _files(tmp_path) == before  # the old JSON and CSV, and no temp file beside them


# trace: unknown name -----------------------------------------------------------------------------

def test_check_traceable_names_tables_and_dispatch_lists() -> None:
    check_traceable(name="gemm_dispatch", tables=["gemm_mma"], dispatch=["gemm_dispatch"], path="params.yaml")
    check_traceable(name="gemm_mma", tables=["gemm_mma"], dispatch=[], path="params.yaml")
    with pytest.raises(TuneTableError) as info:
        check_traceable(name="nosuch", tables=["gemm_wgmma", "gemm_mma"], dispatch=[], path="p.yaml")
    assert str(info.value) == ("p.yaml: unknown table, dispatch list or selector 'nosuch' "
                               "(declared tables: gemm_mma, gemm_wgmma; dispatch lists: none; selectors: none)")


def test_trace_unknown_name_without_dispatch_lists(tmp_path: Path) -> None:
    params = gemm_mma_only_params(tmp_path, search=None)
    result = _run("trace", "nosuch", "0", "--params", str(params), cwd=tmp_path)
    assert error_line(result) == (f"error: {params}: unknown table, dispatch list or selector 'nosuch' "
                                   f"(declared tables: gemm_mma; dispatch lists: none; selectors: none)")
    assert result.stdout == ""


# rank: search columns ----------------------------------------------------------------------------

def test_rank_carries_the_search_columns_of_searched_shards(tmp_path: Path, shards: dict[str, list[Path]]) -> None:
    ranked = _rank(tmp_path / "searched.parquet", shards["searched"])
    provenance_end = ranked.columns.index(PROVENANCE_COLUMNS[-1])
    assert ranked.columns[provenance_end + 1:] == list(SEARCH_FIELDS)
    assert {name: ranked.schema[name] for name in SEARCH_FIELDS} == SEARCH_TYPES
    assert not set(SEARCH_FIELDS) & set(ranked_parameters(frame=ranked))
    # Each ranked row carries its own shard row's search values (the step is per configuration).
    for path in shards["searched"]:
        frame = read_shard(path)["merged_df"]
        kernels = frame[frame["kind"] == "kernel"]
        m = int(kernels["M"].iloc[0])
        mine = ranked.filter(pl.col("M") == m).sort("config_id")
        assert mine["config_id"].to_list() == sorted(kernels["config_id"])
        expected = kernels.sort_values("config_id")
        assert mine["search_step"].to_list() == [int(v) for v in expected["search_step"]]
        assert set(mine["search_strategy"]) == {"random"} and set(mine["search_seed"]) == {1}
        assert set(mine["search_max_fevals"]) == {4} and mine["search"].n_unique() == 1
        assert mine["search_time_limit"].is_null().all() and mine["search_top_k"].is_null().all()
    csv = pl.read_csv(tmp_path / "searched.csv")
    assert csv.columns == ranked.columns
    assert "search" not in (tmp_path / "searched.md").read_text().splitlines()[2]
    # The search columns change neither what select sees nor the data hash.
    assert data_hash(ranked=ranked) == data_hash(ranked=ranked.drop(SEARCH_FIELDS))


def test_rank_of_exhaustive_shards_has_no_search_column(tmp_path: Path, shards: dict[str, list[Path]]) -> None:
    plain = _rank(tmp_path / "plain.parquet", shards["exhaustive"])
    assert not set(SEARCH_FIELDS) & set(plain.columns)
    assert plain.columns[-1] == PROVENANCE_COLUMNS[-1]
    # Ranked together, rows of the exhaustive shard have null search columns, those of the searched one keep theirs.
    plain_shard, searched_shard = shards["exhaustive"][0], shards["searched"][1]
    plain_m, searched_m = (int(read_shard(p)["merged_df"]["M"].iloc[0]) for p in (plain_shard, searched_shard))
    assert plain_m != searched_m
    mixed = _rank(tmp_path / "mixed.parquet", [plain_shard, searched_shard])
    assert mixed.columns == [*plain.columns, *SEARCH_FIELDS]
    from_plain, from_search = mixed.filter(pl.col("M") == plain_m), mixed.filter(pl.col("M") == searched_m)
    assert from_plain.height == plain.filter(pl.col("M") == plain_m).height > 0
    assert all(from_plain[name].is_null().all() for name in SEARCH_FIELDS)
    assert from_search.height > 0 and from_search["search_strategy"].to_list() == ["random"] * from_search.height
