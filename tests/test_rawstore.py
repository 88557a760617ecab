"""results/raw holds the current keys only: other keys' shards are parked beside it and restored by a rename."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunetable import rawstore
from tunetable.errors import TuneTableError


def _shard(path: Path, data: bytes = b"shard") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, Path]:
    raw, parked = tmp_path / "results" / "raw", tmp_path / "results" / "parked"
    _shard(raw / "t" / "cur" / "M1_N8_K8.pkl")
    _shard(raw / "t" / "old" / "M1_N8_K8.pkl", b"old")
    _shard(raw / "t" / "old" / "M1_N8_K8.journal.jsonl", b"{}\n")
    _shard(raw / "gone" / "k" / "M1_N8_K8.pkl")
    return raw, parked


def test_stale_entries_are_other_keys_and_undeclared_tables(store: tuple[Path, Path]) -> None:
    raw, _parked = store
    assert rawstore.stale_entries(current={"t": "cur"}, raw=raw) == [raw / "gone", raw / "t" / "old"]
    assert rawstore.stale_entries(current={"t": "cur", "gone": "k"}, raw=raw) == [raw / "t" / "old"]
    assert rawstore.stale_entries(current={}, raw=raw.parent / "absent") == []


def test_park_then_restore_moves_every_file_of_a_stem(store: tuple[Path, Path]) -> None:
    raw, parked = store
    moved = rawstore.park(rawstore.stale_entries(current={"t": "cur"}, raw=raw), raw=raw, parked=parked)
    assert sorted(p.relative_to(parked).as_posix() for p in moved) == [
        "gone/k/M1_N8_K8.pkl", "t/old/M1_N8_K8.journal.jsonl", "t/old/M1_N8_K8.pkl"]
    assert sorted(p.relative_to(raw).as_posix() for p in raw.rglob("*") if p.is_file()) == ["t/cur/M1_N8_K8.pkl"]
    assert not (raw / "gone").exists() and not (raw / "t" / "old").exists()
    restored = rawstore.restore([raw / "t" / "old" / "M1_N8_K8.pkl"], raw=raw, parked=parked)
    assert sorted(p.name for p in restored) == ["M1_N8_K8.journal.jsonl", "M1_N8_K8.pkl"]
    assert (raw / "t" / "old" / "M1_N8_K8.pkl").read_bytes() == b"old"
    assert not (parked / "t").exists()  # emptied folders go


def test_a_parked_copy_with_other_bytes_is_never_overwritten(store: tuple[Path, Path]) -> None:
    raw, parked = store
    _shard(parked / "t" / "old" / "M1_N8_K8.pkl", b"another measurement")
    with pytest.raises(TuneTableError, match="exists with other bytes"):
        rawstore.park([raw / "t" / "old"], raw=raw, parked=parked)
    assert (raw / "t" / "old" / "M1_N8_K8.pkl").read_bytes() == b"old"  # nothing moved
    assert (raw / "t" / "old" / "M1_N8_K8.journal.jsonl").is_file()
    _shard(parked / "t" / "old" / "M1_N8_K8.pkl", b"old")  # the same bytes: the raw copy just goes
    rawstore.park([raw / "t" / "old"], raw=raw, parked=parked)
    assert (parked / "t" / "old" / "M1_N8_K8.pkl").read_bytes() == b"old"


def test_restoring_a_shard_without_a_parked_copy_is_an_error(store: tuple[Path, Path]) -> None:
    raw, parked = store
    with pytest.raises(TuneTableError, match="no parked copy"):
        rawstore.restore([raw / "t" / "x" / "M2_N8_K8.pkl"], raw=raw, parked=parked)


def test_salvage_parks_the_finished_shards_of_a_failed_job_with_their_journals(tmp_path: Path) -> None:
    raw, parked = tmp_path / "results" / "raw", tmp_path / "results" / "parked"
    done = _shard(raw / "t" / "cur" / "M1_N8_K8.pkl", b"measured")
    _shard(raw / "t" / "cur" / "M1_N8_K8.journal.jsonl", b'{"type": "shard"}\n')
    # the shard the job was measuring when it died: only its journal (the measurements so far)
    half = _shard(raw / "t" / "cur" / "M2_N8_K8.journal.jsonl", b'{"type": "sample"}\n')
    never = raw / "t" / "cur" / "M4_N8_K8.pkl"
    moved = rawstore.salvage([done, raw / "t" / "cur" / "M2_N8_K8.pkl", never], raw=raw, parked=parked)
    assert sorted(p.relative_to(parked).as_posix() for p in moved) == [
        "t/cur/M1_N8_K8.journal.jsonl", "t/cur/M1_N8_K8.pkl"]
    assert (parked / "t" / "cur" / "M1_N8_K8.pkl").read_bytes() == b"measured" and not done.exists()
    assert half.read_bytes() == b'{"type": "sample"}\n'  # a resumed run continues from it
    assert rawstore.salvage([never], raw=raw, parked=parked) == []
    rawstore.restore([done], raw=raw, parked=parked)  # the next run's restore rule
    assert done.read_bytes() == b"measured" and (raw / "t" / "cur" / "M1_N8_K8.journal.jsonl").is_file()
