"""`tunetable kt export` / `kt import` against Kernel Tuner 1.5 itself (the dev extra installs it).

A Kernel Tuner user loads an export with the exported tune_params and restrictions, in simulation
mode, with any strategy; brute_force must return the best we measured. The expected best comes
from the recording itself (polars over its rows), not from the export code.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import polars as pl
import pytest

from tunetable import resultset
from tunetable.config import KernelConfig

kernel_tuner = pytest.importorskip("kernel_tuner", reason="kernel_tuner (dev extra) is not installed")

REPO = Path(__file__).resolve().parents[1]
RECORDING = REPO / "data" / "recordings" / "h200_gemm_mma.parquet"
SHAPES = [(1, 4096, 4096), (128, 4096, 4096), (4096, 14336, 4096)]


def tunetable(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """The CLI writing to a pipe with no $COLUMNS: every table row on one line."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([sys.executable, "-m", "tunetable", *args], capture_output=True, text=True, cwd=cwd,
                          env=env)


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("kt") / "gemm_mma"
    done = tunetable("kt", "export", "--table", "gemm_mma", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "restrictions=cache[\"restrictions\"]" in done.stdout   # the call a user copies
    return out


def tune(cache_file: Path, strategy: str, **options) -> tuple[list[dict], dict]:
    """Kernel Tuner in simulation mode on one exported cache: its tune_params, its restrictions, nothing else."""
    cache = json.loads(cache_file.read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return kernel_tuner.tune_kernel(cache["kernel_name"], "", tuple(cache["problem_size"]), [],
                                        cache["tune_params"], restrictions=cache["restrictions"],
                                        cache=str(cache_file), simulation_mode=True, strategy=strategy,
                                        strategy_options=options, quiet=True)


def measured_rows(shape: tuple[int, int, int]) -> pl.DataFrame:
    """The recording's verified configuration rows at this shape."""
    m, n, k = shape
    return pl.read_parquet(RECORDING).filter((pl.col("M") == m) & (pl.col("N") == n) & (pl.col("K") == k)
                                             & (pl.col("kind") == "kernel") & (pl.col("status") == "ok"))


def measured_count(shape: tuple[int, int, int]) -> int:
    """How many configurations the recording holds as verified at this shape."""
    return measured_rows(shape).height


def measured_best(shape: tuple[int, int, int]) -> tuple[str, float]:
    best = measured_rows(shape).sort("median_ms", "config_id").row(0, named=True)
    return best["config_id"], best["median_ms"]


@pytest.mark.parametrize("shape", SHAPES)
def test_brute_force_in_simulation_returns_our_measured_best(export: Path, shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    cache_file = export / f"gemm_mma_M{m}_N{n}_K{k}.json"
    cache = json.loads(cache_file.read_text())
    product = math.prod(len(values) for values in cache["tune_params"].values())
    assert product > len(cache["cache"]), "the restriction is what keeps Kernel Tuner inside the measured set"
    results, env = tune(cache_file, "brute_force")
    assert len(results) == len(cache["cache"]) == measured_count(shape)
    config_id, median = measured_best(shape)
    best = env["best_config"]
    params = {name: best[name] for name in cache["tune_params_keys"]}
    assert KernelConfig.from_dict("gemm_mma", params).id == config_id
    assert best["time"] == pytest.approx(median)


@pytest.mark.parametrize("strategy", ["random_sample", "genetic_algorithm", "greedy_ils", "simulated_annealing",
                                      "diff_evo", "mls", "pso", "firefly_algorithm", "basinhopping",
                                      "dual_annealing", "minimize"])
def test_every_strategy_stays_inside_the_measured_set(export: Path, strategy: str) -> None:
    cache_file = export / "gemm_mma_M128_N4096_K4096.json"
    cache = json.loads(cache_file.read_text())
    # Kernel Tuner's local searches count unique results only, so on a small restricted space greedy_ils can
    # revisit configurations without end (seen in CI); its own time_limit stop criterion bounds every strategy.
    results, _ = tune(cache_file, strategy, max_fevals=15, time_limit=10)
    keys = {",".join(str(r[n]) for n in cache["tune_params_keys"]) for r in results}
    assert results and keys <= set(cache["cache"])
    for result in results:
        assert result["time"] == cache["cache"][",".join(str(result[n]) for n in cache["tune_params_keys"])]["time"]


def test_without_the_restriction_kernel_tuner_refuses_the_product(export: Path) -> None:
    cache_file = export / "gemm_mma_M128_N4096_K4096.json"
    cache = json.loads(cache_file.read_text())
    with warnings.catch_warnings(), pytest.raises(ValueError, match="not in cache"):
        warnings.simplefilter("ignore")
        kernel_tuner.tune_kernel(cache["kernel_name"], "", tuple(cache["problem_size"]), [], cache["tune_params"],
                                 cache=str(cache_file), simulation_mode=True, strategy="brute_force", quiet=True)


def test_index_lists_every_shape_and_its_best(export: Path) -> None:
    index = json.loads((export / "index.json").read_text())
    assert index["table"] == "gemm_mma" and len(index["shapes"]) == 55
    entry = next(s for s in index["shapes"] if s["problem_size"] == [128, 4096, 4096])
    assert (entry["best"]["config_id"], entry["best"]["median_ms"]) == measured_best((128, 4096, 4096))


def kt_cache(path: Path, entries: dict[str, dict], *, shape: tuple[int, int, int] = (64, 4096, 4096)) -> Path:
    """A cache the way Kernel Tuner writes one (header, then store_cache per result)."""
    from kernel_tuner.util import store_cache

    header = {"device_name": "NVIDIA H200", "kernel_name": "gemm_mma", "problem_size": list(shape),
              "tune_params_keys": ["BLOCK_M", "BLOCK_N"], "tune_params": {"BLOCK_M": [64], "BLOCK_N": [64, 128]},
              "objective": "time", "cache": {}}
    path.write_text(json.dumps(header, indent="")[:-3])
    cache: dict = {}
    for key, entry in entries.items():
        store_cache(key, entry, str(path), cache)
    return path


def test_import_ranks_by_the_median_of_times_not_kt_mean(tmp_path: Path) -> None:
    # KT's `time` is the mean: 5.0 ms for [0.82, 0.79, 13.40] (one slow sample), 1.0 for the steady config.
    path = kt_cache(tmp_path / "run.json", {
        "64,64": {"BLOCK_M": 64, "BLOCK_N": 64, "time": 5.003, "times": [0.82, 0.79, 13.40], "compile_time": 1.0},
        "64,128": {"BLOCK_M": 64, "BLOCK_N": 128, "time": 1.0, "times": [1.0, 1.0, 1.0], "compile_time": 1.0},
    })
    out = tmp_path / "imported"
    done = tunetable("kt", "import", str(path), "--family", "gemm_mma", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "BLOCK_M=64/BLOCK_N=64" in done.stdout and "0.82" in done.stdout and "5.003" in done.stdout
    shard = out / "M64_N4096_K4096.pkl"
    ranked = tunetable("profile", str(shard), "-m", "median", "--head", "1", "--all", cwd=tmp_path)
    assert ranked.returncode == 0, ranked.stderr
    best = next(line for line in ranked.stdout.splitlines() if "1.000" in line)   # ratio 1: the shape's best
    assert "0.82" in best and "5.003" not in ranked.stdout


@pytest.mark.slow
def test_import_round_trips_an_export(export: Path, tmp_path: Path) -> None:
    files = [str(export / "gemm_mma_M128_N4096_K4096.json"), str(export / "gemm_mma_M1_N4096_K4096.json")]
    done = tunetable("kt", "import", *files, "--table", "gemm_mma", "--out", str(tmp_path / "back"))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "back").glob("*.pkl")) == ["M128_N4096_K4096.pkl", "M1_N4096_K4096.pkl"]
    for shape in ((128, 4096, 4096), (1, 4096, 4096)):
        rows = resultset.load_file(path=tmp_path / "back" / "M{}_N{}_K{}.pkl".format(*shape)).frame
        ok = rows.filter(pl.col("status") == "ok").sort("median_ms", "config_id")
        assert (ok["config_id"][0], ok["median_ms"][0]) == measured_best(shape)
        assert ok.height == measured_count(shape) and ok["backend"].unique().to_list() == ["kernel_tuner"]


def test_import_errors_are_one_line_naming_file_and_entry(tmp_path: Path) -> None:
    path = kt_cache(tmp_path / "bad.json", {"64,64": {"BLOCK_M": 64, "BLOCK_N": 64, "time": 0.5, "times": ["x"]}})
    done = tunetable("kt", "import", str(path), "--family", "gemm_mma", "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{path}: cache[64,64]: times must be a list of finite times in ms" in done.stderr
    assert not (tmp_path / "o").exists()
    neither = tunetable("kt", "import", str(path), cwd=tmp_path)
    assert neither.returncode == 2 and "give --table" in neither.stderr
