"""`tunetable trace` on the dispatch list, on the committed manifests and H200 recordings.

Every figure checked here is recomputed from the committed recordings' rows (cuBLAS median /
selected winner median of the same shape; the shared cuBLAS yardstick by a least-squares solve of
log cuBLAS = scale + level over the recordings' rows, independent of tunetable.baseline's
alternating means), never invented. A project copy without results reads
the recordings; a copy replayed by the real `snakemake` reads its ranked tables, then its raw shards.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import polars as pl
import pytest
from pipeline_repo import (
    REPO,
    edit_params,
    project_files,
    small_table,
    snakemake,
    tunetable,
    without_other_devices,
)
from recording_figures import recording_speedup, yardsticks_by_lstsq

from tunetable import trace
from tunetable.codegen import marker_line
from tunetable.errors import TuneTableError
from tunetable.manifest import load_ranges, lookup
from tunetable.params import dispatch_spec, load_params, primary_recording, table_specs
from tunetable.yamlio import load_yaml_file

DISPATCH = "gemm_dispatch"
TARGET = "kernels/tuning_configs.py"
PARAMS = load_params(REPO / "params.yaml")
LISTED = tuple(PARAMS["dispatch"][DISPATCH]["tables"])  # the list's candidate tables, in order
RECORDINGS = {name: REPO / str(primary_recording(PARAMS, name)) for name in LISTED}
RERUN = "data/recordings/h200_gemm_mma_rerun.parquet"
pytestmark = pytest.mark.skipif(not all(p.is_file() for p in RECORDINGS.values()) or not (REPO / RERUN).is_file(),
                                reason="the committed H200 recordings of the dispatch list's tables (and "
                                       "h200_gemm_mma_rerun) are absent")


def copy_project(dest: Path) -> Path:
    """The project's files (as a clone has them, no results/) copied into ``dest``."""
    for name in project_files():
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    return dest


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the project without results: trace can only read the recordings."""
    return copy_project(tmp_path_factory.mktemp("trace_copy"))


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A three-shape copy whose main job (`snakemake --cores 2`, replay) wrote shards, ranked tables and the list;
    the primary device's only (the list traced here is its own; the other devices' would double the run)."""
    root = copy_project(tmp_path_factory.mktemp("trace_replayed"))
    edit_params(root, small_table)
    without_other_devices(root)
    done = snakemake("--cores", "2", cwd=root)
    assert "REPLAYING" in done.output
    return root


def trace_all(root: Path, *, recordings: dict[str, str] | None = None,
              first: int | None = None) -> list[trace.DispatchTrace]:
    """Every entry (or the ``first`` few) of the dispatch list traced; ``recordings`` overrides tables' recordings."""
    params = load_params(root / "params.yaml")
    tables = {s.name: dataclasses.replace(s, recording=(recordings or {}).get(s.name, s.recording))
              for s in table_specs(params)}
    spec = dispatch_spec(params, DISPATCH)
    count = len(load_ranges(root / spec.codegen.manifest)[1])
    cache = trace.TraceCache()   # the same files over the entries: each source ranked, each recording checked once
    return [trace.trace_dispatch(root=root, spec=spec, tables=tables, index=i, cache=cache)
            for i in range(count)[:first]]


