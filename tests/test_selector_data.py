"""The shape selector's data file: typed like the tables on both sides (codegen, runtime), refused when tampered.

Codegen checks the file against its manifest's sha256 and every candidate against the typed fields before it
records the file in kernels/tuning_configs.py; the runtime checks the sha256 codegen recorded and the same
fields on first use. Any problem is one error line naming the file and the candidate.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tunetable import codegen
from tunetable.errors import TuneTableError
from tunetable.kernels.families.common import SelectorFile
from tunetable.kernels.runtime import decide
from tunetable.kernels.tuning_configs import SELECTOR_FILES
from tunetable.params import load_params, selector_spec
from tunetable.selector_manifest import load_selector_manifest

REPO = Path(__file__).resolve().parents[1]
PARAMS = load_params(REPO / "params.yaml")
SPEC = selector_spec(PARAMS, "gemm_selector")


def edited_files(tmp_path: Path, edit) -> tuple[Path, Path]:
    """A copy of the data file with its first three candidates, ``edit(candidates)`` applied, and a manifest naming
    it (its sha256), so that the typed check is what refuses a bad value."""
    data = json.loads((REPO / SPEC.data).read_bytes())
    data["candidates"] = data["candidates"][:3]
    edit(data["candidates"])
    text = json.dumps(data) + "\n"
    path = tmp_path / "gemm_selector.json"
    path.write_text(text)
    manifest = (REPO / SPEC.codegen.manifest).read_text()
    sha = load_selector_manifest(REPO / SPEC.codegen.manifest).sha256
    manifest = manifest.replace(sha, hashlib.sha256(text.encode()).hexdigest()).replace(
        f"candidates: {len(decide.selector_candidates())}", "candidates: 3")
    (tmp_path / "gemm_selector.yaml").write_text(manifest)
    return path, tmp_path / "gemm_selector.yaml"


def selector_job(tmp_path: Path, edit) -> codegen.SelectorJob:
    """The selector's codegen job over an edited copy of its data file and a manifest naming that copy."""
    data_path, manifest_path = edited_files(tmp_path, edit)
    (job,) = codegen.jobs_from_params(params=PARAMS, params_path=REPO / "params.yaml", names=["gemm_selector"])
    return dataclasses.replace(job, data_path=data_path, manifest_path=manifest_path)


def test_the_region_records_the_data_file_as_literals(tmp_path: Path) -> None:
    job = selector_job(tmp_path, lambda candidates: None)
    region = codegen.render_job(job).region
    digest = hashlib.sha256(job.data_path.read_bytes()).hexdigest()
    assert f'sha256="{digest}",' in region and "candidates=3," in region
    assert '("gemm_mma_data_hash", "6fd842800e72b5e8"),' in region and "BIAS_TERMS" not in region


@pytest.mark.parametrize("edit, message", [
    (lambda c: c[1]["BIAS_TERMS"][0].__setitem__(2, "__import__('os').system('true')"),
     "candidates[1]: BIAS_TERMS: row 0: expected a finite number, got \"__import__('os').system('true')\""),
    (lambda c: c[2]["CUBLAS_TERMS"].__setitem__(1, [4096, 4096, 0.5]),
     "candidates[2]: CUBLAS_TERMS: row 1: expected 6 numbers, got [4096, 4096, 0.5]"),
    (lambda c: c[0]["BIAS_TERMS"][0].__setitem__(0, 0), "candidates[0]: BIAS_TERMS: row 0: expected an integer in"),
    (lambda c: c[0].__setitem__("BLOCK_M", "16 + 0"), "candidates[0]: BLOCK_M: expected an integer, got '16 + 0'"),
    (lambda c: c[0].__setitem__("BIAS", 0.1), "candidates[0]: BIAS: not a field of selector gemm_selector"),
    (lambda c: c[1].__setitem__("KERNEL", "nosuch"), "candidates[1]: KERNEL 'nosuch' is not one of"),
    (lambda c: c[0].__setitem__("TABLE", "gemm_wgmma"), "candidates[0]: TABLE: 'gemm_wgmma' is not one of gemm_mma"),
    (lambda c: c[0].__setitem__("BLOCK_N", 64), "candidates[0]: CONFIG_ID c1746f9e36f is not the id of the entry's"),
])
def test_a_bad_data_file_value_is_one_error_naming_the_candidate(tmp_path: Path, edit, message) -> None:
    job = selector_job(tmp_path, edit)
    with pytest.raises(TuneTableError) as info:
        codegen.render_job(job)
    assert str(info.value).startswith(f"{SPEC.data}: {message}")
    assert "\n" not in str(info.value)


