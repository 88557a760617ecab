"""Device tables (docs/devices.md): every table on each declared device besides the primary one, as pure functions.

Names, markers, derived specs, which device tables a project has (from files), the partial-device rule, the
recording's device check, the codegen scaffold and dvc.yaml lines, a live run's tables, the online tuner's key.
The pipeline end to end (snakemake, the generated file, the runtime) is tests/test_device_pipeline.py.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tunetable.bench.replay import load_recording
from tunetable.codegen_devices import (
    device_blocks,
    dvc_device_lines,
    measured_on,
    render_device_tables_region,
)
from tunetable.device_tables import (
    complete_devices,
    device_data_path,
    device_grid,
    device_marker,
    device_table_name,
    present_device_tables,
    recording_device_error,
    split_device_table,
    table_on_device,
    with_device_tables,
    with_present_device_tables,
)
from tunetable.errors import TuneTableError
from tunetable.kernels.tuning_configs import DEVICE_TABLES, RECORDED_DEVICES
from tunetable.measurement_plan import BackendChoice, check_recording_device
from tunetable.params import dispatch_spec, load_params, selector_spec, table_spec, table_specs
from tunetable.workflow.run_plan import covered_tables, replayed_device_line

REPO = Path(__file__).resolve().parents[1]
PARAMS = load_params(REPO / "params.yaml")
BASES = list(PARAMS["tables"])
RECORDING = REPO / "data" / "recordings" / "h200_gemm_mma.parquet"


def _touch(root: Path, *paths: str) -> None:
    """Files whose presence is what counts (a device table exists when its recording or manifest does)."""
    for path in paths:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("")


def test_names_split_back_and_markers_get_a_device_prefix() -> None:
    assert device_table_name(base="gemm_wgmma_swap", device="h100") == "gemm_wgmma_swap.h100"
    assert split_device_table("gemm_wgmma_swap.h100") == ("gemm_wgmma_swap", "h100")
    assert split_device_table("gemm_wgmma_swap") == ("gemm_wgmma_swap", None)
    assert device_marker("BEGIN-TUNING-LIST-GEMM_MMA", device="h100") == "BEGIN-H100-TUNING-LIST-GEMM_MMA"
    assert device_data_path("kernels/data/gemm_selector.json", device="h100") == "kernels/data/gemm_selector.h100.json"


def test_no_primary_marker_is_a_substring_of_a_device_marker() -> None:
    """Markers are matched as substrings of one line: the primary's must never find a device's line."""
    primary = [m for name in BASES for m in (table_spec(PARAMS, name).codegen.begin_marker,
                                            table_spec(PARAMS, name).codegen.end_marker)]
    primary += [m for spec in (dispatch_spec(PARAMS, "gemm_dispatch"), selector_spec(PARAMS, "gemm_selector"))
                for m in (spec.codegen.begin_marker, spec.codegen.end_marker)]
    derived = [m for name in BASES for m in (table_spec(PARAMS, f"{name}.h100").codegen.begin_marker,
                                            table_spec(PARAMS, f"{name}.h100").codegen.end_marker)]
    derived += [m for spec in (dispatch_spec(PARAMS, "gemm_dispatch.h100"), selector_spec(PARAMS, "gemm_selector.h100"))
                for m in (spec.codegen.begin_marker, spec.codegen.end_marker)]
    assert len(set(derived)) == len(derived) == 2 * len(BASES) + 4
    assert [(p, d) for p in primary for d in derived if p in d] == []


def test_a_device_table_is_its_base_table_with_its_own_recording_manifest_and_region() -> None:
    base, spec = table_spec(PARAMS, "gemm_wgmma"), table_spec(PARAMS, "gemm_wgmma.h100")
    assert (spec.base, spec.device, base.device, base.base) == ("gemm_wgmma", "h100", None, "gemm_wgmma")
    assert spec.recording == "data/recordings/h100_gemm_wgmma.parquet"
    assert spec.recordings == (("h100", "data/recordings/h100_gemm_wgmma.parquet"),)
    assert spec.codegen.manifest == spec.codegen.source_label == "manifests/gemm_wgmma.h100.yaml"
    assert (spec.codegen.begin_marker, spec.codegen.end_marker) == ("BEGIN-H100-TUNING-LIST-GEMM_WGMMA",
                                                                    "END-H100-TUNING-LIST-GEMM_WGMMA")
    assert (spec.family, spec.kernel, spec.shapes()) == (base.family, base.kernel, base.shapes())
    # Its grid: the base's groups, in order, then the two params.yaml gives the H100 alone (notes_gemm_wgmma.md).
    shared = [group for group in spec.grid["groups"] if group in base.grid["groups"]]
    own = [group["name"] for group in spec.grid["groups"] if group not in base.grid["groups"]]
    assert (shared, own) == (base.grid["groups"], ["raster0_h100", "raster0_wide_h100"])
    assert table_spec(PARAMS, "gemm_mma.h100").grid == table_spec(PARAMS, "gemm_mma").grid   # no group of its own
    dispatch = dispatch_spec(PARAMS, "gemm_dispatch.h100")
    assert dispatch.tables == ("gemm_mma.h100", "gemm_wgmma.h100", "gemm_wgmma_swap.h100")
    selector = selector_spec(PARAMS, "gemm_selector.h100")
    assert (selector.data, selector.codegen.manifest) == ("kernels/data/gemm_selector.h100.json",
                                                          "manifests/gemm_selector.h100.yaml")
    # The primary device (h200) and undeclared devices have no device tables.
    for name in ("gemm_mma.h200", "gemm_mma.a100", "nonesuch.h100"):
        with pytest.raises(TuneTableError, match=f"unknown table '{name}'"):
            table_spec(PARAMS, name)


def _with_group(params: dict, group: dict, *, table: str = "gemm_wgmma") -> dict:
    """``params`` (copied) with ``group`` appended to ``table``'s grid."""
    copied = json.loads(json.dumps(params))
    copied["tables"][table]["grid"]["groups"].append(group)
    return copied


