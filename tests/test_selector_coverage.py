"""Coverage recordings: extra (N, K) pairs recorded for the shape selector's fit only (params.yaml
``selector.<s>.coverage``, ``<device>_coverage_<table>`` recordings; docs/selector_data.md).

params.yaml names no coverage CSV since the folds dropped it (docs/selector_validation.md), so each project here
names one (COVERAGE_PARAMS). The H200 has no coverage recording, so a tmp project stands the H200's validation
recordings in as one (real GPU rows at shapes no table holds), with a validation CSV that leaves those shapes out;
suggest's coverage rows are checked on the H100's committed coverage recordings. Expected values are recomputed
from the parquet files (polars) and by least squares (numpy), never read back from the fit.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tunetable.codegen_devices import coverage_recordings
from tunetable.errors import TuneTableError
from tunetable.kernels.families.devices import coverage_recording_path
from tunetable.params import load_params, selector_spec, table_spec
from tunetable.selector_measurements import load_table_measurements, selector_tables, shared_yardstick
from tunetable.selector_manifest import fit_selector_files
from tunetable.workflow.targets import selector_inputs

REPO = Path(__file__).resolve().parents[1]
PARAMS = load_params(REPO / "params.yaml")
SPEC = selector_spec(PARAMS, "gemm_selector")
TABLES = SPEC.tables
# Stand-in coverage shapes: the validation set's far pairs (Qwen2-7B's MLP), recorded on the H200 for every table.
STAND_IN = [(5, 18944, 3584), (64, 18944, 3584), (250, 18944, 3584), (1200, 18944, 3584),
            (40, 3584, 18944), (144, 3584, 18944), (480, 3584, 18944), (2500, 3584, 18944)]
VALIDATION_LINES = (REPO / "data" / "validation_shapes.csv").read_text().splitlines()
COVERAGE_CSV = "data/coverage_shapes.csv"
SELECTOR_DATA_LINE = f"    data: {SPEC.data}\n"
# params.yaml with the selector's coverage key (the setting the tests below exercise)
COVERAGE_PARAMS = (REPO / "params.yaml").read_text().replace(
    SELECTOR_DATA_LINE, f"{SELECTOR_DATA_LINE}    coverage: {COVERAGE_CSV}\n", 1)


def shape_line(shape: tuple[int, int, int]) -> str:
    """An M,N,K line."""
    return ",".join(str(v) for v in shape)


def make_project(root: Path, *, coverage: list[tuple[int, int, int]] = STAND_IN, with_coverage: bool = True,
                 tables: tuple[str, ...] = TABLES, params_text: str | None = None) -> Path:
    """A project at ``root``: params.yaml, the H200 tables' recordings, the coverage CSV, a validation CSV without the
    stand-in shapes and (``with_coverage``) h200_coverage_<t> = the H200's validation recording of ``tables``."""
    recordings = root / "data" / "recordings"
    recordings.mkdir(parents=True)
    (root / "kernels" / "data").mkdir(parents=True)
    (root / "params.yaml").write_text(params_text or COVERAGE_PARAMS)
    for table in TABLES:
        for suffix in (".parquet", ".json"):
            shutil.copy(REPO / "data" / "recordings" / f"h200_{table}{suffix}", recordings / f"h200_{table}{suffix}")
    if with_coverage:
        for table in tables:
            for suffix in (".parquet", ".json"):
                shutil.copy(REPO / "data" / "recordings" / f"h200_validation_{table}{suffix}",
                            recordings / f"h200_coverage_{table}{suffix}")
    (root / "data" / "coverage_shapes.csv").write_text("M,N,K\n" + "".join(f"{shape_line(s)}\n" for s in coverage))
    kept = [line for line in VALIDATION_LINES if line not in {shape_line(s) for s in STAND_IN}]
    (root / "data" / "validation_shapes.csv").write_text("\n".join(kept) + "\n")
    return root


def project_tables(root: Path, *, coverage: str | None = COVERAGE_CSV):
    """``selector_tables`` of the project at ``root`` (its params.yaml)."""
    params = load_params(root / "params.yaml")
    specs = [table_spec(params, name, path=root / "params.yaml") for name in TABLES]
    return selector_tables(root=root, specs=specs, coverage=coverage)


