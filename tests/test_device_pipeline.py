"""A second device's tables through the main job, codegen, dvc.yaml and the runtime (docs/devices.md), end to end.

The throw-away project is the repository without the H100's files (as before they were recorded), and
timings are never made up, so it declares a second device, ``nvl``, whose match fits the committed
recordings' GPU ("NVIDIA H200"), and copies those recordings under its name, table by table: first gemm_mma
alone (a partial device), then all three (a complete one). A third device, ``h100``, stays without
recordings until a recording made on the H200 is put under its name, which must be refused. The primary
device's files stay byte for byte what the repository holds.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pipeline_repo import NO_RECORDING, RECORDING, REPO, dvc, git, make_project, snakemake, without_other_devices

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not RECORDING.is_file(), reason=NO_RECORDING)]

TABLES = ("gemm_mma", "gemm_wgmma", "gemm_wgmma_swap")
PRIMARY_FILES = [*(f"manifests/{name}.yaml" for name in (*TABLES, "gemm_dispatch", "gemm_selector")),
                 *(f"results/metrics/{name}.json" for name in (*TABLES, "gemm_dispatch")),
                 *(f"results/plots/{name}.{ext}" for name in (*TABLES, "gemm_dispatch") for ext in ("csv", "png")),
                 "kernels/data/gemm_selector.json"]


def _devices(data: dict) -> None:
    """Params edit: h200 (primary), nvl (matches "NVIDIA H200"), h100 (no recordings)."""
    data["devices"] = {"h200": data["devices"]["h200"],
                       "nvl": {"arch": "sm_90a", "match": {"name": "NVIDIA H200", "sm_count": 132},
                               "fallback": ["h200"]},
                       "h100": data["devices"]["h100"]}


def _record_as(root: Path, *, device: str, table: str) -> None:
    """The committed H200 recording of ``table`` (and its sidecar) under ``device``'s name."""
    for suffix in (".parquet", ".json"):
        shutil.copyfile(REPO / f"data/recordings/h200_{table}{suffix}",
                        root / f"data/recordings/{device}_{table}{suffix}")


def _outside_device_regions(text: str) -> str:
    """A generated file without its DEVICES and DEVICE-TABLES regions (the parts a device list may change)."""
    for stem in ("TUNING-DEVICES", "TUNING-DEVICE-TABLES"):
        text = re.sub(rf"# BEGIN-{stem}\n.*?# END-{stem}\n", "", text, flags=re.S)
    return text


