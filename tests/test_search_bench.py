"""`tunetable bench` honours a table's `search:` end to end on the replay backend (the committed H200 recording)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench_support import gemm_mma_only_params
from tunetable.kernels.families import FAMILIES
from tunetable.measurement_plan import shard_key
from tunetable.grid import DeviceLimits, expand
from tunetable.keys import kernel_source_hash
from tunetable.params import load_params, table_spec
from tunetable.results import ROW_FIELDS, SEARCH_FIELDS, read_shard
from tunetable.yamlio import load_yaml_file

REPO = Path(__file__).resolve().parents[1]
RECORDING = REPO / "data" / "recordings" / "h200_gemm_mma.parquet"
SHAPES = ["8192,4096,4096", "1024,4096,4096", "64,4096,4096", "8,4096,4096"]


@pytest.fixture(scope="module", autouse=True)
def recording_matches_the_kernel() -> None:
    if not RECORDING.is_file():
        pytest.skip(f"{RECORDING} not committed yet")
    sidecar = json.loads(RECORDING.with_suffix(".json").read_text())
    if kernel_source_hash(FAMILIES["gemm_mma"].source) not in sidecar["kernel_hashes"]:
        pytest.skip("kernels/families/gemm_mma/gemm_mma.cu changed since the recording: re-record on the H200")


def tunetable(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "250"}   # one line per message
    return subprocess.run([sys.executable, "-m", "tunetable", *args], cwd=REPO, capture_output=True, text=True, env=env,
                          check=False)


def bench(params: Path, root: Path) -> subprocess.CompletedProcess[str]:
    shape_args = [arg for shape in SHAPES for arg in ("--shape", shape)]
    return tunetable("bench", "--table", "gemm_mma", "--backend", "replay", *shape_args,
                     "--params", str(params), "--results-root", str(root))


SEARCH = {"strategy": "model", "max_fevals": 5, "seed": 3, "learn_from": str(RECORDING)}


@pytest.mark.slow
def test_bench_runs_the_tables_search_per_shape_and_records_it(tmp_path: Path) -> None:
    params = gemm_mma_only_params(tmp_path, search=SEARCH)
    done = bench(params, tmp_path / "results")
    assert done.returncode == 0, done.stderr
    assert "search model(max_fevals=5,seed=3,learn_from=" in done.stderr
    key = shard_key(load_params(params), table_spec(load_params(params), "gemm_mma"), "replay")
    shards = sorted((tmp_path / "results" / "raw" / "gemm_mma" / key).glob("*.pkl"))
    assert len(shards) == len(SHAPES)
    import pandas as pd

    recorded = pd.read_parquet(RECORDING)
    for path in shards:
        shard = read_shard(path)
        frame = shard["merged_df"]
        assert set(ROW_FIELDS) <= set(frame.columns) and set(SEARCH_FIELDS) <= set(frame.columns)
        kernels = frame[frame["kind"] == "kernel"]
        assert len(kernels) == 5 and (frame["kind"] == "baseline").sum() == 1
        assert list(kernels["search_step"]) == [0, 1, 2, 3, 4]
        assert set(frame["search_strategy"]) == {"model"} and set(frame["search_seed"]) == {3}
        assert set(frame["search_max_fevals"]) == {5} and set(frame["backend"]) == {"replay"}
        # Served, never invented: every row is the recording's measurement of that configuration.
        m, n, k = (int(frame[c].iloc[0]) for c in ("M", "N", "K"))
        same = recorded[(recorded["M"] == m) & (recorded["N"] == n) & (recorded["K"] == k)].set_index("config_id")
        for row in frame.to_dict(orient="records"):
            assert row["median_ms"] == same.loc[row["config_id"], "median_ms"]
        search = shard["provenance"]["search"]
        assert search["label"].startswith("model(max_fevals=5") and search["learned_from_shapes"] == 54
        assert [t["config_id"] for t in search["trace"]] == list(kernels["config_id"])

    # Downstream: rank and select work on shards that hold only some configurations.
    ranked = tmp_path / "ranked" / "gemm_mma.parquet"
    done = tunetable("rank", "--table", "gemm_mma", "--out", str(ranked), *map(str, shards))
    assert done.returncode == 0, done.stderr
    manifest = tmp_path / "gemm_mma.yaml"
    done = tunetable("select", "--table", "gemm_mma", "--ranked", str(ranked), "--out", str(manifest),
                     "--params", str(params))
    assert done.returncode == 0, done.stderr
    entries = load_yaml_file(manifest)["params"]
    assert {e["N"] for e in entries} == {4096} and entries[0]["M"] == 1

    # The same settings again give the same shards (a deterministic search over the same recording).
    again = bench(params, tmp_path / "again")
    assert again.returncode == 0, again.stderr
    for path in shards:
        twin = tmp_path / "again" / path.relative_to(tmp_path / "results")
        assert list(read_shard(twin)["merged_df"]["config_id"]) == list(read_shard(path)["merged_df"]["config_id"])


def test_without_search_the_bench_measures_everything_under_todays_key(tmp_path: Path) -> None:
    plain = gemm_mma_only_params(tmp_path, search=None)
    done = bench(plain, tmp_path / "results")
    assert done.returncode == 0, done.stderr
    assert "per shape (params.yaml tables.gemm_mma.search)" not in done.stderr
    params = load_params(plain)
    key = shard_key(params, table_spec(params, "gemm_mma"), "replay")
    searched = load_params(gemm_mma_only_params(tmp_path, search=SEARCH))
    assert shard_key(searched, table_spec(searched, "gemm_mma"), "replay") != key
    frame = read_shard(tmp_path / "results" / "raw" / "gemm_mma" / key / "M64_N4096_K4096.pkl")["merged_df"]
    assert not set(SEARCH_FIELDS) & set(frame.columns)
    # Everything: each configuration of the grid once, as the recording measured this shape.
    import pandas as pd

    kept = expand(table_spec(params, "gemm_mma"), limits=DeviceLimits.from_params(params)).kept
    recorded = pd.read_parquet(RECORDING)
    recorded = recorded[(recorded["M"] == 64) & (recorded["N"] == 4096) & (recorded["K"] == 4096)
                        & (recorded["kind"] == "kernel")]
    kernels = frame[frame["kind"] == "kernel"]["config_id"]
    assert len(kernels) == len(kept) and set(kernels) == {c.id for c in kept} == set(recorded["config_id"])


def test_a_bad_search_setting_is_one_line_naming_its_place(tmp_path: Path) -> None:
    params = gemm_mma_only_params(tmp_path, search={"strategy": "model", "max_fevals": 5, "budget": 3})
    done = bench(params, tmp_path / "results")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().endswith("Additional properties are not allowed ('budget' was unexpected)")
    assert "tables.gemm_mma.search" in done.stderr


def test_seed_from_selector_measures_the_selectors_candidates_first(tmp_path: Path) -> None:
    """A new workload's search starts from the shape selector's prior (its candidates of this table)."""
    from tunetable.selector_seeds import seed_ids, seed_model

    search = {"strategy": "model", "max_fevals": 4, "seed": 0, "transfer": False, "seed_from_selector": True}
    params = gemm_mma_only_params(tmp_path, search=search)
    data = load_yaml_file(params)   # a selector over the one table (its recording seeds the search)
    data["selector"] = {"gemm_selector": {**load_yaml_file(REPO / "params.yaml")["selector"][
        "gemm_selector"], "tables": ["gemm_mma"]}}
    params.write_text(yaml.safe_dump(data, sort_keys=False))
    done = bench(params, tmp_path / "results")
    assert done.returncode == 0, done.stderr
    assert "seed_from_selector=True" in done.stderr
    loaded = load_params(params)
    key = shard_key(loaded, table_spec(loaded, "gemm_mma"), "replay")
    unseeded = load_params(gemm_mma_only_params(tmp_path / "plain", search={**search, "seed_from_selector": False}))
    plain = shard_key(unseeded, table_spec(unseeded, "gemm_mma"), "replay")
    assert key != plain   # its own content key: never mistaken for another search's shards
    model = seed_model(params=loaded, path=params)
    seeded = 0
    for text in SHAPES:
        m, n, k = (int(v) for v in text.split(","))
        frame = read_shard(tmp_path / "results" / "raw" / "gemm_mma" / key / f"M{m}_N{n}_K{k}.pkl")["merged_df"]
        kernels = frame[frame["kind"] == "kernel"].sort_values("search_step")
        # the model strategy measures its first seeds (max_seeds, 2) before its own picks: the selector
        # model's two best gemm_mma configurations for the shape
        expected = seed_ids(model=model, table="gemm_mma", shape=(m, n, k))[:2]
        assert len(expected) == 2 and list(kernels["config_id"])[:2] == expected
        seeded += 1
    assert seeded == len(SHAPES)


def test_seeds_come_from_the_first_declared_selector(monkeypatch: pytest.MonkeyPatch) -> None:
    """seed_tables and seed_coverage read the one selector seed_selector names: the first declared."""
    from tunetable.selector_seeds import seed_coverage, seed_selector, seed_tables

    monkeypatch.chdir(REPO)   # recordings resolve from the working folder, as the bench resolves them
    path = REPO / "params.yaml"
    loaded = load_params(path)
    # params.yaml names no coverage CSV (docs/selector_validation.md): the first selector here names one
    declared = {**loaded["selector"]["gemm_selector"], "coverage": "data/coverage_shapes.csv"}
    params = {**loaded, "selector": {**loaded["selector"], "gemm_selector": declared}}
    narrow = {**params, "selector": {"narrow": {**declared, "tables": ["gemm_mma"], "coverage": None},
                                     **params["selector"]}}
    none = {name: value for name, value in params.items() if name != "selector"}
    assert seed_selector(params=params, path=path).name == "gemm_selector"
    assert [spec.name for spec in seed_tables(params=params, path=path)] == declared["tables"]
    assert seed_coverage(params=params, path=path) == "data/coverage_shapes.csv"
    assert seed_coverage(params=loaded, path=path) is None
    assert seed_selector(params=narrow, path=path).name == "narrow"
    assert [spec.name for spec in seed_tables(params=narrow, path=path)] == ["gemm_mma"]
    assert seed_coverage(params=narrow, path=path) is None
    assert seed_selector(params=none, path=path) is None
    assert seed_tables(params=none, path=path) == [] and seed_coverage(params=none, path=path) is None
