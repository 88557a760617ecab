"""The device dimension: params.yaml's devices, how a GPU is recognised, recordings per device, the fallback rule."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

from tunetable.errors import TuneTableError
from tunetable.kernels.runtime import launch
from tunetable.inputs import sidecar_path
from tunetable.bench import devices as bench_devices
from tunetable.kernels.families.devices import (
    GIB,
    Ceilings,
    DeviceMatch,
    DeviceSpec,
    GpuInfo,
    gpu_info,
    nearest_device,
    recognise,
    recognise_gpu,
    recording_path,
    serving_device,
)
from tunetable.params import device_specs, load_params, primary_device, table_recordings, table_spec
from tunetable.yamlio import load_yaml_file

REPO = Path(__file__).resolve().parents[1]
PARAMS = load_params(REPO / "params.yaml")
DEVICES = device_specs(PARAMS)

# What the driver reports (names as nvidia-smi prints them; memory as cuDeviceTotalMem returns it).
H200 = {"name": "NVIDIA H200", "sm_count": 132, "memory_bytes": 150_754_820_096}
H100_SXM = {"name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "memory_bytes": 85_031_714_816}
H100_PCIE = {"name": "NVIDIA H100 PCIe", "sm_count": 114, "memory_bytes": 85_031_714_816}
H20 = {"name": "NVIDIA H20", "sm_count": 78, "memory_bytes": 102 * GIB}


def test_params_declare_the_h200_first_and_the_h100() -> None:
    assert [spec.key for spec in DEVICES] == ["h200", "h100"]
    assert primary_device(PARAMS) == "h200"
    assert all(spec.arch == "sm_90a" for spec in DEVICES)
    assert dict((spec.key, spec.fallback) for spec in DEVICES) == {"h200": (), "h100": ("h200",)}


def test_a_gpu_is_recognised_by_name_sm_count_and_memory() -> None:
    assert recognise(**H200, devices=DEVICES) == "h200"
    assert recognise(**H100_SXM, devices=DEVICES) == "h100"
    assert recognise(**H100_PCIE, devices=DEVICES) is None      # 114 SMs: not the H100 SXM the table is for
    assert recognise(**H20, devices=DEVICES) is None
    # An H200 name with 80 GiB is no H200 (the memory range is part of the match).
    assert recognise(name="NVIDIA H200", sm_count=132, memory_bytes=80 * GIB, devices=DEVICES) is None


class FakeDriver(types.ModuleType):
    """pycuda.driver as far as the GPU's identity goes: GPUs reporting what ``gpus`` says, (major, minor) each."""

    class device_attribute:  # noqa: N801 - pycuda's name
        MULTIPROCESSOR_COUNT = "MULTIPROCESSOR_COUNT"

    def __init__(self, gpus: list[tuple[dict, tuple[int, int]]]) -> None:
        super().__init__("pycuda.driver")
        self.gpus = gpus
        self.initialised = False

    def init(self) -> None:
        self.initialised = True

    def Device(self, ordinal: int) -> types.SimpleNamespace:  # noqa: N802 - pycuda's name
        report, capability = self.gpus[ordinal]
        attributes = {self.device_attribute.MULTIPROCESSOR_COUNT: report["sm_count"]}
        return types.SimpleNamespace(name=lambda: report["name"], get_attribute=attributes.__getitem__,
                                     total_memory=lambda: report["memory_bytes"],
                                     compute_capability=lambda: capability)


def test_the_runtime_and_the_bench_read_a_gpu_s_identity_through_one_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu_info reads what the driver reports; the bench's gpu_report (scripts/device_record_h100.sh) is it."""
    fake = FakeDriver([(H200, (9, 0)), (H100_SXM, (9, 0)), (H100_PCIE, (9, 0))])
    assert gpu_info(fake, 1) == GpuInfo(ordinal=1, name="NVIDIA H100 80GB HBM3", sm_count=132,
                                        memory_bytes=85_031_714_816, compute_capability=(9, 0))
    assert gpu_info(fake, 1).describe() == "cuda:1 (NVIDIA H100 80GB HBM3, 132 SMs, 79.2 GiB, sm_90)"
    assert launch.gpu_info is gpu_info
    monkeypatch.setitem(sys.modules, "pycuda", types.SimpleNamespace(driver=fake))
    monkeypatch.setitem(sys.modules, "pycuda.driver", fake)
    assert bench_devices.gpu_report(1) == gpu_info(fake, 1) and fake.initialised
    assert [bench_devices.recognised_device(PARAMS, ordinal) for ordinal in range(3)] == ["h200", "h100", None]
    assert recognise_gpu(gpu_info(fake, 0), devices=DEVICES) == recognise(**H200, devices=DEVICES) == "h200"