def run_select(root: Path) -> subprocess.CompletedProcess:
    """`tunetable select --selector gemm_selector` in the project at ``root``."""
    return subprocess.run([sys.executable, "-m", "tunetable", "select", "--selector", "gemm_selector", "--params",
                           str(root / "params.yaml"), "--out", str(root / "manifests" / "gemm_selector.yaml")],
                          cwd=root, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("coverage"))


@pytest.fixture(scope="module")
def merged(project):
    return project_tables(project)


def ok_rows(path: Path, shapes) -> pl.DataFrame:
    """A recording's ok configuration rows at ``shapes`` (read with polars, not through the fit)."""
    wanted = pl.DataFrame(list(shapes), schema=["M", "N", "K"], orient="row")
    frame = pl.read_parquet(path).join(wanted, on=["M", "N", "K"], how="semi")
    return frame.filter((pl.col("status") == "ok") & (pl.col("kind") == "kernel"))


def test_the_coverage_path_is_derived_beside_the_recordings_path(tmp_path) -> None:
    assert coverage_recording_path(device="h100", table="gemm_mma") == "data/recordings/h100_coverage_gemm_mma.parquet"
    spec = table_spec(PARAMS, "gemm_wgmma.h100")
    assert spec.coverage_recording() == "data/recordings/h100_coverage_gemm_wgmma.parquet"
    assert table_spec(PARAMS, "gemm_mma").coverage_recording() == "data/recordings/h200_coverage_gemm_mma.parquet"
    # A device's selector takes the setting of the selector it derives from: none in params.yaml, the CSV here.
    assert selector_spec(PARAMS, "gemm_selector.h100").coverage is None and SPEC.coverage is None
    (tmp_path / "params.yaml").write_text(COVERAGE_PARAMS)
    named = load_params(tmp_path / "params.yaml")
    assert selector_spec(named, "gemm_selector.h100").coverage == selector_spec(named, "gemm_selector").coverage \
        == COVERAGE_CSV


def test_coverage_rows_are_merged_at_the_csv_shapes_and_the_tables_rows_stay(project, merged) -> None:
    assert not merged.coverage_absent
    for table in merged.tables:
        alone = load_table_measurements(root=project, spec=table_spec(PARAMS, table.table))
        assert {s: dict(t) for s, t in table.times.items() if s in alone.times} == {
            s: dict(t) for s, t in alone.times.items()}
        assert sorted(table.own_shapes()) == sorted(alone.times)
        path = project / "data" / "recordings" / f"h200_coverage_{table.table}.parquet"
        own_ms = [m for m, _, _ in table_spec(PARAMS, table.table).shapes()]
        rows = ok_rows(path, [s for s in STAND_IN if min(own_ms) <= s[0] <= max(own_ms)])
        known = {config.config_id for config in alone.configs}
        expected: dict[tuple[int, int, int], dict[str, float]] = {}
        for row in rows.iter_rows(named=True):
            if row["config_id"] in known:
                expected.setdefault((row["M"], row["N"], row["K"]), {})[row["config_id"]] = row["median_ms"]
        added = {s: dict(t) for s, t in table.times.items() if s not in alone.times}
        assert set(added) == set(expected) and set(added) <= set(STAND_IN) and added
        for shape, by_config in expected.items():
            assert added[shape].keys() == by_config.keys()
            assert all(math.isclose(added[shape][c], ms, rel_tol=1e-12) for c, ms in by_config.items())
        assert {table.session(s) for s in added} == {f"data/recordings/h200_coverage_{table.table}.parquet"}
        assert table.coverage is not None and table.coverage.source.endswith(f"h200_coverage_{table.table}.parquet")