# Not params.yaml's own H100 groups (raster0_h100 has these tiles at 6 stages): two configurations no grid has.
R0_GROUP = {"name": "r0_h100", "devices": ["h100"], "BLOCK_M": [128], "BLOCK_N": [128], "BLOCK_K": [64],
            "STAGES": [5], "CONSUMERS": [2], "CLUSTER_M": [1], "CLUSTER_N": [1], "RASTER": [0], "GROUP_M": [8],
            "SPLIT_K": [1], "TAIL_SPLIT": [0, 1]}


def test_a_grid_group_for_some_devices_is_in_their_tables_only_and_leaves_the_others_keys_as_they_were() -> None:
    from tunetable.grid import expand
    from tunetable.measurement_plan import grid_config_ids

    params = _with_group(PARAMS, R0_GROUP)
    h200, h100 = table_spec(params, "gemm_wgmma"), table_spec(params, "gemm_wgmma.h100")
    assert [g["name"] for g in h100.grid["groups"]][-1] == "r0_h100"
    assert "r0_h100" not in [g["name"] for g in h200.grid["groups"]]
    assert all("devices" not in group for group in h100.grid["groups"])   # the key is no tunable
    # The primary's grid is the one params.yaml had without the group: its configurations and shard keys stay.
    assert grid_config_ids(params=params, table=h200) == grid_config_ids(params=PARAMS,
                                                                         table=table_spec(PARAMS, "gemm_wgmma"))
    before = grid_config_ids(params=PARAMS, table=table_spec(PARAMS, "gemm_wgmma.h100"))
    added = set(grid_config_ids(params=params, table=h100)) - set(before)
    assert len(added) == 2 and set(before) <= set(grid_config_ids(params=params, table=h100))
    kept = {config.id: config for config in expand(h100).kept}
    assert {kept[cid].as_dict()["RASTER"] for cid in added} == {0}
    assert device_grid({"groups": [R0_GROUP]}, device=None)["groups"][0]["RASTER"] == [0]   # no devices: every group
    # Each device measures the table whose grid is its own: the primary its declared name, another its device table.
    assert [table_on_device(params, base="gemm_wgmma", device=d) for d in ("h200", "h100")] == ["gemm_wgmma",
                                                                                               "gemm_wgmma.h100"]


