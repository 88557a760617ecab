"""The cross-family dispatch list, selected from real H200 rows (CPU).

gemm_wgmma has no recording yet, so every input here comes from the committed gemm_mma
recordings (never invented timings): two disjoint selections of its configurations stand for two
tables, taken from two separate measurement sessions (h200_gemm_mma and h200_gemm_mma_rerun, an
hour apart, each with its own cuBLAS rows), or the same rows under two names for exact ties.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from pipeline_repo import edit_params, two_families

from tunetable import rank
from tunetable import select_winners as select
from tunetable.codegen import validate_manifest
from tunetable.manifest import Manifest, lookup, manifest_ranges
from tunetable.errors import TuneTableError
from tunetable.yamlio import load_yaml

REPO = Path(__file__).resolve().parents[1]
SESSION_A = REPO / "data" / "recordings" / "h200_gemm_mma.parquet"
SESSION_B = REPO / "data" / "recordings" / "h200_gemm_mma_rerun.parquet"
PARAMETERS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "WARPS_M", "WARPS_N", "WARPS_K", "STAGES", "SPLIT_K", "GROUP_M")
SKINNY = pl.col("BLOCK_M") <= 32
INT32_MAX = 2147483647
pytestmark = pytest.mark.skipif(not (SESSION_A.is_file() and SESSION_B.is_file()),
                                reason="the committed gemm_mma recordings (h200_gemm_mma, h200_gemm_mma_rerun) "
                                       "are absent")


def ranked_rows(path: Path, keep: pl.Expr) -> pl.DataFrame:
    """A recording's cuBLAS rows plus the configurations ``keep`` selects, ranked as `tunetable rank` does."""
    rows = pl.read_parquet(path).filter((pl.col("config_id") == "cublas") | keep)
    # The tunables of the kernel version the recording measured (the rerun predates WARPS_K).
    return rank.rank_rows(rows=rows, parameters=[p for p in PARAMETERS if p in rows.columns]).ranked


def table_results(name: str, ranked: pl.DataFrame) -> select.TableResults:
    """A table as `tunetable select` would leave it: its manifest (selected from ``ranked``) and the rows."""
    manifest = validate_manifest(load_yaml(select.build_manifest(table=name, kernel="gemm_mma", ranked=ranked)),
                                 path=f"{name}.yaml")
    return select.TableResults(name=name, entries=tuple(manifest.params), provenance=dict(manifest.provenance or {}),
                               ranked=ranked)


@pytest.fixture(scope="module")
def two_sessions() -> tuple[select.TableResults, select.TableResults]:
    """Narrow tiles measured in session A, the other tiles in session B."""
    return (table_results("narrow", ranked_rows(SESSION_A, SKINNY)),
            table_results("wide", ranked_rows(SESSION_B, ~SKINNY)))


def against_shared_yardstick(speedups: dict[str, dict[tuple[int, int, int], float]]
                             ) -> dict[str, dict[tuple[int, int, int], float]]:
    """Two tables measuring the same shapes, their speedups against the shared cuBLAS yardstick, in closed form.

    The least-squares fit of log cuBLAS = scale + level with two tables on every shape: the scales are
    +-d / 2, d the mean log ratio of their cuBLAS rows; the level the mean of both logs. So table X's
    yardstick is sqrt(cuBLAS_A x cuBLAS_B) x e^(+-d / 2), its own row's mode averaged out.
    """
    (name_a, a), (name_b, b) = speedups.items()
    cublas = {name: {shape: rows[shape][1] for shape in rows} for name, rows in (("a", a), ("b", b))}
    shapes = sorted(a)
    d = sum(math.log(cublas["a"][s] / cublas["b"][s]) for s in shapes) / len(shapes)
    out: dict[str, dict[tuple[int, int, int], float]] = {name_a: {}, name_b: {}}
    for s in shapes:
        level = math.sqrt(cublas["a"][s] * cublas["b"][s])
        out[name_a][s] = level * math.exp(d / 2) / a[s][0]
        out[name_b][s] = level * math.exp(-d / 2) / b[s][0]
    return out


