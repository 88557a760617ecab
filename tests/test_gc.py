"""``tunetable gc``: key folders kept when current or named by a metrics file at a git ref, others deleted."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from pipeline_repo import NO_RECORDING, RECORDING, REPO, git, tunetable

from tunetable import gc
from tunetable.measurement_plan import shard_key
from tunetable.errors import TuneTableError
from tunetable.params import load_params, table_spec

TABLE = "gemm_mma"
KEY_A = "aaaaaaaaaaaaaaaa"      # named by the metrics file at HEAD/main
KEY_B = "bbbbbbbbbbbbbbbb"      # named by nothing
KEY_D = "dddddddddddddddd"      # named only at tag v1 (an older commit)
UNDECLARED = "retired_table"


@dataclass(frozen=True)
class GcRepo:
    """A throw-away git repo with key folders under results/raw/gemm_mma."""

    root: Path
    key_c: str                   # the key the committed params.yaml resolves to (replay)

    def folder(self, key: str, table: str = TABLE) -> Path:
        return self.root / "results" / "raw" / table / key


def _write_metrics(root: Path, key: str) -> None:
    path = root / "results" / "metrics" / f"{TABLE}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"table": TABLE, "content_key": key}) + "\n")


def _shard_files(folder: Path, size: int) -> None:
    """A replayed shard and its journal (its checksum record only), padded to ``size`` bytes together.

    The unpickler stops at the STOP opcode, so the padding leaves the shard readable; the journal
    records the checksum of the padded bytes.
    """
    from tunetable.results import journal_of, record_checksum, write_shard

    shard = folder / "M1_N4096_K4096.pkl"
    write_shard(shard, table=TABLE, rows=[{"config_id": "c1", "backend": "replay"}], build_rows=[], provenance={})
    journal = journal_of(shard)
    record_line = len(journal.read_bytes())  # one record; its length does not depend on the size's value
    journal.unlink()
    padded = shard.read_bytes().ljust(size - record_line, b"\0")
    record_checksum(shard, padded)
    shard.write_bytes(padded)
    assert shard.stat().st_size + journal.stat().st_size == size


@pytest.fixture
def gc_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GcRepo:
    if not RECORDING.is_file():
        pytest.skip(NO_RECORDING)
    root = tmp_path / "repo"
    for name in ("params.yaml", "data/recordings/h200_gemm_mma.parquet", "data/recordings/h200_gemm_mma.json"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, root / name)
    (root / ".gitignore").write_text("/results/raw/\n")
    git("init", "-q", "-b", "main", cwd=root)
    _write_metrics(root, KEY_D)
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "tables from key D", cwd=root)
    git("tag", "v1", cwd=root)
    _write_metrics(root, KEY_A)
    git("commit", "-q", "-am", "tables from key A", cwd=root)
    monkeypatch.chdir(root)  # shard_key reads params.yaml's relative paths
    params = load_params(root / "params.yaml")
    spec = table_spec(params, TABLE)
    key_c = shard_key(params, spec, "replay")
    monkeypatch.chdir(tmp_path)
    repo = GcRepo(root=root, key_c=key_c)
    for key, size in ((KEY_A, 4000), (KEY_B, 6144), (key_c, 5000), (KEY_D, 4500)):
        _shard_files(repo.folder(key), size)
    _shard_files(repo.folder("0123456789abcdef", table=UNDECLARED), 4000)
    return repo


def _existing(repo: GcRepo) -> set[str]:
    return {p.name for p in (repo.root / "results" / "raw" / TABLE).iterdir()}


def test_plan_keeps_current_and_referenced_keys_with_reasons(gc_repo: GcRepo) -> None:
    plan = gc.plan_gc(root=gc_repo.root, params=load_params(gc_repo.root / "params.yaml"))
    by_key = {(d.folder.table, d.folder.key): d for d in plan.decisions}
    assert set(by_key) == {(TABLE, KEY_A), (TABLE, KEY_B), (TABLE, gc_repo.key_c), (TABLE, KEY_D), (UNDECLARED, "")}
    assert by_key[(TABLE, KEY_A)].keep
    assert by_key[(TABLE, KEY_A)].reasons == ("named by results/metrics/gemm_mma.json at HEAD, main, working tree",)
    assert by_key[(TABLE, KEY_D)].keep and by_key[(TABLE, KEY_D)].reasons == (
        "named by results/metrics/gemm_mma.json at v1",)
    assert by_key[(TABLE, gc_repo.key_c)].keep
    assert by_key[(TABLE, gc_repo.key_c)].reasons == ("current params key (replay)",)
    assert by_key[(UNDECLARED, "")].keep and by_key[(UNDECLARED, "")].reasons == ("not a declared table",)
    assert not by_key[(TABLE, KEY_B)].keep and by_key[(TABLE, KEY_B)].reasons == (gc.UNREFERENCED,)
    assert [d.folder.key for d in plan.to_delete] == [KEY_B]
    assert plan.bytes_to_delete == 6144
    assert plan.refs == ("HEAD", "main", "v1")


@pytest.mark.parametrize("flags", [["--dry-run"], [], ["--dry-run", "--yes"]])
def test_without_yes_nothing_is_deleted(gc_repo: GcRepo, flags: list[str]) -> None:
    done = tunetable("gc", "--root", str(gc_repo.root), *flags, cwd=gc_repo.root)
    assert done.returncode == 0
    assert "--yes would delete 1 folder(s), 6.0 KiB" in done.output
    assert f"results/raw/{TABLE}/{KEY_B}" in done.output
    assert "not a declared table" in done.output
    assert _existing(gc_repo) == {KEY_A, KEY_B, KEY_D, gc_repo.key_c}
    assert sum(f.stat().st_size for f in gc_repo.folder(KEY_B).iterdir()) == 6144


def test_yes_deletes_only_unreferenced_folders(gc_repo: GcRepo) -> None:
    done = tunetable("gc", "--root", str(gc_repo.root), "--yes", cwd=gc_repo.root)
    assert done.returncode == 0, done.output
    assert "deleted 1 folder(s), 6.0 KiB" in done.output
    assert "dvc gc -w --all-commits -c" in done.output
    assert _existing(gc_repo) == {KEY_A, KEY_D, gc_repo.key_c}
    assert (gc_repo.folder("0123456789abcdef", table=UNDECLARED) / "M1_N4096_K4096.pkl").is_file()
    again = tunetable("gc", "--root", str(gc_repo.root), "--yes", cwd=gc_repo.root)
    assert "nothing to delete" in again.output and _existing(gc_repo) == {KEY_A, KEY_D, gc_repo.key_c}


def test_parked_folders_are_planned_and_deleted_like_raw_ones(gc_repo: GcRepo) -> None:
    # The pipeline parks other keys' folders under results/parked (outside the DVC out); gc prunes both.
    from tunetable import rawstore

    with_parked = gc_repo.root / rawstore.PARKED / TABLE
    with_parked.parent.mkdir(parents=True)
    shutil.move(gc_repo.folder(KEY_B).parent, with_parked)
    gc_repo.folder(gc_repo.key_c).parent.mkdir(parents=True)
    shutil.move(with_parked / gc_repo.key_c, gc_repo.folder(gc_repo.key_c))
    done = tunetable("gc", "--root", str(gc_repo.root), "--yes", cwd=gc_repo.root)
    assert f"results/parked/{TABLE}/{KEY_B}" in done.output or "deleted 1 folder(s), 6.0 KiB" in done.output
    assert not (with_parked / KEY_B).exists()
    assert {p.name for p in with_parked.iterdir()} == {KEY_A, KEY_D}
    assert "dvc commit results/raw" not in done.output  # results/raw did not change
    assert (gc_repo.folder(gc_repo.key_c) / "M1_N4096_K4096.pkl").is_file()


def test_outside_a_git_repository_is_one_error_line(gc_repo: GcRepo) -> None:
    shutil.rmtree(gc_repo.root / ".git")
    done = tunetable("gc", "--root", str(gc_repo.root), "--yes", cwd=gc_repo.root, check=False)
    assert done.returncode == 2
    assert done.output.strip().splitlines() == [
        f"error: {gc_repo.root}: not a git repository: gc needs the git refs to know which keys are still named"]
    assert KEY_B in _existing(gc_repo)


def test_decide_lists_every_reason() -> None:
    folder = gc.KeyFolder(TABLE, KEY_A, Path("results/raw") / TABLE / KEY_A, 7)
    decisions = gc.decide(folders=[folder], declared=[TABLE], current={TABLE: {"cuda": KEY_A, "replay": KEY_A}},
                          referenced={TABLE: {KEY_A: ["main", "v2"]}})
    assert decisions == (gc.Decision(folder, True, (
        "current params key (cuda)", "current params key (replay)",
        "named by results/metrics/gemm_mma.json at main, v2")),)


def test_delete_refuses_paths_outside_raw(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    plan = gc.GcPlan(decisions=(gc.Decision(gc.KeyFolder(TABLE, "k", outside, 0), False, (gc.UNREFERENCED,)),),
                     current={}, refs=())
    with pytest.raises(TuneTableError, match="outside results/raw"):
        gc.delete_folders(plan=plan, root=tmp_path)
    assert outside.is_dir()


def test_cuda_measurements_are_kept_where_the_live_key_cannot_be_recomputed(tmp_path: Path) -> None:
    from tunetable.results import write_shard

    live, replayed = tmp_path / "live", tmp_path / "replayed"
    for folder, backend in ((live, "cuda"), (replayed, "replay")):
        write_shard(folder / "M1_N8_K8.pkl", table=TABLE, rows=[{"config_id": "c1", "backend": backend}],
                    build_rows=[], provenance={})
    folders = [gc.KeyFolder(TABLE, "live", live, 1), gc.KeyFolder(TABLE, "replayed", replayed, 1)]
    unknown = gc.decide(folders=folders, declared=[TABLE], current={}, referenced={},
                        is_live=gc.holds_live_measurements)
    assert [(d.keep, d.reasons) for d in unknown] == [(True, (gc.LIVE_NO_GPU,)), (False, (gc.UNREFERENCED,))]
    known = gc.decide(folders=folders, declared=[TABLE], current={}, referenced={})
    assert [d.keep for d in known] == [False, False]
    (replayed / "M8_N8_K8.journal.jsonl").write_text('{"config_id": "c1"}\n')  # only live runs journal
    assert gc.holds_live_measurements(replayed)
    (replayed / "M8_N8_K8.journal.jsonl").unlink()
    (replayed / "M2_N8_K8.pkl").write_bytes(b"not a pickle")
    assert gc.holds_live_measurements(replayed)