def test_coverage_rows_above_a_tables_largest_m_are_left_out(merged) -> None:
    swap = next(table for table in merged.tables if table.table == "gemm_wgmma_swap")
    assert max(m for m, _, _ in table_spec(PARAMS, "gemm_wgmma_swap").shapes()) == 1024
    added = {shape for shape in swap.times if shape in STAND_IN}
    assert added == {s for s in STAND_IN if s[0] <= 1024}   # 1200 and 2500 x 3584 x 18944 left out
    wgmma = next(table for table in merged.tables if table.table == "gemm_wgmma")
    assert {shape for shape in wgmma.times if shape in STAND_IN} == set(STAND_IN)


def least_squares_yardstick(rows: dict[tuple[str, str], dict[tuple[int, int, int], float]]) -> dict:
    """exp(scale_r + level_s) of log cuBLAS = scale_r + level_s fitted by numpy on the shapes two sessions share;
    a shape one session measured keeps its row."""
    counts: dict = {}
    for by_shape in rows.values():
        for shape in by_shape:
            counts[shape] = counts.get(shape, 0) + 1
    sessions = list(rows)
    shared = sorted({s for s, c in counts.items() if c > 1})
    observations = [(i, shared.index(s), math.log(ms)) for i, r in enumerate(sessions) for s, ms in rows[r].items()
                    if s in shared]
    design = np.zeros((len(observations), len(sessions) + len(shared)))
    for row, (i, j, _) in enumerate(observations):
        design[row, i] = design[row, len(sessions) + j] = 1.0
    solution = np.linalg.lstsq(design, np.array([o[2] for o in observations]), rcond=None)[0]
    return {(r, s): (math.exp(solution[i] + solution[len(sessions) + shared.index(s)]) if s in shared else ms)
            for i, r in enumerate(sessions) for s, ms in rows[r].items()}


def test_the_yardstick_pools_per_table_and_recording(merged) -> None:
    pooled = shared_yardstick(merged.tables)
    coverage_rows = {(t.table, t.session(s)): {} for t in merged.tables for s in t.times if s in t.sessions}
    for table in merged.tables:
        for shape, ms in table.cublas.items():
            if shape in table.sessions:
                coverage_rows[(table.table, table.session(shape))][shape] = ms
    expected = least_squares_yardstick(coverage_rows)
    for table in pooled:
        for shape in table.sessions:
            assert math.isclose(table.cublas[shape], expected[((table.table, table.session(shape)), shape)],
                                rel_tol=1e-9)
    # The coverage sessions share no shape with the tables' recordings: the tables' yardstick is as without them.
    alone = shared_yardstick([table.without(lambda s, t=table: s in t.sessions) for table in merged.tables])
    for with_coverage, without in zip(pooled, alone):
        assert without.cublas.keys() == set(with_coverage.own_shapes())
        assert all(math.isclose(with_coverage.cublas[s], ms, rel_tol=1e-9) for s, ms in without.cublas.items())


def test_the_fit_reads_the_coverage_pairs_and_the_manifest_names_each_recording(project, merged) -> None:
    manifest, data = fit_selector_files(name="gemm_selector", tables=merged.tables, data_path=SPEC.data,
                                        candidates=SPEC.candidates)
    for table in TABLES:
        frame = pl.read_parquet(project / "data" / "recordings" / f"h200_coverage_{table}.parquet")
        assert f'{table}_coverage_recording: "data/recordings/h200_coverage_{table}.parquet"' in manifest
        assert f'{table}_recording: "data/recordings/h200_{table}.parquet"' in manifest
        hashes = sorted(frame["kernel_hash"].unique().to_list())
        assert f"{table}_coverage_kernel_hash: " in manifest and all(h in manifest for h in hashes)
        assert f"{table}_coverage_data_hash: " in manifest
    # The candidates' bias terms now hold the coverage pairs (N, K, ...): terms at (18944, 3584) and (3584, 18944).
    assert "[18944,3584," in data.replace(" ", "") and "[3584,18944," in data.replace(" ", "")
    committed = (REPO / SPEC.data).read_text()
    assert "[18944,3584," not in committed.replace(" ", "")