def test_a_grid_group_naming_an_undeclared_device_is_one_error_naming_the_group(tmp_path: Path) -> None:
    import yaml

    params = _with_group(PARAMS, {**R0_GROUP, "devices": ["h100", "a100"]})
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    index = len(params["tables"]["gemm_wgmma"]["grid"]["groups"]) - 1
    with pytest.raises(TuneTableError, match=rf"tables\.gemm_wgmma\.grid\.groups\[{index}\]\.devices\[1\].*"
                                             r"'a100' is not a declared device \(declared: h200, h100\)"):
        load_params(path)


def test_without_other_devices_files_the_params_stay_as_they_are(tmp_path: Path) -> None:
    _touch(tmp_path, *(f"data/recordings/h200_{name}.parquet" for name in BASES), "manifests/gemm_mma.yaml")
    assert present_device_tables(PARAMS, root=tmp_path) == []  # the primary's files only: no H100 recording yet
    assert with_present_device_tables(PARAMS, root=tmp_path) == PARAMS
    assert with_device_tables(PARAMS, []) == PARAMS
    assert [spec.name for spec in table_specs(with_device_tables(PARAMS, []))] == BASES


def test_the_repository_has_the_h100_tables_its_recordings_and_manifests_give() -> None:
    on_disk = [f"{name}.h100" for name in BASES if (REPO / f"data/recordings/h100_{name}.parquet").is_file()
               and (REPO / f"manifests/{name}.h100.yaml").is_file()]
    assert on_disk == ["gemm_mma.h100", "gemm_wgmma.h100", "gemm_wgmma_swap.h100"]   # recorded on 2026-12-06
    assert present_device_tables(PARAMS, root=REPO) == on_disk
    expanded = with_present_device_tables(PARAMS, root=REPO)
    assert list(expanded["tables"]) == [*BASES, *on_disk]
    assert list(expanded["dispatch"]) == ["gemm_dispatch", "gemm_dispatch.h100"]
    assert list(expanded["selector"]) == ["gemm_selector", "gemm_selector.h100"]


def test_a_committed_device_selector_stays_declared_when_its_recordings_go(tmp_path: Path) -> None:
    """From the manifests alone, as the primary's: a project without the recordings (a copy of the sources) keeps
    the device's selector, so codegen renders what is committed instead of dropping it from the generated file."""
    _touch(tmp_path, *(f"manifests/{name}.h100.yaml" for name in BASES), "manifests/gemm_dispatch.h100.yaml")
    without = with_present_device_tables(PARAMS, root=tmp_path)
    assert list(without["dispatch"]) == ["gemm_dispatch", "gemm_dispatch.h100"]
    assert list(without["selector"]) == ["gemm_selector"]      # never fitted (no recording, no manifest)
    _touch(tmp_path, "manifests/gemm_selector.h100.yaml")
    kept = with_present_device_tables(PARAMS, root=tmp_path)
    assert list(kept["selector"]) == ["gemm_selector", "gemm_selector.h100"]
    assert kept["selector"]["gemm_selector.h100"]["data"] == "kernels/data/gemm_selector.h100.json"


def test_a_partial_device_gets_its_recorded_tables_only_never_a_dispatch_list_or_selector(tmp_path: Path) -> None:
    _touch(tmp_path, "data/recordings/h100_gemm_mma.parquet", "manifests/gemm_wgmma.h100.yaml")
    names = present_device_tables(PARAMS, root=tmp_path)
    assert names == ["gemm_mma.h100", "gemm_wgmma.h100"]       # a recording or a manifest
    assert complete_devices(PARAMS, names) == []
    expanded = with_device_tables(PARAMS, names)
    assert list(expanded["tables"]) == [*BASES, *names]
    assert list(expanded["dispatch"]) == ["gemm_dispatch"] and list(expanded["selector"]) == ["gemm_selector"]
    # A GPU host measuring h100 has all of its tables, and so its dispatch list and selector.
    measured = present_device_tables(PARAMS, root=tmp_path, measured=["h100"])
    assert measured == [f"{name}.h100" for name in BASES] and complete_devices(PARAMS, measured) == ["h100"]
    full = with_device_tables(PARAMS, measured)
    assert list(full["dispatch"]) == ["gemm_dispatch", "gemm_dispatch.h100"]
    assert list(full["selector"]) == ["gemm_selector", "gemm_selector.h100"]
    assert with_device_tables(full, measured) == full          # idempotent (the Snakefile's config, then the plan)
    # Measured but not yet recorded: its dispatch list is built from the run's shards, its selector (fitted on
    # recordings only) not until the recordings exist.
    live = with_present_device_tables(PARAMS, root=tmp_path, measured=["h100"])
    assert list(live["dispatch"]) == ["gemm_dispatch", "gemm_dispatch.h100"]
    assert list(live["selector"]) == ["gemm_selector"]