def test_the_recording_script_names_the_device_and_the_gpu_the_driver_reports(tmp_path: Path) -> None:
    """scripts/device_record_h100.sh's device line, its Python run against a pycuda.driver that reports an H100."""
    script = (REPO / "scripts" / "device_record_h100.sh").read_text()
    code = re.search(r'DEVICE=\$\(python3 -c "(.*?)" 2>>', script, re.S).group(1)
    package = tmp_path / "pycuda"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "driver.py").write_text(
        "class device_attribute:\n    MULTIPROCESSOR_COUNT = 16\n"
        "def init():\n    pass\n"
        "class Device:\n    def __init__(self, ordinal):\n        pass\n"
        "    def name(self):\n        return 'NVIDIA H100 80GB HBM3'\n"
        "    def get_attribute(self, attribute):\n        return {16: 132}[attribute]\n"
        "    def total_memory(self):\n        return 85_031_714_816\n"
        "    def compute_capability(self):\n        return (9, 0)\n")
    shell = f'DEVICE=$("{sys.executable}" -c "{code}"); echo "$DEVICE"; echo "${{DEVICE%% |*}}"'   # as the script
    done = subprocess.run(["bash", "-c", shell],
                          cwd=REPO, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.stdout.splitlines() == ["h100 | cuda:0 (NVIDIA H100 80GB HBM3, 132 SMs, 79.2 GiB, sm_90)", "h100"], done


def test_recordings_are_derived_per_device_and_the_primary_one_keeps_todays_path() -> None:
    assert recording_path(device="h100", table="gemm_mma") == "data/recordings/h100_gemm_mma.parquet"
    assert sidecar_path(Path("data/recordings/h100_gemm_mma.parquet")) == Path("data/recordings/h100_gemm_mma.json")
    assert table_recordings(PARAMS, "gemm_wgmma") == (
        ("h200", "data/recordings/h200_gemm_wgmma.parquet"), ("h100", "data/recordings/h100_gemm_wgmma.parquet"))
    for name in PARAMS["tables"]:
        spec = table_spec(PARAMS, name)
        assert spec.recording == f"data/recordings/h200_{name}.parquet" and (REPO / spec.recording).is_file()


def test_a_device_without_tables_is_served_by_its_fallback_else_its_arch() -> None:
    assert serving_device(device="h200", recorded=("h200",), devices=DEVICES) == "h200"
    assert serving_device(device="h100", recorded=("h200",), devices=DEVICES) == "h200"
    assert serving_device(device="h100", recorded=("h200", "h100"), devices=DEVICES) == "h100"
    assert serving_device(device="h200", recorded=("h100",), devices=DEVICES) == "h100"   # same arch, no fallback
    assert serving_device(device=None, recorded=("h200",), devices=DEVICES, arch="sm_90a") == "h200"
    assert serving_device(device=None, recorded=("h200",), devices=DEVICES, arch="sm_100a") is None
    # An unrecognised GPU with what its driver reports: the nearest recorded device (SM count, then memory).
    both = ("h200", "h100")
    assert serving_device(device=None, recorded=both, devices=DEVICES, arch="sm_90a") == "h200"   # nothing given
    pcie = {"sm_count": H100_PCIE["sm_count"], "memory_bytes": H100_PCIE["memory_bytes"]}
    assert serving_device(device=None, recorded=both, devices=DEVICES, arch="sm_90a", **pcie) == "h100"
    assert serving_device(device=None, recorded=both, devices=DEVICES, arch="sm_90a", sm_count=132,
                          memory_bytes=141 * GIB) == "h200"
    assert serving_device(device=None, recorded=("h200",), devices=DEVICES, arch="sm_90a", **pcie) == "h200"
    assert serving_device(device=None, recorded=both, devices=DEVICES, arch="sm_100a", **pcie) is None


def test_nearest_device_weighs_the_sm_count_before_memory_and_ties_by_declaration() -> None:
    a = DeviceSpec(key="a", arch="sm_90a", match=DeviceMatch(name="A", sm_count=132, min_memory_gib=130))
    b = DeviceSpec(key="b", arch="sm_90a", match=DeviceMatch(name="B", sm_count=114, max_memory_gib=96))
    c = DeviceSpec(key="c", arch="sm_90a", match=DeviceMatch(name="C", sm_count=132, max_memory_gib=96))
    assert nearest_device(sm_count=132, memory_bytes=80 * GIB, candidates=(a, b)) == "a"   # SMs before memory
    assert nearest_device(sm_count=114, memory_bytes=141 * GIB, candidates=(a, b)) == "b"
    assert nearest_device(sm_count=132, memory_bytes=80 * GIB, candidates=(a, c)) == "c"   # then memory: 0 octaves
    assert nearest_device(sm_count=132, memory_bytes=110 * GIB, candidates=(a, c)) == "c"  # 0.196 octaves against 0.241
    assert nearest_device(sm_count=132, memory_bytes=113 * GIB, candidates=(a, c)) == "a"  # 0.202 against 0.235
    assert nearest_device(sm_count=100, memory_bytes=96 * GIB, candidates=(c, c)) == "c"
    assert nearest_device(sm_count=132, memory_bytes=80 * GIB, candidates=()) is None


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_fallback_naming_no_declared_device_is_one_error_naming_the_place(tmp_path: Path) -> None:
    data = load_yaml_file(REPO / "params.yaml")
    data["devices"]["h100"]["fallback"] = ["a100"]
    with pytest.raises(TuneTableError) as info:
        load_params(_write(tmp_path, data))
    assert str(info.value) == (f"{tmp_path / 'params.yaml'}: devices.h100.fallback[0]: fallback 'a100' is not "
                               "another declared device (declared: h100, h200)")


def test_each_device_declares_its_measured_ceilings_and_the_h200_s_are_the_models_reference() -> None:
    # The H100's from benchmarks/results/device_ceilings.h100.json (the highest rounds measured there); the H200's
    # are DESIGN.md's, the constants the performance model and the selector are fitted in.
    import json

    from tunetable.kernels import perfmodel

    ceilings = {spec.key: spec.ceilings for spec in DEVICES}
    measured = json.loads((REPO / "benchmarks" / "results" / "device_ceilings.h100.json").read_text())["proposed"]
    assert ceilings["h100"] == Ceilings(copy_tb_s=measured["copy_tb_s"], tflops=measured["tflops"])
    assert ceilings["h200"] == Ceilings(copy_tb_s=4.13, tflops=800.0)
    for m, n, k in ((1, 4096, 4096), (250, 18944, 3584), (8192, 8192, 8192)):
        assert perfmodel.roofline_floor_s(m=m, n=n, k=k, ceilings=ceilings["h200"]) == perfmodel.roofline_floor_s(
            m=m, n=n, k=k)   # bit-equal: declaring the H200's changes no floor
    # A memory-bound shape's floor on the H100 is the H200's times the copy bandwidths' ratio; 250 x 18944 x 3584
    # is compute-bound on the H200's ceilings (33.9 GFLOP / 800 TFLOP/s = 42.4 µs > 147 MB / 4.13 TB/s) and
    # memory-bound on the H100's (147 MB / 3.04 TB/s = 48.4 µs).
    decode = perfmodel.roofline_floor_s(m=1, n=4096, k=4096, ceilings=ceilings["h100"])
    assert decode == pytest.approx(perfmodel.roofline_floor_s(m=1, n=4096, k=4096) * 4.13 / 3.04, rel=1e-12)
    assert perfmodel.roofline_floor_s(m=250, n=18944, k=3584) == pytest.approx(2 * 250 * 18944 * 3584 / 800e12)
    h100 = perfmodel.roofline_floor_s(m=250, n=18944, k=3584, ceilings=ceilings["h100"])
    assert h100 == pytest.approx((250 * 3584 + 18944 * 3584 + 250 * 18944) * 2 / 3.04e12, rel=1e-12)


@pytest.mark.parametrize(("ceilings", "message"), [
    ({"copy_tb_s": 0, "tflops": 800}, r"devices.h100.ceilings.copy_tb_s: 0 is less than or equal to the minimum of 0"),
    ({"copy_tb_s": 3.0}, r"devices.h100.ceilings: 'tflops' is a required property"),
    ({"copy_tb_s": "fast", "tflops": 800}, r"devices.h100.ceilings.copy_tb_s: 'fast' is not of type 'number'"),
])
def test_a_bad_ceiling_is_one_schema_error_naming_its_key(tmp_path: Path, ceilings: dict, message: str) -> None:
    data = load_yaml_file(REPO / "params.yaml")
    data["devices"]["h100"]["ceilings"] = ceilings
    with pytest.raises(TuneTableError, match=message):
        load_params(_write(tmp_path, data))


def test_a_device_without_ceilings_has_the_reference_ones(tmp_path: Path) -> None:
    data = load_yaml_file(REPO / "params.yaml")
    del data["devices"]["h100"]["ceilings"]
    specs = {spec.key: spec for spec in device_specs(load_params(_write(tmp_path, data)))}
    assert specs["h100"].ceilings is None and specs["h200"].ceilings == Ceilings(copy_tb_s=4.13, tflops=800.0)


def test_a_device_match_without_a_name_is_a_schema_error(tmp_path: Path) -> None:
    data = load_yaml_file(REPO / "params.yaml")
    del data["devices"]["h100"]["match"]["name"]
    with pytest.raises(TuneTableError, match=r"devices.h100.match: 'name' is a required property"):
        load_params(_write(tmp_path, data))


# --- the runtime's side: the generated DEVICES region and decide's device parameter -----------------

def _recorded_on_disk() -> tuple[str, ...]:
    """The declared devices with a recording of every table under data/recordings (what the main job builds from)."""
    return tuple(spec.key for spec in DEVICES if all((REPO / recording_path(device=spec.key, table=name)).is_file()
                                                     for name in PARAMS["tables"]))


def _dispatch_choice(manifest: str, *, m: int, n: int, k: int) -> str:
    """The CONFIG_ID a committed dispatch manifest names for a shape (read from the file, not the generated code)."""
    entries = load_yaml_file(REPO / "manifests" / manifest)["params"]
    return next(str(e["CONFIG_ID"]) for e in entries if (e["N"], e["K"]) == (n, k) and e["M"] <= m < e["M_END"])


def test_the_generated_devices_are_params_yaml_s_and_hold_each_recorded_device_s_tables() -> None:
    from tunetable.kernels import tuning_configs

    assert tuple(tuning_configs.DEVICES.values()) == DEVICES       # codegen wrote params.yaml's, literally
    assert _recorded_on_disk() == ("h200", "h100")                 # the H100's recordings landed (2026-12-06)
    assert tuning_configs.RECORDED_DEVICES == _recorded_on_disk()
    assert tuning_configs.DEVICE_TABLES["h200"].tables is tuning_configs.TABLES
    h100 = tuning_configs.DEVICE_TABLES["h100"]
    assert h100.tables["gemm_mma"] is tuning_configs.H100_GEMM_MMA_CONFIGS
    assert h100.dispatch["gemm_dispatch"] is tuning_configs.H100_GEMM_DISPATCH
    assert h100.selector_files["gemm_selector"].path == "data/gemm_selector.h100.json"
    assert len(h100.tables["gemm_wgmma"]) == len(load_yaml_file(REPO / "manifests/gemm_wgmma.h100.yaml")["params"])


def test_decide_serves_every_declared_device_from_a_recorded_one() -> None:
    from tunetable.kernels.runtime import decide

    assert decide.serving_device() == "h200" and decide.serving_device("h100") == "h100"
    assert decide.serving_device(None, arch="sm_90a") == "h200"
    unknown = r"unknown device 'a100' \(declared: h200, h100; recorded: h200, h100\)"
    with pytest.raises(decide.UnknownDeviceError, match=unknown):
        decide.serving_device("a100")
    with pytest.raises(decide.UnknownDeviceError, match="no recorded device serves a GPU of sm_100a"):
        decide.serving_device(None, arch="sm_100a")
    assert decide.recognise_gpu(**H100_SXM) == "h100" and decide.recognise_gpu(**H100_PCIE) is None
    # One dispatcher per serving device: the H100 has its own, over its own dispatch list (its manifest's choice
    # at M=32, N=K=4096 is not the H200's).
    assert decide.dispatcher(device="h100") is not decide.dispatcher(device="h200")
    assert decide.dispatcher(device="h200") is decide.dispatcher()
    h100, h200 = _dispatch_choice("gemm_dispatch.h100.yaml", m=32, n=4096, k=4096), \
        _dispatch_choice("gemm_dispatch.yaml", m=32, n=4096, k=4096)
    assert h100 != h200
    assert decide.dispatcher(device="h100").decide(m=32, n=4096, k=4096).entry.config_id == h100
    assert decide.dispatcher().decide(m=32, n=4096, k=4096).entry.config_id == h200


def test_decide_serves_a_device_without_tables_its_fallback_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback rule, as before the H100 was recorded: only the H200's tables in the generated file."""
    from tunetable.kernels.runtime import decide

    monkeypatch.setattr(decide, "RECORDED_DEVICES", ("h200",))
    assert decide.serving_device("h100") == "h200" and decide.serving_device() == "h200"
    with pytest.raises(decide.UnknownDeviceError, match=r"unknown device 'a100' \(declared: h200, h100; recorded: "
                                                        r"h200\)"):
        decide.serving_device("a100")
    # One dispatcher per serving device: an H100 without tables of its own shares the H200's.
    assert decide.dispatcher(device="h100") is decide.dispatcher(device="h200") is decide.dispatcher()
    held = decide.dispatcher(device="h100").decide(m=32, n=4096, k=4096)
    assert not held.fallback and held.entry.config_id == _dispatch_choice("gemm_dispatch.yaml", m=32, n=4096, k=4096)


# --- the pipeline's side: the banner names each device, another device's tables stay as committed -----

def _replay_plan(root: Path, monkeypatch: pytest.MonkeyPatch):
    from tunetable.workflow import run_plan

    monkeypatch.chdir(root)
    params = load_params(root / "params.yaml")
    return run_plan.make_plan({**params, "bench": {**params["bench"], "backend": "replay"}})


def _h200_only_project(root: Path) -> Path:
    """params.yaml and the H200's recordings only: a project where no other device has a recording or manifest."""
    import shutil

    for table in PARAMS["tables"]:
        for suffix in (".parquet", ".json"):
            name = f"data/recordings/h200_{table}{suffix}"
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / name, root / name)
    shutil.copyfile(REPO / "params.yaml", root / "params.yaml")
    return root