def winners_by_join(results: select.TableResults) -> dict[tuple[int, int, int], tuple[float, float]]:
    """(selected-winner median, same-shard cuBLAS median) per measured shape, by a polars join."""
    entries = pl.DataFrame([{k: e[k] for k in ("M", "M_END", "N", "K", "CONFIG_ID")} for e in results.entries])
    rows = results.ranked.join(entries, on=["N", "K"]).filter(
        (pl.col("M") >= pl.col("M_right")) & (pl.col("M") < pl.col("M_END"))
        & (pl.col("config_id") == pl.col("CONFIG_ID")))
    return {(r["M"], r["N"], r["K"]): (r["median_ms"], r["cublas_ms"]) for r in rows.iter_rows(named=True)}


def entries_of(text: str) -> list[dict]:
    return validate_manifest(load_yaml(text), path="dispatch.yaml").params


def entry_at(entries, *, m: int, n: int, k: int) -> dict | None:
    """The manifest entry the lookup gives (tunetable.manifest), as its mapping."""
    found = lookup(manifest_ranges(Manifest(params=list(entries)), path="manifest"), m=m, n=n, k=k)
    return None if found is None else dict(found.values)


def test_each_shape_goes_to_the_table_faster_against_the_shared_cublas_yardstick(two_sessions) -> None:
    narrow, wide = two_sessions
    text = select.build_dispatch_manifest(name="gemm_dispatch", tables=[narrow, wide])
    entries = entries_of(text)
    speedups = against_shared_yardstick({t.name: winners_by_join(t) for t in two_sessions})
    shapes = sorted(set(speedups["narrow"]) | set(speedups["wide"]))
    assert len(shapes) == 55 and set(speedups["narrow"]) == set(speedups["wide"])
    for m, n, k in shapes:
        entry = entry_at(tuple(entries), m=m, n=n, k=k)
        assert entry is not None
        best = max(("narrow", "wide"), key=lambda name: (speedups[name][(m, n, k)], name == "narrow"))
        assert entry["TABLE"] == best, (m, n, k, speedups["narrow"][(m, n, k)], speedups["wide"][(m, n, k)])
        member = narrow if best == "narrow" else wide
        assert entry["CONFIG_ID"] == entry_at(member.entries, m=m, n=n, k=k)["CONFIG_ID"]
        assert entry["KERNEL"] == "gemm_mma"
        # SPEEDUP_VS_CUBLAS is the winner's speedup at the entry's first M; every M it covers is on its side of 1.
        measured = speedups[best][(m, n, k)]
        if m == entry["M"] or (entry["M"] == 1 and m == min(s[0] for s in shapes)):
            assert abs(entry["SPEEDUP_VS_CUBLAS"] - measured) <= 0.5e-4 + 1e-12, (m, n, k, entry, measured)
        assert (entry["SPEEDUP_VS_CUBLAS"] < 1.0) == (round(measured, 4) < 1.0), (m, n, k, entry, measured)
    # What the H200 measured: narrow split-K tiles serve M=1, the big tiles serve M=8192.
    assert {entry_at(tuple(entries), m=1, n=n, k=k)["TABLE"] for _, n, k in shapes} == {"narrow"}
    assert {entry_at(tuple(entries), m=8192, n=n, k=k)["TABLE"] for _, n, k in shapes} == {"wide"}


def test_ranges_cover_every_m_of_each_shape_once(two_sessions) -> None:
    entries = entries_of(select.build_dispatch_manifest(name="d", tables=list(two_sessions)))
    by_nk: dict[tuple[int, int], list[dict]] = {}
    for entry in entries:
        by_nk.setdefault((entry["N"], entry["K"]), []).append(entry)
    assert len(by_nk) == 5
    for ranges in by_nk.values():
        assert ranges[0]["M"] == 1 and ranges[-1]["M_END"] == INT32_MAX
        assert all(a["M_END"] == b["M"] for a, b in itertools.pairwise(ranges))
        assert all((a["TABLE"], a["CONFIG_ID"], a["SPEEDUP_VS_CUBLAS"] < 1) != (b["TABLE"], b["CONFIG_ID"],
                                                                             b["SPEEDUP_VS_CUBLAS"] < 1)
                   for a, b in itertools.pairwise(ranges))


def test_each_candidate_is_judged_against_the_cublas_of_its_own_session(two_sessions) -> None:
    per_table = {t.name: select.table_candidates(results=t) for t in two_sessions}
    cublas = {name: {(r["M"], r["N"], r["K"]): r["median_ms"] for r in
                     pl.read_parquet(path).filter(pl.col("config_id") == "cublas").iter_rows(named=True)}
              for name, path in (("narrow", SESSION_A), ("wide", SESSION_B))}
    for name, candidates in per_table.items():
        assert all(c.cublas_ms == cublas[name][shape] and c.table == name for shape, c in candidates.items())
    # The two sessions' cuBLAS differ: a comparison of raw medians across them would carry that drift.
    assert any(cublas["narrow"][s] != cublas["wide"][s] for s in cublas["narrow"])