def test_without_coverage_recordings_the_data_file_is_byte_identical(tmp_path) -> None:
    root = make_project(tmp_path, with_coverage=False)
    result = run_select(root)
    assert result.returncode == 0, result.stderr
    assert "no coverage recordings (data/recordings/h200_coverage_gemm_mma.parquet and 2 more)" in result.stderr
    assert (root / SPEC.data).read_bytes() == (REPO / SPEC.data).read_bytes()
    assert (root / "manifests" / "gemm_selector.yaml").read_bytes() == (REPO / "manifests" / "gemm_selector.yaml"
                                                                        ).read_bytes()


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one error line of a failed command (exit 2)."""
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_coverage_shape_that_is_a_tables_shape_is_one_line_naming_the_csv_line(tmp_path) -> None:
    root = make_project(tmp_path, coverage=[*STAND_IN[:2], (64, 4096, 4096)])
    line = error_line(run_select(root))
    assert "data/coverage_shapes.csv: line 4: M=64 N=4096 K=4096 is a shape of table gemm_mma" in line


def test_a_coverage_shape_that_is_a_validation_shape_is_an_error(tmp_path) -> None:
    root = make_project(tmp_path / "p", coverage=[*STAND_IN[:3], (77, 4096, 4096)])
    with pytest.raises(TuneTableError, match=r"coverage_shapes.csv: line 5: M=77 N=4096 K=4096 is a validation "
                                             r"shape \(data/validation_shapes.csv\)"):
        project_tables(root)


def test_a_device_with_some_coverage_recordings_only_names_the_missing_one(tmp_path) -> None:
    root = make_project(tmp_path, tables=TABLES[:2])
    line = error_line(run_select(root))
    assert line.startswith(f"error: data/recordings/h200_coverage_{TABLES[2]}.parquet: coverage recording absent")


def test_a_coverage_recording_of_other_kernel_sources_is_refused(tmp_path) -> None:
    # gemm_mma's table recording is the H200's rerun (kernel hash 4cbe...), its coverage the validation one (8a2c...).
    text = COVERAGE_PARAMS.replace(
        "    family: gemm_mma                 #", "    recording: data/recordings/h200_gemm_mma_rerun.parquet\n"
        "    family: gemm_mma                 #", 1)
    root = make_project(tmp_path, params_text=text)
    for suffix in (".parquet", ".json"):
        shutil.copy(REPO / "data" / "recordings" / f"h200_gemm_mma_rerun{suffix}",
                    root / "data" / "recordings" / f"h200_gemm_mma_rerun{suffix}")
    rerun = pl.read_parquet(root / "data" / "recordings" / "h200_gemm_mma_rerun.parquet")["kernel_hash"].unique()
    with pytest.raises(TuneTableError) as caught:
        project_tables(root)
    message = str(caught.value)
    assert message.startswith("data/recordings/h200_coverage_gemm_mma.parquet: kernel hashes 8a2c6cc2595fc8fb")
    assert f"are not those of data/recordings/h200_gemm_mma_rerun.parquet ({rerun.item()})" in message


def test_the_selector_rule_and_dvc_read_the_csv_and_the_coverage_recordings_present(project, tmp_path) -> None:
    params = load_params(project / "params.yaml")
    inputs = selector_inputs(selector_spec(params, "gemm_selector"), params=params, root=project)
    assert "data/coverage_shapes.csv" in inputs
    assert {f"data/recordings/h200_coverage_{t}.{ext}" for t in TABLES for ext in ("parquet", "json")} <= set(inputs)
    device = selector_spec(params, "gemm_selector.h100")
    found = selector_inputs(device, params=params, root=project)
    assert "data/coverage_shapes.csv" in found and not [p for p in found if "_coverage_" in p]   # no H100 coverage
    assert coverage_recordings(params, root=project) == [f"data/recordings/h200_coverage_{t}.parquet" for t in TABLES]
    assert coverage_recordings(params, root=tmp_path) == []


class Built(Exception):
    """Raised by a stand-in build_selector once it has seen a fold's training tables."""

    def __init__(self, tables):
        super().__init__("built")
        self.tables = tables