def test_a_replay_builds_each_recorded_device_s_tables_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    from tunetable.workflow import messages

    plan = _replay_plan(REPO, monkeypatch)
    assert plan.device_lines == (
        "DEVICE h200: its tables replay its recordings (data/recordings/h200_<table>.parquet)",
        "DEVICE h100: its tables replay its recordings (h100_gemm_mma.parquet, h100_gemm_wgmma.parquet, "
        "h100_gemm_wgmma_swap.parquet), with its own dispatch lists and selectors")
    assert messages.banner(plan).splitlines()[-2:] == [f"tunetable: {line}" for line in plan.device_lines]
    names = [f"{table}.h100" for table in PARAMS["tables"]]
    assert [spec.name for spec in plan.tables] == [*PARAMS["tables"], *names]
    assert {name: plan.recordings[name] for name in names} == {
        name: Path(recording_path(device="h100", table=name.split(".")[0])) for name in names}
    assert [spec.name for spec in plan.dispatches] == ["gemm_dispatch", "gemm_dispatch.h100"]
    assert [spec.name for spec in plan.selectors] == ["gemm_selector", "gemm_selector.h100"]


def test_a_replay_builds_the_primary_device_and_skips_another_without_recordings_loudly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tunetable.workflow import messages

    plan = _replay_plan(_h200_only_project(tmp_path), monkeypatch)
    assert plan.device_lines == (
        "DEVICE h200: its tables replay its recordings (data/recordings/h200_<table>.parquet)",
        "SKIPPING device h100: no recording yet (data/recordings/h100_<table>.parquet: scripts/device_record_h100.sh "
        "on that GPU); its tables stay as committed (the runtime serves it h200's: docs/devices.md)")
    assert messages.banner(plan).splitlines()[-2:] == [f"tunetable: {line}" for line in plan.device_lines]
    assert [spec.name for spec in plan.tables] == list(PARAMS["tables"])


