"""CLI input validation: profile --head/--tail, select --params, rank --table, metrics SHARDS.

Each bad input ends in exactly one ``error:`` line naming the file, flag or place (exit 2), and
nothing is written.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_repo import error_line
from result_rows import row, shard

from tunetable.params import load_params
from tunetable.yamlio import load_yaml_file

REPO = Path(__file__).resolve().parents[1]
DECLARED = ", ".join(sorted(load_params(REPO / "params.yaml")["tables"]))


def _run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """Run ``python -m tunetable ARGS`` in ``cwd``, capturing text output."""
    return subprocess.run([sys.executable, "-m", "tunetable", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def _files(root: Path) -> list[str]:
    """Every file under ``root``, relative, sorted."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture
def shard_file(tmp_path: Path) -> Path:
    """A real gemm_mma shard under a content-key folder (raw/gemm_mma/abcd1234/)."""
    rows = [row(m=1, config="ca", median=2.0), row(m=1, config="cb", median=1.0),
            row(m=1, config="cublas", median=1.5)]
    return shard(tmp_path / "raw" / "gemm_mma" / "abcd1234" / "M1_N4096_K4096.pkl", rows)


# profile --head / --tail ------------------------------------------------------------------------

@pytest.mark.parametrize(("flag", "value"), [("--head", "-2"), ("--tail", "-7"), ("--head", "-100")])
def test_profile_negative_row_count_other_than_minus_one(tmp_path: Path, shard_file: Path, flag: str,
                                                          value: str) -> None:
    before = _files(tmp_path)
    result = _run("profile", str(shard_file), flag, value, "-c", "-o", str(tmp_path / "sel.yaml"),
                  "--out-dir", str(tmp_path / "out"), cwd=tmp_path)
    assert error_line(result) == f"error: {flag}: expected a row count >= 0, or -1 for off (the default), got {value}"
    assert result.stdout == ""
    assert _files(tmp_path) == before