def test_unseen_shapes_folds_train_with_coverage_and_score_only_the_tables_shapes(merged, monkeypatch) -> None:
    from bench_support import load_benchmark_script

    unseen = load_benchmark_script("unseen_shapes")
    measured = unseen.normalised(list(merged.tables), own_only=True)
    own = {s for t in merged.tables for s in t.own_shapes()}
    assert set(measured) <= own and not set(measured) & set(STAND_IN)

    def capture(*, tables, candidates):
        raise Built(tables)

    monkeypatch.setattr(unseen, "build_selector", capture)
    held = [s for s in measured if s[1:] == (4096, 4096)]
    with pytest.raises(Built) as nk:
        unseen.fold(tables=list(merged.tables), measured=measured, held=held, candidates=4, label="nk")
    trained = {s for t in nk.value.tables for s in t.times}
    assert set(STAND_IN) & trained and not set(held) & trained
    m_held = [s for s in measured if s[0] == 64]
    with pytest.raises(Built) as m_fold:
        unseen.fold(tables=list(merged.tables), measured=measured, held=m_held, candidates=4, label="m",
                    left_out=lambda s: s[0] == 64)
    trained = {s for t in m_fold.value.tables for s in t.times}
    assert (64, 18944, 3584) not in trained and (250, 18944, 3584) in trained and not {s[0] for s in trained} & {64}


def test_unseen_shapes_holds_the_coverage_recordings_out_only_from_a_fit_that_never_read_them() -> None:
    from bench_support import load_benchmark_script

    unseen = load_benchmark_script("unseen_shapes")
    paths = unseen.held_out_paths(device="h100", names=("gemm_mma", "gemm_wgmma.h100"), held_out="coverage")
    assert {k: p.relative_to(REPO).as_posix() for k, p in paths.items()} == {
        "gemm_mma": "data/recordings/h100_coverage_gemm_mma.parquet",
        "gemm_wgmma": "data/recordings/h100_coverage_gemm_wgmma.parquet"}
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "unseen_shapes.py"), "--coverage", COVERAGE_CSV,
                             "--held-out", "coverage"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and ("--held-out coverage needs a fit that never read them: this one reads "
                                       "data/coverage_shapes.csv (--coverage); drop --coverage") in result.stderr
    both = subprocess.run([sys.executable, str(REPO / "benchmarks" / "unseen_shapes.py"), "--no-coverage",
                           "--coverage", "data/coverage_shapes.csv"], capture_output=True, text=True, timeout=120)
    assert both.returncode == 2 and "--coverage and --no-coverage: give one" in both.stderr


def test_unseen_shapes_names_a_result_by_what_its_fit_read() -> None:
    """The fit `select` builds writes unseen_shapes.json; one reading other coverage than params.yaml says which."""
    from bench_support import load_benchmark_script

    unseen = load_benchmark_script("unseen_shapes")
    csv = "data/coverage_shapes.csv"
    assert unseen.fit_coverage(setting=csv, no_coverage=False, coverage=None) == csv
    assert unseen.fit_coverage(setting=csv, no_coverage=True, coverage=None) is None
    assert unseen.fit_coverage(setting=None, no_coverage=False, coverage=csv) == csv
    names = [unseen.result_name(setting=setting, fitted=fitted, held_out="validation")
             for setting, fitted in ((csv, csv), (csv, None), (None, None), (None, csv))]
    assert names == ["unseen_shapes.json", "unseen_shapes.no_coverage.json", "unseen_shapes.json",
                     "unseen_shapes.with_coverage.json"]
    assert unseen.result_name(setting=None, fitted=None, held_out="coverage") == "unseen_shapes.coverage_held_out.json"


def suggested_cublas_us(root: Path, shape: tuple[int, int, int]) -> tuple[float, subprocess.CompletedProcess]:
    """The cuBLAS time `tunetable suggest` predicts for ``shape`` in the project at ``root`` (µs), and the run."""
    result = subprocess.run([sys.executable, "-m", "tunetable", "suggest", "--params", str(root / "params.yaml"),
                             "--shape", shape_line(shape)], cwd=root, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "COLUMNS": "60"})   # narrow: one `name=value` record per row
    assert result.returncode == 0, result.stderr
    found = re.search(r"cuBLAS µs=([0-9.]+)", result.stdout)
    assert found is not None, result.stdout
    return float(found.group(1)), result