def check_against_recordings(root: Path, results: list[trace.DispatchTrace], *, kind: str) -> None:
    """Each entry's decision: the shapes, each candidate's speedup from the recording rows, the pick, the entry."""
    params = load_params(root / "params.yaml")
    specs = {s.name: s for s in table_specs(params)}
    selected = {name: load_ranges(root / s.codegen.manifest)[1] for name, s in specs.items()}
    listed = load_yaml_file(root / "manifests" / f"{DISPATCH}.yaml")
    yardsticks = yardsticks_by_lstsq({name: set(specs[name].shapes()) for name in LISTED}, RECORDINGS)
    assert [r.entry.index for r in results] == list(range(len(listed["params"])))
    for result, raw in zip(results, listed["params"]):
        assert (result.table, result.config_id) == (raw["TABLE"], raw["CONFIG_ID"])
        assert [s.kind for s in result.sources] == [kind] * len(LISTED)
        for source in result.sources:  # the rows read are the rows the list was selected from
            assert source.data_hash == listed["provenance"][f"{source.table}_data_hash"]
        n, k = raw["N"], raw["K"]
        assert [d.m for d in result.decisions] == sorted(
            {m for s in specs.values() for m in s.m_values if raw["M"] <= m < raw["M_END"]})
        for decision in result.decisions:
            for candidate in decision.candidates:
                entry = lookup(selected[candidate.table], m=decision.m, n=n, k=k)
                assert (candidate.entry_index, candidate.config_id) == (entry.index, entry.config_id)
                if decision.m not in specs[candidate.table].m_values:  # a table that never measured this M
                    assert candidate.measured is None and candidate.table != result.table, (decision.m, candidate)
                    continue
                assert candidate.measured.shard_speedup == recording_speedup(
                    path=RECORDINGS[candidate.table], m=decision.m, n=n, k=k, config_id=entry.config_id)
                assert candidate.measured.cublas_ms == pytest.approx(
                    yardsticks[candidate.table][(decision.m, n, k)], rel=1e-6)
            chosen = next(c for c in decision.candidates if c.table == result.table)
            assert chosen.config_id == result.config_id
            assert chosen.measured.speedup == max(c.measured.speedup for c in decision.candidates if c.measured)
            assert decision.rule_pick == result.table
        assert [t.table for t in result.table_traces] == [result.table]
        table_entry = result.table_traces[0].entry
        assert table_entry.config_id == result.config_id
        assert all(table_entry.m <= d.m < table_entry.m_end for d in result.decisions)


@pytest.mark.slow
def test_every_dispatch_entry_traces_to_the_recordings(copy: Path) -> None:
    results = trace_all(copy)
    assert results
    check_against_recordings(copy, results, kind="recording")
    by_table = {name: sum(len(r.decisions) for r in results if r.table == name) for name in RECORDINGS}
    provenance = load_ranges(copy / "manifests" / f"{DISPATCH}.yaml")[0]
    assert by_table == {name: provenance[f"{name}_shapes_won"] for name in RECORDINGS}
    # Every shape the tables measure is decided once, by one entry.
    shapes = {shape for spec in table_specs(load_params(copy / "params.yaml")) for shape in spec.shapes()}
    assert sum(by_table.values()) == provenance["shapes"] == len(shapes)


def test_trace_by_line_in_the_dispatch_region(copy: Path) -> None:
    lines = (copy / TARGET).read_text().splitlines()
    begin = next(i for i, text in enumerate(lines, 1) if "BEGIN-TUNING-LIST-GEMM_DISPATCH" in text)
    line = next(i for i, text in enumerate(lines, 1) if i > begin and "# index: [2]" in text) + 1   # snippet line 1
    params = load_params(copy / "params.yaml")
    specs = [*table_specs(params), dispatch_spec(params, DISPATCH)]
    assert trace.entry_at_line(root=copy, specs=specs, file=TARGET, line=line) == (DISPATCH, 2)
    out = tunetable("trace", f"{TARGET}:{line}", cwd=copy).output
    assert out.splitlines()[0].startswith(f"{DISPATCH}[2] {TARGET}:")
    raw = load_yaml_file(copy / "manifests" / f"{DISPATCH}.yaml")["params"][2]
    n, k, chosen = raw["N"], raw["K"], raw["TABLE"]
    assert f"M [{raw['M']}, {raw['M_END']}) N={n} K={k} -> table {chosen}, config {raw['CONFIG_ID']}" in out
    assert f"speedup over cuBLAS at its first measured M: {raw['SPEEDUP_VS_CUBLAS']}x (SPEEDUP_VS_CUBLAS; " in out
    ms = sorted({m for spec in specs[:-1] for m in spec.m_values if raw["M"] <= m < raw["M_END"]})
    assert ms
    measured = {spec.name: spec.m_values for spec in specs[:-1]}
    for m in ms:  # every measured M of the range, each table that measured it, speedups from the recording rows
        for name, recording in RECORDINGS.items():
            if m not in measured[name]:  # never measured there: no row to cite (check_against_recordings)
                continue
            entry = lookup(load_ranges(copy / "manifests" / f"{name}.yaml")[1], m=m, n=n, k=k)
            assert f"{recording_speedup(path=recording, m=m, n=n, k=k, config_id=entry.config_id):.3f}x" in out
    assert out.count("(recording, ranked here), data hash") == len(LISTED)
    assert out.count("the rows the list was selected from") == len(LISTED)
    assert "note:" not in out and "OTHER rows" not in out
    own = lookup(load_ranges(copy / "manifests" / f"{chosen}.yaml")[1], m=raw["M"], n=n, k=k)
    assert own.config_id == raw["CONFIG_ID"] and f"chosen table {chosen}: entry {own.index}" in out
    table_trace = tunetable("trace", chosen, str(own.index), cwd=copy).output
    assert table_trace.splitlines()[0] in out.splitlines()  # then the chosen table's entry, as `trace TABLE INDEX`