def test_exact_ties_go_to_the_table_listed_first() -> None:
    ranked = ranked_rows(SESSION_A, pl.lit(True))
    first, second = table_results("first", ranked), table_results("second", ranked)
    assert ({e["TABLE"] for e in entries_of(select.build_dispatch_manifest(name="d", tables=[first, second]))}
            == {"first"})
    assert ({e["TABLE"] for e in entries_of(select.build_dispatch_manifest(name="d", tables=[second, first]))}
            == {"second"})


def test_tie_tolerance_favours_the_first_listed_table(two_sessions) -> None:
    whole_a = table_results("a", ranked_rows(SESSION_A, pl.lit(True)))
    whole_b = table_results("b", ranked_rows(SESSION_B, pl.lit(True)))
    # Session B measured an older kernel version (v1), session A the current one: listed second,
    # A still wins the shapes where it is faster; within 50 % every shape is a tie, so B (first) takes all.
    strict = entries_of(select.build_dispatch_manifest(name="d", tables=[whole_b, whole_a]))
    loose = entries_of(select.build_dispatch_manifest(name="d", tables=[whole_b, whole_a], tolerance=0.5))
    assert "a" in {e["TABLE"] for e in strict}
    assert {e["TABLE"] for e in loose} == {"b"}


def test_manifest_is_byte_stable_and_independent_of_row_order(two_sessions) -> None:
    narrow, wide = two_sessions
    text = select.build_dispatch_manifest(name="d", tables=[narrow, wide])
    assert select.build_dispatch_manifest(name="d", tables=[narrow, wide]) == text
    shuffled = [select.TableResults(name=t.name, entries=t.entries, provenance=t.provenance,
                                    ranked=t.ranked.sample(fraction=1.0, shuffle=True, seed=7))
                for t in two_sessions]
    assert select.build_dispatch_manifest(name="d", tables=shuffled) == text


def test_provenance_names_both_measurements(two_sessions) -> None:
    narrow, wide = two_sessions
    data = load_yaml(select.build_dispatch_manifest(name="gemm_dispatch", tables=[narrow, wide]))
    provenance = data["provenance"]
    assert provenance["table"] == "gemm_dispatch" and provenance["tables"] == "narrow,wide"
    # The later of the two sessions' dates, as their sidecars record them.
    latest = max(json.loads(path.with_suffix(".json").read_text())["date"] for path in (SESSION_A, SESSION_B))
    assert (provenance["device"], provenance["date"]) == ("NVIDIA H200", latest)
    for member in two_sessions:
        for key in ("results_key", "data_hash", "kernel_hash", "git_rev"):
            assert provenance[f"{member.name}_{key}"] == str(member.provenance[key])
    assert provenance["narrow_data_hash"] != provenance["wide_data_hash"]
    assert provenance["narrow_git_rev"] != provenance["wide_git_rev"]  # two sessions, two revisions
    assert provenance["narrow_shapes_won"] + provenance["wide_shapes_won"] == provenance["shapes"] == 55


def test_a_manifest_selected_from_other_rows_is_refused(two_sessions) -> None:
    narrow, wide = two_sessions
    stale = select.TableResults(name="narrow", entries=narrow.entries, provenance=narrow.provenance,
                                ranked=ranked_rows(SESSION_B, SKINNY))
    with pytest.raises(TuneTableError, match=r"manifest of table narrow was selected from other measurements .*"
                                             r"run `tunetable select --table narrow` first"):
        select.build_dispatch_manifest(name="d", tables=[stale, wide])


# --- the CLI and codegen, in a copy of the project ---------------------------------------------

