"""The committed H200 recording: a real cuda-backend measurement that replay serves (CPU only)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tunetable.kernels.families import FAMILIES
from tunetable.bench.record import record_command
from tunetable.keys import kernel_source_hash
from tunetable.params import load_params, table_spec
from tunetable.results import ROW_FIELDS, read_shard

REPO = Path(__file__).resolve().parents[1]
RECORDING = REPO / "data" / "recordings" / "h200_gemm_mma.parquet"


def test_record_command_summarises_shards_by_folder() -> None:
    shards = [Path("results/raw/t/k1/M1_N8_K8.pkl"), Path("results/raw/t/k1/M2_N8_K8.pkl")]
    assert record_command(table="t", name="n", shards=shards) == \
        "tunetable record --table t --name n results/raw/t/k1/*.pkl (2 shards)"


@pytest.fixture(scope="module")
def recording() -> tuple:
    if not RECORDING.is_file():
        pytest.skip(f"{RECORDING} not committed yet")
    import pandas as pd

    return pd.read_parquet(RECORDING), json.loads(RECORDING.with_suffix(".json").read_text())


def test_recording_is_a_complete_cuda_measurement_of_the_default_table(recording: tuple) -> None:
    frame, sidecar = recording
    spec = table_spec(load_params(REPO / "params.yaml"), "gemm_mma")
    assert set(ROW_FIELDS) <= set(frame.columns) and set(frame["backend"]) == {"cuda"}
    assert sidecar["device"] == "NVIDIA H200" and sidecar["rows"] == len(frame)
    shapes = set(map(tuple, frame[["M", "N", "K"]].drop_duplicates().to_numpy().tolist()))
    assert shapes == set(spec.shapes())
    baselines = frame[frame["kind"] == "baseline"]
    assert len(baselines) == len(shapes) and set(baselines["config_id"]) == {"cublas"}
    ok = frame[frame["status"] == "ok"]
    assert len({len(samples) for samples in ok["samples_ms"]}) == 1 and len(ok["samples_ms"].iloc[0]) >= 5
    assert (ok["rel_err"] < 0.02).all() and (ok["sm_clock_mhz"] > 0).all() and (ok["power_w"] > 0).all()


def test_replay_of_the_recording_through_the_cli(recording: tuple, tmp_path: Path) -> None:
    frame, sidecar = recording
    if kernel_source_hash(FAMILIES["gemm_mma"].source) not in sidecar["kernel_hashes"]:
        pytest.skip("kernels/families/gemm_mma/gemm_mma.cu changed since the recording: re-record on the H200")
    result = subprocess.run([sys.executable, "-m", "tunetable", "bench", "--table", "gemm_mma", "--backend", "replay",
                             "--shape", "1,4096,4096", "--shape", "4096,4096,4096", "--results-root", str(tmp_path)],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert f"measured on NVIDIA H200 (driver {sidecar['driver']}) on {sidecar['date']}" in result.stderr
    shards = sorted(tmp_path.glob("raw/gemm_mma/*/*.pkl"))
    assert [p.name for p in shards] == ["M1_N4096_K4096.pkl", "M4096_N4096_K4096.pkl"]
    served = read_shard(shards[0])["merged_df"]
    recorded = frame[(frame["M"] == 1) & (frame["N"] == 4096) & (frame["K"] == 4096)].set_index("config_id")
    assert set(served["backend"]) == {"replay"}
    for row in served.to_dict(orient="records"):
        assert list(row["samples_ms"]) == list(recorded.loc[row["config_id"], "samples_ms"])
        assert row["measured_key"] == recorded.loc[row["config_id"], "content_key"]