def test_suggest_reads_the_same_merged_view(tmp_path) -> None:
    # At a stand-in coverage shape, suggest's cuBLAS time (predicted from the recordings' terms) comes nearer the
    # cuBLAS rows recorded there once the coverage recordings feed it.
    shape = (64, 18944, 3584)
    recorded = []
    for table in TABLES:
        frame = pl.read_parquet(REPO / "data" / "recordings" / f"h200_validation_{table}.parquet")
        rows = frame.filter((pl.col("kind") == "baseline") & (pl.col("M") == shape[0]) & (pl.col("N") == shape[1])
                            & (pl.col("K") == shape[2]))
        recorded += rows["median_ms"].to_list()
    measured_us = 1e3 * math.exp(sum(math.log(v) for v in recorded) / len(recorded))
    with_us, _ = suggested_cublas_us(make_project(tmp_path / "with"), shape)
    without_us, _ = suggested_cublas_us(make_project(tmp_path / "without", with_coverage=False), shape)
    assert abs(math.log(with_us / measured_us)) < abs(math.log(without_us / measured_us))


def test_trace_names_the_coverage_recording_behind_an_entry(project) -> None:
    assert run_select(project).returncode == 0
    traced = subprocess.run([sys.executable, "-m", "tunetable", "trace", "gemm_selector", "0", "--params",
                             str(project / "params.yaml")], cwd=project, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "COLUMNS": "200"})
    assert traced.returncode == 0, traced.stderr
    manifest = (project / "manifests" / "gemm_selector.yaml").read_text()
    first = next(line for line in (project / SPEC.data).read_text().splitlines() if line.startswith('{"M":'))
    table = re.search(r'"TABLE":"([a-z_]+)"', first).group(1)
    built = re.search(rf"{table}_coverage_data_hash: \"?([0-9a-f]{{16}})", manifest).group(1)
    assert (f"data/recordings/h200_coverage_{table}.parquet (coverage recording: its (N, K) feed the fit only), "
            f"data hash {built}: the rows the selector was built from") in traced.stdout


def suggest_row(stdout: str, shape: tuple[int, int, int]) -> list[str]:
    """The cells of `tunetable suggest`'s row for ``shape`` (a wide table: one line per row)."""
    for line in stdout.splitlines():
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if cells[:3] == [str(v) for v in shape]:
            return cells
    raise AssertionError(f"no row for {shape} in:\n{stdout}")


