"""`tunetable audit` from what git holds: a fresh clone with no results, no DVC cache and no remote.

Each side's times come from the shards on disk, else DVC, else the table's recording at that
revision when it holds the rows the manifest was selected from; what cannot be compared is one
`not compared:` line saying why, never a traceback.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from pipeline_repo import NO_RECORDING, RECORDING, git, make_project, tunetable

from tunetable.yamlio import load_yaml_file

pytestmark = pytest.mark.skipif(not RECORDING.is_file(), reason=NO_RECORDING)
TABLE = "gemm_mma"


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone of the project as committed: no results/, an empty DVC cache, a remote folder that does not exist."""
    base = tmp_path_factory.mktemp("audit")
    origin = make_project(base / "origin", remote=base / "no-such-remote")
    git("clone", "-q", str(origin), str(base / "clone"), cwd=base)
    return base / "clone"


def test_audit_all_shapes_reads_the_committed_recording(clone: Path) -> None:
    done = tunetable("audit", "HEAD", "HEAD", "--all-shapes", "--table", TABLE, "--table", "gemm_dispatch",
                     cwd=clone)
    assert "Traceback" not in done.output and "not compared" not in done.output, done.output[-3000:]
    assert f"source: {TABLE} at HEAD: times from data/recordings/h200_gemm_mma.parquet at HEAD (git; the rows the " \
           "manifest was selected from)" in done.output
    assert f"{TABLE}: 55 of 55 shapes changed" in done.output  # --all-shapes lists every one
    # M=1 of 4096 x 4096: the manifest's winner there, its time and cuBLAS's read from the recording itself.
    winner = next(e for e in load_yaml_file(clone / "manifests/gemm_mma.yaml")["params"]
                  if (e["M"], e["N"], e["K"]) == (1, 4096, 4096))["CONFIG_ID"]
    shard = pl.read_parquet(RECORDING).filter((pl.col("M") == 1) & (pl.col("N") == 4096) & (pl.col("K") == 4096))
    winner_us = 1e3 * shard.filter(pl.col("config_id") == winner)["median_ms"].item()
    cublas_us = 1e3 * shard.filter(pl.col("config_id") == "cublas")["median_ms"].item()
    row = next(line for line in done.output.splitlines() if line.startswith(f"│    1 │  4096 │  4096 │ {winner}"))
    assert row.count(f"{winner_us:.3f}") == 2 and "1.000x" in row  # the same time on both sides
    dispatch = next(line for line in done.output.splitlines()
                    if line.startswith("│    1 │  4096 │  4096 │ gemm_mma ") and "x │" in line)
    assert dispatch.count(f"{cublas_us / winner_us:.3f}x") == 2  # cuBLAS / winner, from the same shard


def test_what_cannot_be_compared_is_one_line_with_why(clone: Path) -> None:
    import polars as pl

    recording = clone / "data" / "recordings" / "h200_gemm_mma.parquet"
    frame = pl.read_parquet(recording)
    pl.concat([frame.head(1).with_columns(pl.col("median_ms") * 2), frame.slice(1)]).write_parquet(recording)
    try:
        done = tunetable("audit", "--all-shapes", "--table", TABLE, cwd=clone)
    finally:
        git("checkout", "--", str(recording.relative_to(clone)), cwd=clone)
    assert "Traceback" not in done.output and done.returncode == 0
    gaps = [line for line in done.output.splitlines() if line.startswith("not compared:")]
    assert len(gaps) == 1, done.output[-3000:]
    assert gaps[0].startswith(f"not compared: {TABLE}: 55 of 55 times at working tree not compared: its shards "
                              "(key ")
    assert "are not on disk, and data/recordings/h200_gemm_mma.parquet at working tree holds other rows than the " \
           "manifest was selected from (data hash " in gaps[0]
    assert f"source: {TABLE} at HEAD: times from data/recordings/h200_gemm_mma.parquet at HEAD" in done.output


def test_an_unknown_name_lists_tables_and_dispatch_lists(clone: Path) -> None:
    done = tunetable("audit", "--table", "nope", cwd=clone, check=False)
    assert done.returncode == 2 and "Traceback" not in done.output
    params = load_yaml_file(clone / "params.yaml")
    # Each section's declared names, then the other devices' whose manifest the clone has (gemm_mma.h100: audit
    # reviews them by that name too).
    names = {section: [*params[section], *(f"{name}.{device}" for device in list(params["devices"])[1:]
                                           for name in params[section]
                                           if (clone / "manifests" / f"{name}.{device}.yaml").is_file())]
             for section in ("tables", "dispatch", "selector")}
    assert "gemm_wgmma_swap.h100" in names["tables"] and names["selector"] == ["gemm_selector", "gemm_selector.h100"]
    assert (f"unknown table, dispatch list or selector 'nope' (tables: {', '.join(names['tables'])}; dispatch "
            f"lists: {', '.join(names['dispatch'])}; selectors: {', '.join(names['selector'])})") in done.output


def test_trace_on_a_fresh_clone_reads_the_recording_and_says_so(clone: Path) -> None:
    done = tunetable("trace", TABLE, "0", cwd=clone)
    assert "Traceback" not in done.output and "dvc pull" not in done.output
    assert ("ranked data/recordings/h200_gemm_mma.parquet (recording, ranked here, data hash "
            in done.output and ": the rows the manifest was selected from)" in done.output)
    assert "M1_N4096_K4096.pkl (recording)" in done.output and "NVIDIA H200" in done.output
    assert "source: shards of key " in done.output and "not on disk: these rows are the recording's " \
           "data/recordings/h200_gemm_mma.parquet (replay serves exactly them)" in done.output