def _copy(root: Path, *names: str) -> None:
    """Files of the repository copied under ``root``."""
    import shutil

    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, root / name)


def test_without_the_primary_s_recordings_its_tables_stay_as_committed_and_the_h100_s_replay(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tunetable.workflow import messages

    bases = list(PARAMS["tables"])
    _copy(tmp_path, "params.yaml", *(f"data/recordings/h100_{name}{suffix}" for name in bases
                                     for suffix in (".parquet", ".json")))
    plan = _replay_plan(tmp_path, monkeypatch)
    assert [spec.name for spec in plan.tables] == [f"{name}.h100" for name in bases]
    assert [spec.name for spec in plan.dispatches] == ["gemm_dispatch.h100"]
    assert [spec.name for spec in plan.selectors] == ["gemm_selector.h100"]
    assert plan.device_lines == (
        "DEVICE h200: tables none replay its recordings; not recorded here: gemm_mma, gemm_wgmma, gemm_wgmma_swap "
        "(they stay as committed)",
        "DEVICE h100: its tables replay its recordings (h100_gemm_mma.parquet, h100_gemm_wgmma.parquet, "
        "h100_gemm_wgmma_swap.parquet), with its own dispatch lists and selectors")
    banner = messages.banner(plan)
    for name in bases:
        assert f"SKIPPING table {name}: its recording data/recordings/h200_{name}.parquet is absent" in banner


def test_a_device_s_committed_tables_without_its_recordings_stay_as_committed_and_the_banner_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bases = list(PARAMS["tables"])
    _copy(_h200_only_project(tmp_path), *(f"manifests/{name}.h100.yaml" for name in
                                          [*bases, "gemm_dispatch", "gemm_selector"]))
    plan = _replay_plan(tmp_path, monkeypatch)
    assert [spec.name for spec in plan.tables] == bases
    assert plan.device_lines[1] == ("SKIPPING device h100: no recording here (data/recordings/h100_<table>.parquet); "
                                    "its tables gemm_mma.h100, gemm_wgmma.h100, gemm_wgmma_swap.h100 stay as "
                                    "committed")
    assert set(plan.skipped) == {f"{name}.h100" for name in bases}
    assert list(plan.skipped_dispatches) == ["gemm_dispatch.h100"]
    assert list(plan.skipped_selectors) == ["gemm_selector.h100"]   # declared (its manifest), left as committed
    # One of its recordings back: that table replays, the rest (and its lists) stay as committed.
    _copy(tmp_path, "data/recordings/h100_gemm_mma.parquet", "data/recordings/h100_gemm_mma.json")
    plan = _replay_plan(tmp_path, monkeypatch)
    assert plan.device_lines[1] == ("DEVICE h100: tables gemm_mma.h100 replay its recordings (h100_gemm_mma.parquet); "
                                    "not recorded here: gemm_wgmma.h100, gemm_wgmma_swap.h100 (they stay as "
                                    "committed), so its dispatch lists and selectors are not rebuilt")


def test_another_device_s_recording_adds_its_table_and_changes_no_primary_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    _h200_only_project(tmp_path)
    # A second declared device whose match fits the committed recordings' "NVIDIA H200" (timings are never made
    # up; this project copy holds no H100 recording): the H200's gemm_mma recording copied under its name.
    data = load_yaml_file(tmp_path / "params.yaml")
    data["devices"]["nvl"] = {"arch": "sm_90a", "match": {"name": "NVIDIA H200", "sm_count": 132},
                              "fallback": ["h200"]}
    _write(tmp_path, data)
    before = _replay_plan(tmp_path, monkeypatch).keys
    for suffix in (".parquet", ".json"):
        shutil.copyfile(REPO / f"data/recordings/h200_gemm_mma{suffix}",
                        tmp_path / f"data/recordings/nvl_gemm_mma{suffix}")
    plan = _replay_plan(tmp_path, monkeypatch)
    assert {name: key for name, key in plan.keys.items() if name in before} == before
    assert [spec.name for spec in plan.tables] == [*before, "gemm_mma.nvl"] and "gemm_mma.nvl" not in before
    assert plan.recordings["gemm_mma.nvl"] == Path("data/recordings/nvl_gemm_mma.parquet")
    assert [spec.name for spec in plan.dispatches] == ["gemm_dispatch"]     # nvl is partial: no list of its own
    assert plan.device_lines[2].startswith("DEVICE nvl: tables gemm_mma.nvl replay its recordings")
    # The same recording under h100's name: its sidecar says NVIDIA H200, which is no H100: one line naming it.
    for suffix in (".parquet", ".json"):
        shutil.copyfile(REPO / f"data/recordings/h200_gemm_mma{suffix}",
                        tmp_path / f"data/recordings/h100_gemm_mma{suffix}")
    with pytest.raises(TuneTableError) as info:
        _replay_plan(tmp_path, monkeypatch)
    assert str(info.value) == ("data/recordings/h100_gemm_mma.parquet: refused for table gemm_mma.h100: recorded on "
                               "NVIDIA H200 (its sidecar's device), which is device h200, not h100: a recording is "
                               "named for the device that made it")


# --- the commands say which device an entry belongs to ---------------------------------------------------

def _tunetable(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tunetable", *args], cwd=REPO, capture_output=True, text=True,
                          check=False, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "COLUMNS": "200"})