def test_suggest_shows_the_h100_coverage_recordings_measurement_at_a_coverage_shape(tmp_path) -> None:
    # 256 x 3072 x 24576 is a line of data/coverage_shapes.csv (no table holds it): the H100's coverage recordings
    # measured every configuration there, so with the coverage key the selector's pick shows that recording's median
    # and its cuBLAS (the yardstick table rows show: its rows in its session scale, pooled with the other coverage
    # recordings'). 300 x 3072 x 24576 nobody measured: predicted. Expected numbers: polars on the committed parquet
    # files. The project: params.yaml with the coverage key and the H100's committed recordings.
    from tunetable.kernels.runtime.decide import shape_selector

    shape, unmeasured = (256, 3072, 24576), (300, 3072, 24576)
    csv = pl.read_csv(REPO / COVERAGE_CSV, comment_prefix="#")
    assert shape in set(csv.select("M", "N", "K").iter_rows())
    root = make_project(tmp_path, coverage=list(csv.select("M", "N", "K").iter_rows()), with_coverage=False)
    for recording in (REPO / "data" / "recordings").glob("h100_*"):
        if not recording.name.startswith("h100_validation_"):
            shutil.copy(recording, root / "data" / "recordings" / recording.name)
    done = subprocess.run([sys.executable, "-m", "tunetable", "suggest", "--params", str(root / "params.yaml"),
                           "--device", "h100", "--shape", shape_line(shape), "--shape", shape_line(unmeasured)],
                          cwd=root, capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "400"})
    assert done.returncode == 0, done.stderr
    chosen = shape_selector("gemm_selector", device="h100").choose(m=shape[0], n=shape[1], k=shape[2]).candidate
    recording = f"data/recordings/h100_coverage_{chosen.table}.parquet"
    at_shape = (pl.col("M") == shape[0]) & (pl.col("N") == shape[1]) & (pl.col("K") == shape[2])
    kernel = pl.read_parquet(REPO / recording).filter(at_shape & (pl.col("kind") == "kernel")
                                                      & (pl.col("status") == "ok")
                                                      & (pl.col("config_id") == chosen.config_id))
    assert kernel.height == 1
    median_ms = kernel["median_ms"][0]
    # cuBLAS rows per (table, coverage recording) at the CSV's shapes within the table's own Ms (as merged)
    rows: dict[tuple[str, str], dict[tuple[int, int, int], float]] = {}
    for table in TABLES:
        own_ms = [m for m, _, _ in table_spec(PARAMS, f"{table}.h100").shapes()]
        path = f"data/recordings/h100_coverage_{table}.parquet"
        baseline = pl.read_parquet(REPO / path).join(csv, on=["M", "N", "K"], how="semi").filter(
            (pl.col("kind") == "baseline") & (pl.col("status") == "ok")
            & pl.col("M").is_between(min(own_ms), max(own_ms)))
        rows[(table, path)] = {(r["M"], r["N"], r["K"]): r["median_ms"] for r in baseline.iter_rows(named=True)}
    own_cublas_ms = rows[(chosen.table, recording)][shape]
    cublas_ms = least_squares_yardstick(rows)[((chosen.table, recording), shape)]
    assert math.isclose(cublas_ms, own_cublas_ms, rel_tol=0.01)   # that recording's cuBLAS, in its session scale

    m, n, k, family, config, where, time_us, cublas_us, speedup, basis = suggest_row(done.stdout, shape)
    assert (family, config, basis) == (chosen.kernel, chosen.config_id, "measured (coverage)")
    assert where.startswith("selector gemm_selector.h100[")
    assert float(time_us) == pytest.approx(median_ms * 1e3, abs=5.1e-4)
    assert float(cublas_us) == pytest.approx(cublas_ms * 1e3, abs=5.1e-4)
    assert float(speedup) == pytest.approx(cublas_ms / median_ms, abs=5.1e-4)
    assert (f"measured (coverage) rows: the selector's pick as the coverage recording {recording} measured it at "
            "256x3072x24576 (") in done.stdout
    assert suggest_row(done.stdout, unmeasured)[-1] == "predicted"
    assert "300x3072x24576" not in done.stdout


def test_unseen_shapes_model_ceilings_reach_every_reader_of_the_constants_and_only_with_folds() -> None:
    """--model-ceilings: the roofline floor (the closures) and the build's numpy twins read the device's ceilings."""
    from bench_support import load_benchmark_script

    from tunetable import perfmodel_grid
    from tunetable.kernels import perfmodel
    from tunetable.search import prior

    unseen = load_benchmark_script("unseen_shapes")
    names = ("HBM_BYTES_PER_S", "DEVICE_FLOPS")
    saved = {(module, name): getattr(module, name) for module in (perfmodel, perfmodel_grid, prior) for name in names}
    try:
        unseen.use_model_ceilings(copy_tb_s=3.04, tflops=782.1)
        moved = (64 * 4096 + 4096 * 4096 + 64 * 4096) * 2
        assert perfmodel.roofline_floor_s(m=64, n=4096, k=4096) == moved / 3.04e12
        assert (perfmodel_grid.HBM_BYTES_PER_S, perfmodel_grid.DEVICE_FLOPS) == (3.04e12, 782.1e12)
        assert (prior.HBM_BYTES_PER_S, prior.DEVICE_FLOPS) == (3.04e12, 782.1e12)
    finally:   # the shipped constants back, exactly (other tests in this process read them)
        for (module, name), value in saved.items():
            setattr(module, name, value)
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "unseen_shapes.py"), "--model-ceilings", "h100"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--model-ceilings h100: needs --folds-only" in done.stderr