def one_error_line(output: str) -> str:
    """The single `error:` line of a failed command (and no traceback)."""
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in output, output[-2000:]
    return errors[0]


def test_dispatch_errors_are_one_line(copy: Path) -> None:
    count = len(load_ranges(copy / "manifests" / f"{DISPATCH}.yaml")[1])
    done = tunetable("trace", DISPATCH, str(count), cwd=copy, check=False)
    assert done.returncode == 2
    assert one_error_line(done.output) == (
        f"error: {TARGET}: index {count}: dispatch list {DISPATCH} has no entry {count} (it has {count})")
    lines = (copy / TARGET).read_text().splitlines()
    begin = next(i for i, text in enumerate(lines, 1) if "BEGIN-TUNING-LIST-GEMM_DISPATCH" in text)
    for line in (begin, begin + 1):  # the marker and the provenance line: inside the region, in no entry
        done = tunetable("trace", f"{TARGET}:{line}", cwd=copy, check=False)
        assert done.returncode == 2
        assert one_error_line(done.output) == f"error: {TARGET}: line {line}: line is not inside a generated entry"


def test_a_dispatch_entry_naming_another_table_is_an_error(tmp_path: Path) -> None:
    root = copy_project(tmp_path)
    manifest = root / "manifests" / f"{DISPATCH}.yaml"
    manifest.write_text(manifest.read_text().replace("TABLE: gemm_mma", "TABLE: gemm_other", 1))
    done = tunetable("trace", DISPATCH, "0", cwd=root, check=False)
    assert done.returncode == 2
    assert one_error_line(done.output) == (
        f"error: manifests/{DISPATCH}.yaml: params[0]: entry names table 'gemm_other', not one of this list's "
        f"tables ({', '.join(LISTED)})")


def test_an_entry_speedup_the_rows_do_not_measure_is_noted(tmp_path: Path) -> None:
    """Entry 0 edited to hold 0.5x: trace shows the route it would decide and what the rows measure instead."""
    root = copy_project(tmp_path)
    manifest = root / "manifests" / f"{DISPATCH}.yaml"
    held = load_yaml_file(manifest)["params"][0]["SPEEDUP_VS_CUBLAS"]
    text = manifest.read_text()
    manifest.write_text(text.replace(f"    SPEEDUP_VS_CUBLAS: {held}\n", "    SPEEDUP_VS_CUBLAS: 0.5\n", 1))
    out = " ".join(tunetable("trace", DISPATCH, "0", cwd=root).output.split())   # rich wraps long lines
    assert ("speedup over cuBLAS at its first measured M: 0.5x (SPEEDUP_VS_CUBLAS; below 1: the PyTorch operator "
            "hands the range to torch's matmul)") in out
    assert (f"note: M=1: these rows measure {held}x cuBLAS's speed, the list holds 0.5x: re-run "
            f"`tunetable select --dispatch {DISPATCH}`") in out