def test_a_recording_is_refused_unless_its_sidecar_names_a_gpu_of_that_device() -> None:
    sidecar = json.loads((REPO / "data" / "recordings" / "h200_gemm_mma.json").read_text())
    assert recording_device_error(device="h200", recorded_on=sidecar["device"], params=PARAMS) is None
    assert recording_device_error(device="h100", recorded_on="NVIDIA H100 80GB HBM3", params=PARAMS) is None
    why = recording_device_error(device="h100", recorded_on=sidecar["device"], params=PARAMS)
    assert why == ("recorded on NVIDIA H200 (its sidecar's device), which is device h200, not h100: a recording "
                   "is named for the device that made it")
    assert "an unnamed GPU" in str(recording_device_error(device="h100", recorded_on=None, params=PARAMS))
    with pytest.raises(TuneTableError) as info:
        check_recording_device(PARAMS, table=table_spec(PARAMS, "gemm_mma.h100"), provenance=sidecar,
                               recording=Path("data/recordings/h100_gemm_mma.parquet"))
    assert str(info.value) == f"data/recordings/h100_gemm_mma.parquet: refused for table gemm_mma.h100: {why}"


def test_a_device_table_replays_its_recordings_rows_under_the_base_tables_name() -> None:
    plain = load_recording(RECORDING)
    served = load_recording(RECORDING, served_as={"gemm_mma": "gemm_mma.h100"})
    assert {key[0] for key in plain} == {"gemm_mma"} and {key[0] for key in served} == {"gemm_mma.h100"}
    assert {key[1:] for key in served} == {key[1:] for key in plain}
    first = next(iter(plain))
    row, same = served[("gemm_mma.h100", *first[1:])], plain[first]
    assert row["median_ms"] == same["median_ms"] and list(row["samples_ms"]) == list(same["samples_ms"])


def test_a_live_run_measures_the_gpus_device_and_leaves_the_others_as_committed() -> None:
    params = with_device_tables(PARAMS, [f"{name}.h100" for name in BASES])
    declared = table_specs(params)
    cuda = BackendChoice(backend="cuda", reason="live")
    on_h100, skipped, _, _ = covered_tables(declared, backend=cuda, requested="cuda", params_path="params.yaml",
                                            measured="h100")
    assert [spec.name for spec in on_h100] == [f"{name}.h100" for name in BASES]
    assert skipped["gemm_mma"] == "it is device h200's and this GPU is h100"
    on_h200, skipped, _, _ = covered_tables(declared, backend=cuda, requested="cuda", params_path="params.yaml",
                                            measured="h200")
    assert [spec.name for spec in on_h200] == BASES and skipped["gemm_mma.h100"] == ("it is device h100's and this "
                                                                                     "GPU is h200")


def test_the_banner_names_each_devices_tables_whole_partial_or_none() -> None:
    none = replayed_device_line(PARAMS, device="h100", primary="h200", names=BASES)
    assert none.startswith("SKIPPING device h100: no recording yet (data/recordings/h100_<table>.parquet")
    partial = replayed_device_line(PARAMS, device="h100", primary="h200", names=[*BASES, "gemm_mma.h100"])
    assert partial.startswith("DEVICE h100: tables gemm_mma.h100 replay its recordings (h100_gemm_mma.parquet); "
                              "not recorded yet: gemm_wgmma, gemm_wgmma_swap, so its dispatch lists and selectors "
                              "are not built")
    whole = replayed_device_line(PARAMS, device="h100", primary="h200", names=[*BASES, *(f"{n}.h100" for n in BASES)])
    assert whole == ("DEVICE h100: its tables replay its recordings (h100_gemm_mma.parquet, h100_gemm_wgmma.parquet, "
                     "h100_gemm_wgmma_swap.parquet), with its own dispatch lists and selectors")


