"""Workload shapes: `tunetable shapes import` (CSV and a real torch.profiler trace) and `tunetable suggest`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tunetable.yamlio import load_yaml_file

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "tests" / "fixtures" / "shapes" / "torch_profiler_trace.json"


def tunetable(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tunetable", *args], cwd=cwd, capture_output=True, text=True,
                          check=False)


def test_a_real_profiler_trace_gives_each_outermost_gemm_once(tmp_path: Path) -> None:
    """The trace was made by torch 2.13.0's profiler (tests/fixtures/shapes/make_torch_trace.py says what ran)."""
    out = tmp_path / "shapes.csv"
    done = tunetable("shapes", "import", str(TRACE), "--out", str(out))
    assert done.returncode == 0, done.stderr
    # linear's inner addmm and matmul's inner mm are not counted again; bmm is 4 GEMMs; sorted by N, K, M
    assert out.read_text() == ("M,N,K,count\n16,16,64,4\n8,64,32,1\n3,72,40,1\n24,256,128,1\n32,512,512,2\n"
                               "32,1536,512,1\n")
    assert "6 shapes, 10 GEMM calls" in done.stderr


def test_csv_rows_are_sorted_merged_and_counted(tmp_path: Path) -> None:
    source = tmp_path / "w.csv"
    source.write_text("# a workload\nM,N,K,count\n200, 5120, 5120, 3\n3,5120,5120\n\n200,5120,5120,2\n1,4096,4096\n")
    done = tunetable("shapes", "import", str(source))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "M,N,K,count\n1,4096,4096,1\n3,5120,5120,1\n200,5120,5120,5\n"


@pytest.mark.parametrize(("text", "where"), [
    ("M,N,K\n1,2\n", "line 2: expected M,N,K or M,N,K,count, got 2 columns"),
    ("1,4096,x\n", "line 1: K must be an integer, got 'x'"),
    ("1,4096,4096\n0,4096,4096\n", "line 2: M must be >= 1, got 0"),
    ("1,-8,4096\n", "line 1: N must be >= 1, got -8"),
    ("1,8,8,1,9\n", "line 1: expected M,N,K or M,N,K,count, got 5 columns"),
    ("2.5,8,8\n", "line 1: M must be an integer, got '2.5'"),
    ("# nothing\n", "no shapes (expected lines M,N,K or M,N,K,count)"),
])
def test_bad_csv_is_one_line_naming_the_row_and_writes_nothing(tmp_path: Path, text: str, where: str) -> None:
    source, out = tmp_path / "bad.csv", tmp_path / "out.csv"
    source.write_text(text)
    done = tunetable("shapes", "import", str(source), "--out", str(out))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == f"error: {source}: {where}"
    assert not out.exists()


@pytest.mark.parametrize(("document", "where"), [
    ({"schemaVersion": 1, "traceEvents": [{"name": "aten::relu", "ph": "X", "ts": 0, "dur": 1}]},
     "no GEMM ops (aten::mm, aten::addmm, aten::matmul, aten::linear, aten::bmm) in the trace"),
    ({"events": []}, "not a PyTorch profiler trace (expected a JSON object with 'traceEvents', as torch.profiler's "
                     "export_chrome_trace writes)"),
    ({"traceEvents": [{"name": "aten::mm", "ph": "X", "ts": 0, "dur": 1, "args": {}}]},
     "traceEvents[0]: aten::mm has no 'Input Dims': profile with record_shapes=True"),
    ({"traceEvents": [{"name": "aten::relu", "ph": "X"},
                      {"name": "aten::mm", "ph": "X", "ts": 0, "dur": 1, "args": {"Input Dims": [[4, 8], [9, 2]]}}]},
     "traceEvents[1]: aten::mm with input dims [[4, 8], [9, 2]] is not a GEMM this reader knows"),
    ({"traceEvents": [{"name": "aten::mm", "ph": "X", "ts": 0, "dur": 1, "args": {"Input Dims": [[0, 8], [8, 2]]}}]},
     "traceEvents[0]: GEMM with a zero dim (M=0, N=2, K=8)"),
])
def test_bad_trace_is_one_line_naming_the_event(tmp_path: Path, document: dict, where: str) -> None:
    source, out = tmp_path / "trace.json", tmp_path / "out.csv"
    source.write_text(json.dumps(document))
    done = tunetable("shapes", "import", str(source), "--out", str(out))
    assert done.returncode == 2 and done.stderr.strip() == f"error: {source}: {where}"
    assert not out.exists()