def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tunetable", *args], cwd=cwd, capture_output=True, text=True,
                          check=False)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """params.yaml of two families, manifests, the dispatch snippet and the generated file (the families bring
    their snippets); both tables selected from gemm_mma rows (each manifest names its own table's family as
    KERNEL, as the dispatch list's typed fields require)."""
    for name in ("params.yaml", "kernels/tuning_configs.py", "kernels/snippets/gemm_dispatch.snippet",
                 "manifests/gemm_mma.yaml", "manifests/gemm_wgmma.yaml", "manifests/gemm_dispatch.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, tmp_path / name)
    edit_params(tmp_path, two_families)
    (tmp_path / "results" / "ranked").mkdir(parents=True)
    for table, path, keep in (("gemm_mma", SESSION_A, SKINNY), ("gemm_wgmma", SESSION_B, ~SKINNY)):
        ranked = ranked_rows(path, keep)
        ranked.write_parquet(tmp_path / "results" / "ranked" / f"{table}.parquet")
        (tmp_path / "manifests" / f"{table}.yaml").write_text(
            select.build_manifest(table=table, kernel=table, ranked=ranked))
    return tmp_path


@pytest.mark.slow
def test_select_dispatch_cli_then_codegen_is_fresh(project: Path) -> None:
    done = run_cli("select", "--dispatch", "gemm_dispatch", "--out", "manifests/gemm_dispatch.yaml", cwd=project)
    assert done.returncode == 0, done.stderr
    text = (project / "manifests" / "gemm_dispatch.yaml").read_text()
    again = run_cli("select", "--dispatch", "gemm_dispatch", "--ranked", "gemm_wgmma=results/ranked/gemm_wgmma.parquet",
                    "--out", "manifests/gemm_dispatch.yaml", cwd=project)
    assert again.returncode == 0 and (project / "manifests" / "gemm_dispatch.yaml").read_text() == text
    entries = entries_of(text)
    assert {e["TABLE"] for e in entries} == {"gemm_mma", "gemm_wgmma"}
    # Only the dispatch region: the stand-in gemm_wgmma manifest holds gemm_mma tunables.
    assert run_cli("codegen", "--table", "gemm_dispatch", cwd=project).returncode == 0
    generated = (project / "kernels" / "tuning_configs.py").read_text()
    region = generated.split("# BEGIN-TUNING-LIST-GEMM_DISPATCH")[1].split("# END-TUNING-LIST-GEMM_DISPATCH")[0]
    assert region.count("FamilyChoice(") == len(entries)
    assert "# Provenance: [manifests/gemm_dispatch.yaml]" in region and "device: NVIDIA H200" in region
    assert f'table="{entries[0]["TABLE"]}",' in region
    assert f'config_id="{entries[0]["CONFIG_ID"]}", speedup_vs_cublas={entries[0]["SPEEDUP_VS_CUBLAS"]!r})' in region
    check = run_cli("codegen", "--table", "gemm_dispatch", "--check", cwd=project)
    assert check.returncode == 0 and check.stderr == ""


@pytest.mark.slow
def test_select_dispatch_cli_errors_are_one_line(project: Path) -> None:
    cases = [
        (("--table", "gemm_mma", "--dispatch", "gemm_dispatch"),
         "error: select: give --table, --dispatch or --selector (exactly one)"),
        (("--dispatch", "gemm_dispatch", "--ranked", "results/ranked/gemm_mma.parquet"),
         "error: --ranked[0]: expected TABLE=PATH with --dispatch, got 'results/ranked/gemm_mma.parquet'"),
        (("--dispatch", "gemm_dispatch", "--ranked", "gemm_nope=x.parquet"),
         "error: --ranked[0]: table 'gemm_nope' is not in this dispatch list (gemm_mma, gemm_wgmma)"),
        (("--dispatch", "nope"),
         "error: params.yaml: dispatch: unknown dispatch list 'nope' (declared: gemm_dispatch)"),
        (("--table", "gemm_mma"), "error: --ranked: give exactly one ranked parquet with --table, got 0"),
    ]
    for args, line in cases:
        done = run_cli("select", *args, "--out", "out.yaml", cwd=project)
        assert done.returncode == 2 and done.stderr.strip() == line, done.stderr
    # A table not selected yet: the placeholder manifest a new table starts with.
    (project / "manifests" / "gemm_wgmma.yaml").write_text("# not measured yet\nparams: []\n")
    done = run_cli("select", "--dispatch", "gemm_dispatch", "--out", "out.yaml", cwd=project)
    assert done.returncode == 2 and done.stderr.strip() == (
        "error: manifests/gemm_wgmma.yaml: table gemm_wgmma has no selected entries yet: select it first")
    assert not (project / "out.yaml").exists()