def _runtime(root: Path, script: str) -> str:
    """Run ``script`` with the project's generated tables as tunetable.kernels.tuning_configs; its stdout."""
    prelude = textwrap.dedent(f"""
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("tunetable.kernels.tuning_configs",
                                                      "{root}/kernels/tuning_configs.py")
        generated = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = generated
        spec.loader.exec_module(generated)
        from tunetable.kernels.runtime import decide
    """)
    done = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(script)], cwd=root, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository as it was before the H100's recordings landed (its files removed, committed so): the
    primary's files as the repository holds them; the generated file and dvc.yaml regenerate without h100's."""
    root = make_project(tmp_path_factory.mktemp("devices"), remote=None, params_edit=_devices)
    removed = without_other_devices(root)     # nvl has none yet
    assert removed and all(path.name.startswith("h100_") or ".h100." in path.name for path in removed)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "no h100 recording yet", cwd=root)
    return root


def test_a_partial_device_gets_its_tables_and_its_fallback_serves_it(project: Path) -> None:
    _record_as(project, device="nvl", table="gemm_mma")
    done = snakemake("--cores", "2", cwd=project)
    assert ("DEVICE nvl: tables gemm_mma.nvl replay its recordings (nvl_gemm_mma.parquet); not recorded yet: "
            "gemm_wgmma, gemm_wgmma_swap") in done.output
    assert "SKIPPING device h100: no recording yet" in done.output
    for path in PRIMARY_FILES:
        assert (project / path).read_bytes() == (REPO / path).read_bytes(), path
    generated = (project / "kernels/tuning_configs.py").read_text()
    committed = (REPO / "kernels/tuning_configs.py").read_text()
    assert _outside_device_regions(generated) == _outside_device_regions(committed)
    assert 'RECORDED_DEVICES: tuple[str, ...] = ("h200",)' in generated
    assert "# BEGIN-NVL-TUNING-LIST-GEMM_MMA" in generated and 'DEVICE_TABLES["nvl"]' not in generated
    for path in ("manifests/gemm_mma.nvl.yaml", "results/metrics/gemm_mma.nvl.json", "results/plots/gemm_mma.nvl.png"):
        assert (project / path).is_file(), path
    assert not (project / "manifests/gemm_dispatch.nvl.yaml").exists()
    # Same recording, same winners: the device's manifest holds the primary's entries under its own name.
    assert (project / "manifests/gemm_mma.nvl.yaml").read_text().split("params:")[1] == \
        (REPO / "manifests/gemm_mma.yaml").read_text().split("params:")[1]
    out = _runtime(project, """
        print(decide.serving_device("nvl"), decide.dispatcher(device="nvl") is decide.dispatcher(device="h200"))
    """)
    assert out.split() == ["h200", "True"]


def test_a_complete_device_gets_its_dispatch_list_selector_and_runtime_entry(project: Path) -> None:
    for table in TABLES[1:]:
        _record_as(project, device="nvl", table=table)
    done = snakemake("--cores", "2", cwd=project)
    assert ("DEVICE nvl: its tables replay its recordings (nvl_gemm_mma.parquet, nvl_gemm_wgmma.parquet, "
            "nvl_gemm_wgmma_swap.parquet), with its own dispatch lists and selectors") in done.output
    assert "Nothing to be done" in snakemake("--cores", "2", cwd=project).output      # a no-op on the second run
    for path in PRIMARY_FILES:
        assert (project / path).read_bytes() == (REPO / path).read_bytes(), path
    generated = (project / "kernels/tuning_configs.py").read_text()
    assert 'RECORDED_DEVICES: tuple[str, ...] = ("h200", "nvl")' in generated
    for marker in ("BEGIN-NVL-TUNING-LIST-GEMM_SWAP", "BEGIN-NVL-TUNING-LIST-GEMM_DISPATCH",
                   "BEGIN-NVL-TUNING-SELECTOR-GEMM_SELECTOR"):
        assert generated.count(marker) == 1, marker
    for path in ("manifests/gemm_dispatch.nvl.yaml", "manifests/gemm_selector.nvl.yaml",
                 "kernels/data/gemm_selector.nvl.json", "results/metrics/gemm_dispatch.nvl.json"):
        assert (project / path).is_file(), path
    dvc_yaml = (project / "dvc.yaml").read_text()
    for line in ("      - data/recordings/nvl_gemm_wgmma.parquet", "      - results/metrics/gemm_dispatch.nvl.json:",
                 "      - kernels/data/gemm_selector.nvl.json:", "      - manifests/gemm_selector.nvl.yaml"):
        assert line in dvc_yaml.splitlines(), line
    out = _runtime(project, """
        nvl, h200 = decide.dispatcher(device="nvl"), decide.dispatcher(device="h200")
        print(decide.serving_device("nvl"), nvl is h200,
              nvl.tables["gemm_mma"].entries == tuple(generated.DEVICE_TABLES["nvl"].tables["gemm_mma"]),
              nvl.choices == tuple(generated.DEVICE_TABLES["nvl"].dispatch["gemm_dispatch"]),
              len(decide.selector_candidates(device="nvl")) == generated.DEVICE_TABLES["nvl"].selector_files[
                  "gemm_selector"].candidates,
              nvl.decide(m=64, n=4096, k=4096).entry == h200.decide(m=64, n=4096, k=4096).entry)
    """)
    assert out.split() == ["nvl", "False", "True", "True", "True", "True"]


def test_dvc_repro_builds_the_same_and_metrics_name_the_device(project: Path) -> None:
    git("add", "-A", cwd=project)
    git("commit", "-q", "-m", "nvl tables", cwd=project)
    dvc("repro", cwd=project)
    assert git("status", "--porcelain", "--", "manifests", "kernels", "results/metrics", cwd=project).output == ""
    assert "up to date" in dvc("status", cwd=project).output
    shown = dvc("metrics", "show", cwd=project).output
    assert "results/metrics/gemm_mma.nvl.json" in shown and "results/metrics/gemm_dispatch.nvl.json" in shown


def test_a_recording_made_on_another_device_is_refused_naming_it(project: Path) -> None:
    _record_as(project, device="h100", table="gemm_mma")
    done = snakemake("-n", "--cores", "2", cwd=project, check=False)
    assert done.returncode != 0
    assert ("error: data/recordings/h100_gemm_mma.parquet: refused for table gemm_mma.h100: recorded on NVIDIA H200 "
            "(its sidecar's device), which is device h200, not h100") in done.output