def test_a_trace_that_is_not_json_names_its_line(tmp_path: Path) -> None:
    source = tmp_path / "trace.json"
    source.write_text('{"traceEvents": [\n{"name": }\n')
    done = tunetable("shapes", "import", str(source))
    assert done.returncode == 2 and done.stderr.startswith(f"error: {source}: line 2: not JSON")


def test_suggest_names_what_gemm_runs_and_why_a_shape_cannot_run(tmp_path: Path) -> None:
    env_columns = {"COLUMNS": "400"}
    done = subprocess.run([sys.executable, "-m", "tunetable", "suggest", "--shape", "1,4096,4096", "--shape",
                           "200,5120,5120", "--shape", "5,100,4096"], cwd=REPO, capture_output=True, text=True,
                          check=False, env={**os.environ, **env_columns})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    measured = next(line for line in lines if "│ 4096 │ 4096 │" in line and "│   1 │" in line)
    assert "table gemm_mma[" in measured and "measured" in measured
    from tunetable.kernels.runtime.decide import shape_selector as selector

    chosen = selector().choose(m=200, n=5120, k=5120).candidate
    predicted = next(line for line in lines if "│ 200 │ 5120 │ 5120 │" in line)
    assert "selector gemm_selector[" in predicted and chosen.config_id in predicted and "predicted" in predicted
    assert any(line.startswith("M=5, N=100, K=4096: cannot run: gemm_mma: N and K must be multiples of 8")
               for line in lines)


