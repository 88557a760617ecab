"""Atomic writes, content keys and configuration ids."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tunetable.atomic import atomic_write_text
from tunetable.config import KernelConfig
from tunetable.keys import kernel_source_hash, results_key


def test_atomic_write_replaces_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old\n")
    atomic_write_text(target, "new\n")
    assert target.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_killed_writer_leaves_old_file(tmp_path: Path) -> None:
    target = tmp_path / "table.py"
    target.write_text("original\n")
    # The child writes slowly into the temp file; SIGKILL lands before the rename.
    code = (
        "import os, sys, time\n"
        "import tunetable.atomic as a\n"
        "real = os.fdopen\n"
        "class Slow:\n"
        "    def __init__(self, h): self.h = h\n"
        "    def __enter__(self): return self\n"
        "    def __exit__(self, *e): self.h.close()\n"
        "    def write(self, d):\n"
        "        self.h.write(d[:10]); self.h.flush(); print('writing', flush=True); time.sleep(30)\n"
        "    def flush(self): self.h.flush()\n"
        "    def fileno(self): return self.h.fileno()\n"
        "a.os.fdopen = lambda fd, mode: Slow(real(fd, mode))\n"
        f"a.atomic_write_text({str(target)!r}, 'replacement ' * 1000)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "writing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert target.read_text() == "original\n"


def test_kernel_hash_follows_included_headers(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text('#include "tile.cuh"\n__global__ void k() {}\n')
    (tmp_path / "tile.cuh").write_text("#define TILE 16\n")
    before = kernel_source_hash(tmp_path / "k.cu")
    (tmp_path / "tile.cuh").write_text("#define TILE 32\n")
    assert kernel_source_hash(tmp_path / "k.cu") != before


def test_results_key_changes_with_each_input() -> None:
    base = dict(
        table="t", config_ids=["a", "b"], bench_settings={"rounds": 10}, kernel_hash="k",
        toolchain="nvcc 13.0", backend="cuda", device="NVIDIA H200",
    )
    key = results_key(**base)
    assert results_key(**{**base, "config_ids": ["b", "a"]}) == key
    for field, value in [("bench_settings", {"rounds": 11}), ("kernel_hash", "k2"), ("toolchain", "x"),
                         ("backend", "replay"), ("device", "H100"), ("config_ids", ["a"])]:
        assert results_key(**{**base, field: value}) != key, field


def test_config_id_ignores_order_and_derived() -> None:
    a = KernelConfig(family="f", params=(("BLOCK_M", 64), ("BLOCK_N", 128)), derived=(("THREADS", 128),))
    b = KernelConfig(family="f", params=(("BLOCK_N", 128), ("BLOCK_M", 64)))
    c = KernelConfig(family="f", params=(("BLOCK_M", 128), ("BLOCK_N", 128)))
    assert a.id == b.id != c.id
    assert a.label() == "BLOCK_M=64/BLOCK_N=128"
    assert a.defines() == {"BLOCK_M": 64, "BLOCK_N": 128, "THREADS": 128}


def test_new_file_gets_the_umask_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    os.umask(old)
    target = tmp_path / "new.json"
    atomic_write_text(target, "{}\n")
    assert target.stat().st_mode & 0o777 == 0o666 & ~old