def test_suggest_names_the_device_and_whose_tables_serve_it() -> None:
    done = _tunetable("suggest", "--device", "h100", "--shape", "1,4096,4096")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "device h100: its own tables"
    assert "table gemm_mma.h100[0]" in done.stdout     # its own table, by the name `tunetable trace` takes
    unknown = _tunetable("suggest", "--device", "a100", "--shape", "1,4096,4096")
    assert unknown.returncode == 2 and unknown.stderr.strip().splitlines()[-1] == (
        "error: --device: unknown device 'a100' (declared: h200, h100; recorded: h200, h100)")


def test_suggest_marks_a_prediction_faster_than_the_devices_floor() -> None:
    # 250 x 18944 x 3584 (no table holds it): the H100's selector predicts 44.6 µs (47.3 while it was fitted with the
    # coverage recordings), below that GPU's floor, its bytes over params.yaml's 3.04 TB/s (48.4 µs): "predicted, below
    # floor"; the H200's 45.0 µs is above its 42.4 µs floor: "predicted".
    h100 = _tunetable("suggest", "--device", "h100", "--shape", "250,18944,3584")
    assert h100.returncode == 0, h100.stderr
    row = next(line for line in h100.stdout.splitlines() if line.startswith("│ 250 "))
    copy_tb_s = PARAMS["devices"]["h100"]["ceilings"]["copy_tb_s"]
    floor_us = (250 * 3584 + 18944 * 3584 + 250 * 18944) * 2 / (copy_tb_s * 1e6)
    predicted_us = float(row.split("│")[7])
    assert predicted_us < floor_us and "predicted, below floor" in row
    assert "predicted, below floor rows: faster than the shape's roofline floor on this" in h100.stdout
    h200 = _tunetable("suggest", "--shape", "250,18944,3584")
    row = next(line for line in h200.stdout.splitlines() if line.startswith("│ 250 "))
    assert "45.024" in row and row.rstrip(" │").endswith("predicted") and "below floor" not in h200.stdout


