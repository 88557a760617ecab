"""params.yaml loading and validation: one clear line naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tunetable.errors import TuneTableError
from tunetable.params import load_params, table_spec, table_specs
from tunetable.yamlio import load_yaml_file


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_repo_params_is_valid(repo_root: Path) -> None:
    params = load_params(repo_root / "params.yaml")
    specs = table_specs(params)
    assert [s.name for s in specs] == list(params["tables"])
    gemm = table_spec(params, "gemm_mma")
    assert gemm.arch == "sm_90a"
    assert (4096, 4096, 4096) in gemm.shapes()
    assert len(gemm.shapes()) == len(gemm.nk) * len(gemm.m_values)


def test_unknown_table_lists_declared(repo_root: Path) -> None:
    params = load_params(repo_root / "params.yaml")
    with pytest.raises(TuneTableError, match=r"unknown table 'nope' \(declared: gemm_mma"):
        table_spec(params, "nope")


def test_bad_value_names_the_key(repo_root: Path, tmp_path: Path) -> None:
    data = load_yaml_file(repo_root / "params.yaml")
    data["tables"]["gemm_mma"]["shapes"]["M"][2] = -5
    path = _write(tmp_path, data)
    with pytest.raises(TuneTableError) as info:
        load_params(path)
    message = str(info.value)
    assert message.startswith(f"{path}: tables.gemm_mma.shapes.M[2]: ")
    assert "\n" not in message


def test_unknown_top_level_key(repo_root: Path, tmp_path: Path) -> None:
    data = load_yaml_file(repo_root / "params.yaml")
    data["benchh"] = {}
    with pytest.raises(TuneTableError, match="benchh"):
        load_params(_write(tmp_path, data))


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("tables:\n  gemm: [1, 2\nbench: {}\n")
    with pytest.raises(TuneTableError, match=r"params.yaml: line \d+: malformed YAML"):
        load_params(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TuneTableError, match="no such file"):
        load_params(tmp_path / "absent.yaml")


def test_top_level_must_be_mapping(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(TuneTableError, match="expected a YAML mapping"):
        load_params(path)