def test_suggest_marks_a_prediction_below_every_recorded_size_extrapolated() -> None:
    # 96 x 3072 x 768 moves 5.5 MB (1.3 us at 4.13 TB/s), below 1 x 4096 x 4096's 33.6 MB (8.1 us), the smallest
    # recorded shape by that floor; 200 x 5120 x 5120 (13.7 us) is not.
    done = subprocess.run([sys.executable, "-m", "tunetable", "suggest", "--shape", "96,3072,768", "--shape",
                           "200,5120,5120"], cwd=REPO, capture_output=True, text=True, check=False,
                          env={**os.environ, "COLUMNS": "400"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "extrapolated" in next(line for line in lines if "│  96 │ 3072 │  768 │" in line)
    assert "│ predicted" in next(line for line in lines if "│ 200 │ 5120 │ 5120 │" in line)
    assert any(line.startswith("extrapolated rows: smaller than any recorded shape (roofline floor below 8.13 µs, "
                               "that of 1x4096x4096)") for line in lines)
    assert any(line.startswith("workload (count x time):") and line.endswith("1 of its 2 shapes extrapolated")
               for line in lines)


def test_smallest_recorded_is_the_lowest_floor_over_every_table() -> None:
    from types import SimpleNamespace

    from tunetable.decision_preview import smallest_recorded

    tables = [SimpleNamespace(times={(8, 4096, 4096): {}, (1, 8192, 8192): {}}),
              SimpleNamespace(times={(2, 2048, 5632): {}})]
    # Bytes moved (A + B + C in bf16), all three memory-bound: 8 x 4096 x 4096 33,685,504; 1 x 8192 x 8192
    # 134,250,496; 2 x 2048 x 5632 23,099,392, at 4.13 TB/s 5.59 us.
    shape, floor = smallest_recorded(tables)
    assert shape == (2, 2048, 5632) and floor == pytest.approx(23_099_392 / 4.13e12)
    assert smallest_recorded([SimpleNamespace(times={})]) is None


def test_suggest_reads_a_workload_file_and_weights_it_by_count(tmp_path: Path) -> None:
    source = tmp_path / "w.csv"
    source.write_text("M,N,K,count\n1,4096,4096,10\n8,4096,4096,1\n")
    done = tunetable("suggest", "--shapes", str(source))
    assert done.returncode == 0, done.stderr
    assert "workload (count x time):" in done.stdout and "measured" in done.stdout
    bad = tunetable("suggest", "--shape", "1,4096")
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "error: --shape[0]: expected M,N,K (three integers >= 1), got '1,4096'")


@pytest.mark.slow
def test_a_table_of_workload_shapes_runs_through_the_pipeline(tmp_path: Path) -> None:
    """shapes.list (a CSV for one table, inline for the other) through the real Snakemake plan, select and codegen."""
    from pipeline_repo import make_project, snakemake
    from pipeline_repo import tunetable as run_tunetable

    workload = [(1, 4096, 4096), (64, 4096, 4096), (4096, 14336, 4096), (8, 8192, 8192)]

    def use_workload(data: dict) -> None:
        data["tables"]["gemm_mma"]["shapes"] = {"list": "shapes/workload.csv"}
        data["tables"]["gemm_wgmma"]["shapes"] = {"list": [list(s) for s in workload]}
        if "gemm_wgmma_swap" in data["tables"]:   # its recording stops at its largest M
            swap = data["tables"]["gemm_wgmma_swap"]
            top = max(swap["shapes"]["M"])
            swap["shapes"] = {"list": [list(s) for s in workload if s[0] <= top]}

    project = tmp_path / "project"
    (project / "shapes").mkdir(parents=True)
    (project / "shapes" / "workload.csv").write_text("M,N,K\n" + "".join(f"{m},{n},{k}\n" for m, n, k in workload))
    make_project(project, remote=tmp_path / "remote", params_edit=use_workload)
    snakemake("--cores", "2", cwd=project)
    for table in ("gemm_mma", "gemm_wgmma", "gemm_dispatch"):
        entries = load_yaml_file(project / "manifests" / f"{table}.yaml")["params"]
        assert {(e["N"], e["K"]) for e in entries} == {(n, k) for _, n, k in workload}, table
        for _, n, k in workload:   # every (N, K) covers every M from 1 on
            spans = sorted((e["M"], e["M_END"]) for e in entries if (e["N"], e["K"]) == (n, k))
            assert spans[0][0] == 1 and spans[-1][1] == 2**31 - 1
    selector = load_yaml_file(project / "manifests" / "gemm_selector.yaml")
    assert selector["provenance"]["anchors"] == "1,8,64,4096"
    assert selector["provenance"]["gemm_mma_shapes"] == 4
    assert run_tunetable("codegen", "--all", "--check", cwd=project).returncode == 0


def test_a_shape_list_naming_a_bad_csv_or_shape_is_one_error(tmp_path: Path) -> None:
    params = load_yaml_file(REPO / "params.yaml")
    params["tables"]["gemm_mma"]["shapes"] = {"list": "workload.csv"}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (tmp_path / "workload.csv").write_text("M,N,K\n1,4096,4096\n7,4096,x\n")
    done = tunetable("grid", "--table", "gemm_mma", "--dry-run", "--params", str(tmp_path / "params.yaml"))
    assert done.returncode == 2 and done.stderr.strip() == (
        f"error: {tmp_path / 'params.yaml'}: tables.gemm_mma.shapes.list: {tmp_path / 'workload.csv'}: line 3: "
        "K must be an integer, got 'x'")
    params["tables"]["gemm_mma"]["shapes"] = {"list": [[1, 4096, 4096], [16, 4100, 4096]]}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    done = tunetable("grid", "--table", "gemm_mma", "--dry-run", "--params", str(tmp_path / "params.yaml"))
    assert done.returncode == 2 and done.stderr.strip().startswith(
        f"error: {tmp_path / 'params.yaml'}: tables.gemm_mma.shapes: shape 1 (M=16, N=4100, K=4096): gemm_mma: "
        "N and K must be multiples of 8")