def test_suggest_says_whose_tables_serve_a_device_without_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """As before the H100 was recorded: the generated file holding the H200's tables only."""
    from click.testing import CliRunner

    from tunetable.commands.suggest import command
    from tunetable.kernels.runtime import decide

    monkeypatch.setattr(decide, "RECORDED_DEVICES", ("h200",))
    monkeypatch.chdir(REPO)
    done = CliRunner().invoke(command, ["--device", "h100", "--shape", "1,4096,4096"])
    assert done.exit_code == 0, done.output
    assert done.output.splitlines()[0] == "device h100: no tables of its own: h200's tables serve it"
    assert "table gemm_mma[0]" in done.output and ".h100[" not in done.output    # the H200's entry, by its name


def test_trace_and_audit_name_the_device_of_an_entry_s_measurements() -> None:
    from tunetable.audit import device_label

    trace = _tunetable("trace", "gemm_mma", "0")
    assert trace.returncode == 0, trace.stderr
    assert "device: h200 (the measurement's NVIDIA H200)" in trace.stdout.splitlines()
    assert device_label(params=PARAMS, provenance={"device": "NVIDIA H100 80GB HBM3"}) == "h100 (NVIDIA H100 80GB HBM3)"
    assert device_label(params=PARAMS, provenance={"device": "NVIDIA A100"}) == "NVIDIA A100"
    assert device_label(params={}, provenance={}) == ""