def test_the_scaffold_holds_every_list_and_a_device_tables_entry_for_a_complete_device_only() -> None:
    partial = with_device_tables(PARAMS, ["gemm_mma.h100"])
    text = render_device_tables_region(device_blocks(partial), bases=BASES, source_label="params.yaml", path="x")
    assert "H100_GEMM_MMA_CONFIGS: list[TuningConfig] = [" in text and "DEVICE_TABLES[" not in text
    assert "# Device h100: tables gemm_mma only (not yet: gemm_wgmma, gemm_wgmma_swap)" in text
    whole = with_device_tables(PARAMS, [f"{name}.h100" for name in BASES])
    text = render_device_tables_region(device_blocks(whole), bases=BASES, source_label="params.yaml", path="x")
    ast.parse(text)                                    # literals and names only, valid Python
    lines = text.splitlines()
    for marker in ("BEGIN-H100-TUNING-LIST-GEMM_MMA", "END-H100-TUNING-LIST-GEMM_SWAP",
                   "BEGIN-H100-TUNING-LIST-GEMM_DISPATCH", "BEGIN-H100-TUNING-SELECTOR-GEMM_SELECTOR"):
        assert sum(marker in line for line in lines) == 1
    assert 'DEVICE_TABLES["h100"] = DeviceTables(' in lines
    assert '        "gemm_wgmma_swap": H100_GEMM_WGMMA_SWAP_CONFIGS,' in lines
    assert "    selector_files=H100_SELECTOR_FILES," in lines
    assert "    measured_on=None," in lines                 # no manifest names its GPU
    text = render_device_tables_region(device_blocks(whole), bases=BASES, source_label="params.yaml", path="x",
                                       measured_on={"h100": 'NVIDIA "H100"\nimport os'})
    assert '    measured_on="NVIDIA \\"H100\\"\\nimport os",' in text.splitlines()   # manifest text never becomes code
    ast.parse(text)
    empty = render_device_tables_region((), bases=BASES, source_label="params.yaml", path="x")
    assert empty.splitlines()[1] == ("# (none has recordings yet: the runtime serves every GPU the primary device's "
                                     "tables)")


def _manifest(root: Path, name: str, device: object | None) -> None:
    """A manifest whose provenance names ``device`` (None: no device key)."""
    provenance = {"table": name, **({"device": device} if device is not None else {})}
    path = root / "manifests" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"provenance": provenance, "params": [
        {"M": 1, "M_END": 2, "N": 8, "K": 8, "KERNEL": "gemm_mma", "CONFIG_ID": "a"}]}))


def test_a_device_s_gpu_is_the_one_its_manifests_provenance_names_and_two_are_one_error(tmp_path: Path) -> None:
    tables = [f"{name}.h100" for name in BASES]
    manifests = [tmp_path / "manifests" / f"{name}.yaml" for name in tables]
    assert measured_on(manifests) is None                                     # no manifest yet
    _manifest(tmp_path, tables[0], None)
    _manifest(tmp_path, tables[2], "unknown")
    assert measured_on(manifests) is None                                     # none names a GPU
    _manifest(tmp_path, tables[1], "NVIDIA H100 80GB HBM3")
    assert measured_on(manifests) == "NVIDIA H100 80GB HBM3"
    _manifest(tmp_path, tables[2], "NVIDIA H200\nimport os")
    with pytest.raises(TuneTableError) as info:
        measured_on(manifests)
    assert "\n" not in str(info.value) and str(info.value).count("manifests/") == 2   # one line, both files named
    assert f"{manifests[1]}: 'NVIDIA H100 80GB HBM3'; {manifests[2]}: 'NVIDIA H200\\nimport os'" in str(info.value)
    _manifest(tmp_path, tables[2], 7)
    with pytest.raises(TuneTableError, match=r"gemm_wgmma_swap.h100.yaml: provenance.device is 7"):
        measured_on(manifests)


def test_the_generated_tables_name_the_gpu_each_device_s_recordings_were_made_on() -> None:
    """DEVICE_TABLES[d].measured_on (from the manifests) is the ``device`` of every sidecar of d's recordings."""
    for device in RECORDED_DEVICES:
        sidecars = {json.loads((REPO / "data" / "recordings" / f"{device}_{name}.json").read_text())["device"]
                    for name in BASES}
        assert sidecars == {DEVICE_TABLES[device].measured_on}, device


