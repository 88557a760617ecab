"""Bad input and unwritable outputs end in one ``error:`` line naming the file, exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tunetable.atomic import atomic_write_text
from tunetable.errors import TuneTableError

REPO = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m tunetable ARGS`` from the repository root, capturing text output."""
    return subprocess.run([sys.executable, "-m", "tunetable", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)


def _assert_one_error_line(result: subprocess.CompletedProcess[str], *, names: str) -> None:
    """Exit 2, stderr is exactly one ``error:`` line that names ``names``, and no traceback anywhere."""
    assert "Traceback" not in result.stderr + result.stdout
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:"), lines[0]
    assert names in lines[0], lines[0]


@pytest.fixture
def blocked_dir(tmp_path: Path) -> Path:
    """A folder path that cannot be created because its parent is a regular file."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder\n")
    return blocker / "sub"


def test_atomic_write_to_uncreatable_folder_is_a_tunetable_error(blocked_dir: Path) -> None:
    target = blocked_dir / "out.json"
    with pytest.raises(TuneTableError) as info:
        atomic_write_text(target, "{}\n")
    assert str(info.value).startswith(f"{target}: cannot write")
    assert (blocked_dir.parent).read_text() == "a file, not a folder\n"


def test_grid_out_under_a_file(blocked_dir: Path) -> None:
    target = blocked_dir / "grid.json"
    _assert_one_error_line(_run("grid", "--table", "gemm_mma", "--out", str(target)), names=str(target))


def test_profile_merge_output_under_a_file(blocked_dir: Path) -> None:
    target = blocked_dir / "merged.yaml"
    result = _run("profile", "manifests/gemm_mma.yaml", "--merge", "-o", str(target))
    _assert_one_error_line(result, names=str(target))


def test_select_missing_ranked_writes_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "missing.parquet"
    out = tmp_path / "manifest.yaml"
    result = _run("select", "--table", "gemm_mma", "--ranked", str(missing), "--out", str(out))
    _assert_one_error_line(result, names=str(missing))
    assert not out.exists()


def test_codegen_params_not_a_mapping(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("just a line of text\n")
    _assert_one_error_line(_run("codegen", "--all", "--params", str(params)), names=str(params))


def test_trace_index_out_of_range() -> None:
    result = _run("trace", "gemm_mma", "999999")
    _assert_one_error_line(result, names="999999")


def test_grid_unknown_table() -> None:
    _assert_one_error_line(_run("grid", "--table", "no_such_table"), names="params.yaml")


def test_metrics_manifest_with_a_non_integer_shape(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text("params:\n  - {M: 1, M_END: 64, N: [8, 16], K: 8, CONFIG_ID: c0}\n")
    outputs = [tmp_path / "m.json", tmp_path / "m.csv", tmp_path / "m.png"]
    shard = tmp_path / "raw" / "gemm_mma" / "abcd1234" / "M1_N4096_K4096.pkl"  # metrics names its folder only
    shard.parent.mkdir(parents=True)
    shard.write_bytes(b"")
    result = _run("metrics", "--table", "gemm_mma", "--manifest", str(manifest), "--json", str(outputs[0]),
                  "--csv", str(outputs[1]), "--png", str(outputs[2]), str(shard))
    _assert_one_error_line(result, names=f"{manifest}: params[0]")
    assert "N" in result.stderr
    assert not any(path.exists() for path in outputs)


def test_audit_missing_root(tmp_path: Path) -> None:
    missing = tmp_path / "no_such_repo"
    _assert_one_error_line(_run("audit", "HEAD", "--root", str(missing)), names=str(missing))