@pytest.mark.slow
@pytest.mark.parametrize("value", ["-1", "0"])
def test_profile_minus_one_and_zero_print_no_row_view(tmp_path: Path, shard_file: Path, value: str) -> None:
    result = _run("profile", str(shard_file), "--head", value, "--tail", value, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "gemm_mma" in result.stdout and "num invalid pkls: 0 out of num-files: 1" in result.stdout
    assert re.search(r"\b(best|worst) -?\d", result.stdout) is None  # the --head/--tail view titles
    shown = _run("profile", str(shard_file), "--head", "1", cwd=tmp_path)
    assert shown.returncode == 0 and "best 1" in shown.stdout


# select --params ---------------------------------------------------------------------------------

def _ranked(tmp_path: Path, shard_file: Path) -> Path:
    """The ranked parquet of ``shard_file`` (through ``tunetable rank``)."""
    out = tmp_path / "ranked" / "gemm_mma.parquet"
    done = _run("rank", "--table", "gemm_mma", "--out", str(out), str(shard_file))
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.slow
def test_select_table_with_missing_params_file(tmp_path: Path, shard_file: Path) -> None:
    ranked = _ranked(tmp_path, shard_file)
    missing = tmp_path / "no_such_params.yaml"
    out = tmp_path / "manifest.yaml"
    result = _run("select", "--table", "gemm_mma", "--ranked", str(ranked), "--out", str(out), "--params",
                  str(missing))
    assert error_line(result) == f"error: {missing}: no such file"
    assert not out.exists()


def test_select_dispatch_with_missing_params_file(tmp_path: Path) -> None:
    missing = tmp_path / "no_such_params.yaml"
    out = tmp_path / "dispatch.yaml"
    result = _run("select", "--dispatch", "gemm_dispatch", "--out", str(out), "--params", str(missing))
    assert error_line(result) == f"error: {missing}: no such file"
    assert not out.exists()


@pytest.mark.slow
def test_select_without_params_flag_or_file_keeps_builtin_defaults(tmp_path: Path, shard_file: Path) -> None:
    ranked = _ranked(tmp_path, shard_file)
    work = tmp_path / "work"
    work.mkdir()
    out = work / "manifest.yaml"
    result = _run("select", "--table", "gemm_mma", "--ranked", str(ranked), "--out", str(out), cwd=work)
    assert result.returncode == 0, result.stderr
    entries = load_yaml_file(out)["params"]
    assert [(e["M"], e["KERNEL"], e["CONFIG_ID"]) for e in entries] == [(1, "gemm_mma", "cb")]


# rank --table ------------------------------------------------------------------------------------

def test_rank_unknown_table(tmp_path: Path, shard_file: Path) -> None:
    out = tmp_path / "ranked" / "nosuch.parquet"
    result = _run("rank", "--table", "nosuch", "--out", str(out), str(shard_file))
    assert error_line(result) == f"error: params.yaml: tables: unknown table 'nosuch' (declared: {DECLARED})"
    assert not out.parent.exists()
    assert not any((REPO / "results" / "ranked").glob("nosuch*"))


def test_rank_unknown_table_against_explicit_params(tmp_path: Path, shard_file: Path) -> None:
    params = REPO / "params.yaml"
    out = tmp_path / "o.parquet"
    result = _run("rank", "--table", "nosuch", "--params", str(params), "--out", str(out), str(shard_file),
                  cwd=tmp_path)
    assert error_line(result) == f"error: {params}: tables: unknown table 'nosuch' (declared: {DECLARED})"
    assert not out.exists()


def test_rank_missing_params_file(tmp_path: Path, shard_file: Path) -> None:
    missing = tmp_path / "no_such_params.yaml"
    out = tmp_path / "o.parquet"
    result = _run("rank", "--table", "gemm_mma", "--params", str(missing), "--out", str(out), str(shard_file))
    assert error_line(result) == f"error: {missing}: no such file"
    assert not out.exists()


# metrics SHARDS ----------------------------------------------------------------------------------

def _metrics_outputs(root: Path) -> list[str]:
    """--json/--csv/--png options under ``root``."""
    return ["--json", str(root / "m.json"), "--csv", str(root / "m.csv"), "--png", str(root / "m.png")]


def test_metrics_without_shards_refuses_and_leaves_tracked_metrics(tmp_path: Path) -> None:
    # The hand-run case: defaults everywhere, in a project whose tracked metrics file exists.
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    tracked = tmp_path / "results" / "metrics" / "gemm_mma.json"
    tracked.parent.mkdir(parents=True)
    shutil.copy(REPO / "results" / "metrics" / "gemm_mma.json", tracked)
    before = _files(tmp_path)
    result = _run("metrics", "--table", "gemm_mma", cwd=tmp_path)
    assert error_line(result) == (
        "error: SHARDS: no raw shards given: the metrics record their content key, so pass the shards behind "
        "the ranked table (results/raw/gemm_mma/<key>/*.pkl)")
    assert _files(tmp_path) == before
    assert tracked.read_bytes() == (REPO / "results" / "metrics" / "gemm_mma.json").read_bytes()


def test_metrics_missing_shard(tmp_path: Path, shard_file: Path) -> None:
    missing = shard_file.with_name("M8_N4096_K4096.pkl")
    result = _run("metrics", "--table", "gemm_mma", *_metrics_outputs(tmp_path), str(shard_file), str(missing))
    assert error_line(result) == f"error: {missing}: SHARDS: no such shard"
    assert not any((tmp_path / name).exists() for name in ("m.json", "m.csv", "m.png"))


@pytest.mark.slow
def test_metrics_records_the_shards_content_key(tmp_path: Path, shard_file: Path) -> None:
    ranked = _ranked(tmp_path, shard_file)
    manifest = tmp_path / "manifest.yaml"
    done = _run("select", "--table", "gemm_mma", "--ranked", str(ranked), "--out", str(manifest))
    assert done.returncode == 0, done.stderr
    done = _run("metrics", "--table", "gemm_mma", "--manifest", str(manifest), "--ranked", str(ranked),
                *_metrics_outputs(tmp_path), str(shard_file))
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "m.json").read_text())
    assert summary["content_key"] == "abcd1234"
    assert (summary["entries"], summary["shapes_covered"]) == (1, 1)