def recorded(*, path: Path, m: int, n: int, k: int, config_id: str) -> bool:
    """Whether a recording holds an ok row of the configuration at the shape."""
    rows = pl.read_parquet(path).filter((pl.col("M") == m) & (pl.col("N") == n) & (pl.col("K") == k)
                                        & (pl.col("config_id") == config_id) & (pl.col("status") == "ok"))
    return rows.height > 0


@pytest.mark.slow
def test_another_measurement_is_named_as_such(tmp_path: Path) -> None:
    """gemm_mma read from another measurement (the rerun, of an earlier kernel and grid): other rows, said so.

    Its figures are that recording's rows; a candidate it never measured shows none, not the list's own."""
    root = copy_project(tmp_path)
    results = trace_all(root, recordings={"gemm_mma": RERUN})
    provenance = load_ranges(root / "manifests" / f"{DISPATCH}.yaml")[0]
    mma = results[0].sources[0]
    assert (mma.table, mma.kind, mma.path) == ("gemm_mma", "recording", RERUN)
    assert mma.data_hash != provenance["gemm_mma_data_hash"]
    listed = load_yaml_file(root / "manifests" / f"{DISPATCH}.yaml")["params"]
    unmeasured = 0
    for result, raw in zip(results, listed):
        for decision in result.decisions:
            for candidate in (c for c in decision.candidates if c.table == "gemm_mma"):
                shape = {"m": decision.m, "n": raw["N"], "k": raw["K"], "config_id": candidate.config_id}
                if not recorded(path=REPO / RERUN, **shape):
                    assert candidate.measured is None, shape
                    unmeasured += 1
                    continue
                assert candidate.measured.shard_speedup == recording_speedup(path=REPO / RERUN, **shape)
    # The rerun measured the v1 kernel's grid, whose configuration ids (no WARPS_K) the v3 list never
    # names: its candidates must show no figure at all rather than the list's own.
    assert unmeasured > 0
    edit_params(root, lambda data: data["tables"]["gemm_mma"].update(recording=RERUN))
    out = tunetable("trace", DISPATCH, "0", cwd=root).output
    assert f"OTHER rows than the list was selected from ({provenance['gemm_mma_data_hash']})" in out
    assert out.count("the rows the list was selected from") == len(LISTED) - 1  # the others' are the originals


@pytest.mark.slow
def test_replayed_project_reads_ranked_tables_then_raw_shards(replayed: Path) -> None:
    ranked = check_replayed(replayed, kind="ranked")
    out = tunetable("trace", DISPATCH, "0", cwd=replayed).output
    assert out.count("(ranked table), data hash") == len(LISTED)
    shutil.rmtree(replayed / "results" / "ranked")
    raw = check_replayed(replayed, kind="raw")
    assert [[c.measured for d in r.decisions for c in d.candidates] for r in raw] == [
        [c.measured for d in r.decisions for c in d.candidates] for r in ranked]
    for source in raw[0].sources:
        key = load_yaml_file(replayed / "results" / "metrics" / f"{source.table}.json")["content_key"]
        assert source.path == f"results/raw/{source.table}/{key}/"


def check_replayed(root: Path, *, kind: str) -> list[trace.DispatchTrace]:
    """The replayed copy's list (three shapes) traced from ``kind`` rows, checked against the recordings."""
    results = trace_all(root)
    assert [d.m for r in results for d in r.decisions] == [1, 64, 4096]
    check_against_recordings(root, results, kind=kind)
    return results


def test_one_marker_check_for_codegen_and_trace() -> None:
    text = "# BEGIN-X\n# Automatically generated from [m]\n# index: [0]\nx,\n# BEGIN-X\n# END-X\n"
    with pytest.raises(TuneTableError, match="^t.py: Expected exactly one begin marker: BEGIN-X$"):
        trace.generated_entries(text, begin_marker="BEGIN-X", end_marker="END-X", path="t.py")
    assert trace.marker_line is marker_line