def test_a_data_file_that_is_not_the_one_the_manifest_names_is_refused(tmp_path: Path) -> None:
    job = selector_job(tmp_path, lambda candidates: None)
    job.data_path.write_text(job.data_path.read_text().replace("1.0", "1.00", 1))
    with pytest.raises(TuneTableError, match=r"gemm_selector.json: sha256 \w+\.\.\. is not the \w+\.\.\. that "):
        codegen.render_job(job)


def test_the_codegen_cli_refuses_a_tampered_data_file_and_writes_nothing(tmp_path: Path) -> None:
    """`tunetable codegen --all` on a project whose data file was edited by hand: exit 2, target unchanged."""
    for item in ("params.yaml", "manifests", "kernels"):
        source = REPO / item
        (shutil.copytree if source.is_dir() else shutil.copy)(source, tmp_path / item)
    data = tmp_path / SPEC.data
    data.write_text(data.read_text().replace('"REGISTERS":50', '"REGISTERS":"__import__(\'os\')"', 1))
    target = tmp_path / SPEC.codegen.target
    before = target.read_bytes()
    done = subprocess.run([sys.executable, "-m", "tunetable", "codegen", "--all", "--params", "params.yaml"],
                          cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert f"{SPEC.data}: sha256 " in done.stderr and "manifests/gemm_selector.yaml" in done.stderr
    assert target.read_bytes() == before


def test_the_runtime_refuses_a_data_file_codegen_did_not_check(monkeypatch: pytest.MonkeyPatch) -> None:
    record = SELECTOR_FILES["gemm_selector"]
    monkeypatch.setitem(SELECTOR_FILES, "gemm_selector", dataclasses.replace(record, sha256="0" * 64))
    with pytest.raises(decide.SelectorDataError, match=r"gemm_selector.json: sha256 [0-9a-f]{64} is not the 0{64}"):
        decide.selector_candidates("gemm_selector")
    monkeypatch.setitem(SELECTOR_FILES, "gemm_selector", dataclasses.replace(record, path="data/absent.json"))
    with pytest.raises(decide.SelectorDataError, match="absent.json: cannot read the shape selector's data file"):
        decide.selector_candidates("gemm_selector")


def test_the_runtime_checks_the_typed_fields_on_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data_path, _ = edited_files(tmp_path, lambda c: c[0].__setitem__("SPLIT_K", 0.5))
    raw = data_path.read_bytes()
    record = SelectorFile(path=str(data_path), sha256=hashlib.sha256(raw).hexdigest(), candidates=3, provenance=())
    monkeypatch.setitem(SELECTOR_FILES, "gemm_selector", record)
    with pytest.raises(decide.SelectorDataError, match=r"candidates\[0\]: SPLIT_K: expected an integer, got 0.5"):
        decide.selector_candidates("gemm_selector")


def test_the_runtime_loads_the_data_file_lazily_and_once() -> None:
    """`import tunetable` reads no data file: the selector is built on first use, then kept."""
    probe = ("import sys, tunetable.kernels.runtime.decide as d; assert ('selector', 'gemm_selector') not in d._state;"
             " first = d.shape_selector(); assert d.shape_selector() is first; print(len(first.candidates))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == SELECTOR_FILES["gemm_selector"].candidates == 497