def test_dvc_yaml_lists_each_device_tables_files(tmp_path: Path) -> None:
    _touch(tmp_path, *(f"data/recordings/h100_{name}.parquet" for name in BASES))
    params = with_device_tables(PARAMS, present_device_tables(PARAMS, root=tmp_path))
    lines = dvc_device_lines(params, root=tmp_path)
    assert lines["DVC-DEVICE-RECORDINGS"] == [f"- data/recordings/h100_{name}.parquet" for name in BASES]
    assert lines["DVC-DEVICE-METRICS"][:2] == ["- results/metrics/gemm_mma.h100.json:", "    cache: false"]
    assert "- results/metrics/gemm_dispatch.h100.json:" in lines["DVC-DEVICE-METRICS"]
    assert ["- kernels/data/gemm_selector.h100.json:", "    cache: false", "    persist: true"] == \
        lines["DVC-DEVICE-OUTS"][lines["DVC-DEVICE-OUTS"].index("- kernels/data/gemm_selector.h100.json:"):][:3]
    assert "- manifests/gemm_selector.h100.yaml" in lines["DVC-DEVICE-MANIFESTS"]
    # Without device tables every device region is empty (the coverage region follows the recordings present).
    device_regions = {key: value for key, value in dvc_device_lines(PARAMS, root=REPO).items()
                      if key.startswith("DVC-DEVICE-")}
    assert device_regions == {key: [] for key in lines if key.startswith("DVC-DEVICE-")}


def test_the_online_tuner_keeps_one_tuning_per_device_and_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    from tunetable.kernels.runtime import online

    made: list[str] = []

    class Tuner:   # stands in for the Autotuner (which times on a GPU): records the device it was made for
        cache_hits = 0

        def __init__(self, fn, *, configs, device, **_: object) -> None:
            made.append(device)
            self.best: dict = {}
            self.configs, self.device, self.trials = configs, device, {}

        def key_of(self, args, kwargs):
            return args[3:]

        def __call__(self, *args):
            self.best[args[3:]] = {**self.configs[0], "device": self.device}

        def cache_path(self, key):
            return Path("/nonexistent") / "x"

    monkeypatch.setattr(online, "Autotuner", Tuner)
    monkeypatch.setattr(online, "candidate_configs", lambda ranking, count: [{"table": "t", "config_id": ranking[0]}])
    tuner = online.OnlineTuner(gemm_with=lambda *a, **k: None)
    with pytest.warns(online.OnlineTuningWarning):
        picks = [tuner.choose(m=7, n=4096, k=4096, a=None, b=None, out=object(), ranking=[device], device=device)
                 for device in ("NVIDIA H100 80GB HBM3 (sm_90)", "NVIDIA H200 (sm_90)",
                                "NVIDIA H100 80GB HBM3 (sm_90)")]
    assert made == ["NVIDIA H100 80GB HBM3 (sm_90)", "NVIDIA H200 (sm_90)"]      # the third call is the first's
    assert [pick["device"] for pick in picks] == ["NVIDIA H100 80GB HBM3 (sm_90)", "NVIDIA H200 (sm_90)",
                                                  "NVIDIA H100 80GB HBM3 (sm_90)"]
    assert sorted(tuner.tuners) == [("NVIDIA H100 80GB HBM3 (sm_90)", 7, 4096, 4096),
                                    ("NVIDIA H200 (sm_90)", 7, 4096, 4096)]


def test_audit_reads_a_device_tables_rows_from_its_recording_under_the_base_name() -> None:
    """With no shards (git alone), audit answers from the recording: a device table's rows are the manifest's."""
    from tunetable import audit
    from tunetable.select_winners import data_hash
    from tunetable.yamlio import load_yaml

    manifest = load_yaml((REPO / "manifests" / "gemm_mma.h100.yaml").read_text())["provenance"]
    params = with_device_tables(load_params(REPO / "params.yaml"), ["gemm_mma.h100"], root=REPO)
    ranked = audit._ranked_recording(data=(REPO / "data/recordings/h100_gemm_mma.parquet").read_bytes(),
                                     name="h100_gemm_mma.parquet", table="gemm_mma.h100", params=params,
                                     kernel_hash=manifest["kernel_hash"])
    assert ranked is not None and data_hash(ranked=ranked) == manifest["data_hash"]