# --- a second device tuned cheaply -----------------------------------------------------------------------

def test_tune_device_seeds_every_table_s_search_from_the_other_device_s_recording(tmp_path: Path) -> None:
    from tunetable.device_tuning import device_tuning, per_shape_budget

    tuned, plans = device_tuning(PARAMS, device="h100", seed_from="h200", budget=0.15, root=REPO)
    assert [plan.table for plan in plans] == list(PARAMS["tables"])
    assert [plan.measured for plan in plans] == [f"{name}.h100" for name in PARAMS["tables"]]   # the H100's grid
    for plan in plans:
        assert tuned["tables"][plan.table]["search"] == {
            "strategy": "model", "max_fevals": plan.per_shape, "seed": 0, "transfer": True,
            "learn_from": f"data/recordings/h200_{plan.table}.parquet"}
        assert plan.measurements / plan.exhaustive <= 0.15
    assert "search" not in PARAMS["tables"]["gemm_mma"]          # params.yaml's own settings are untouched
    assert per_shape_budget(grid=112, budget=0.15) == 16 and per_shape_budget(grid=3, budget=0.15) == 1
    out = tmp_path / "h100.params.yaml"
    done = _tunetable("tune-device", "--device", "h100", "--seed-from", "h200", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert load_params(out)["tables"]["gemm_wgmma"]["search"]["learn_from"] == "data/recordings/h200_gemm_wgmma.parquet"
    # The H100's recordings exist (data/recordings/h100_*): they seed the other direction as well.
    back = _tunetable("tune-device", "--device", "h200", "--seed-from", "h100", "--out", str(out))
    assert back.returncode == 0, back.stderr
    assert load_params(out)["tables"]["gemm_mma"]["search"]["learn_from"] == "data/recordings/h100_gemm_mma.parquet"
    # A project without the seed device's recordings: one error line naming the first one missing.
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "params.yaml").write_bytes((REPO / "params.yaml").read_bytes())
    missing = _tunetable("tune-device", "--device", "h100", "--seed-from", "h200", "--params",
                         str(bare / "params.yaml"), "--out", str(out))
    assert missing.returncode == 2 and missing.stderr.strip().splitlines()[-1] == (
        "error: data/recordings/h200_gemm_mma.parquet: no recording of table gemm_mma on h200 to seed from")


def test_device_transfer_with_the_whole_grid_as_budget_reaches_every_exhaustive_best(tmp_path: Path) -> None:
    """The benchmark's yardstick: a budget of the whole grid measures everything, so every shape is within 2 %."""
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/device_transfer.py"), "--table", "gemm_mma",
         "--seed-from", str(REPO / "data/recordings/h200_gemm_mma_rerun.parquet"),
         "--target", str(REPO / "data/recordings/h200_gemm_mma_rerun4.parquet"), "--budget", "1.0",
         "--out", str(tmp_path / "transfer")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    import json

    report = json.loads((tmp_path / "transfer.json").read_text())
    assert report["budget_per_shape"] == report["grid"] == 52
    for run in ("seeded", "seeded_with_winners", "unseeded"):
        assert report[run]["share_within_2pct"] == 1.0 and report[run]["shapes"] == 4
