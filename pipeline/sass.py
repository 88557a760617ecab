"""A compiled kernel's SASS, read without a GPU: cuobjdump's listing and the innermost loops that issue an opcode.

The wgmma kernels' consumers spend their time in one k-loop per tile; how many instructions it issues per HGMMA,
and how many of them move values from vector to uniform registers (R2UR), is what cuBLAS's kernels do in a third
of ours before v16 (benchmarks/notes_gemm_wgmma.md). cuobjdump and its nvdisasm come with the CUDA toolkit or,
on a machine without one, from PyPI (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm: the `dev` extra).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tunetable.errors import TuneTableError

CUOBJDUMP_TIMEOUT_S = 60.0
_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_PREDICATE = re.compile(r"^@!?U?P\w+\s+")
_BRANCH = re.compile(r"BRA\b.*?(0x[0-9a-f]+)")


class SassError(TuneTableError):
    """A cubin whose SASS cannot be listed; the message names the cubin."""


@dataclass(frozen=True)
class LoopStats:
    """One innermost loop: its instructions and the count of each opcode asked for."""

    instructions: int
    counts: tuple[tuple[str, int], ...]

    def count(self, opcode: str) -> int:
        """How many of the loop's instructions are `opcode`."""
        return dict(self.counts).get(opcode, 0)


def find_cuobjdump() -> Path | None:
    """cuobjdump on PATH, else the one nvidia-cuda-cuobjdump installs under the `nvidia` package's cu*/bin."""
    found = shutil.which("cuobjdump")
    if found:
        return Path(found)
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for path in sorted(Path(root).glob("cu*/bin/cuobjdump")):
            return path
    return None


def dump_sass(*, cubin: Path, tool: Path) -> str:
    """cuobjdump -sass of a cubin (nvdisasm looked up beside cuobjdump first)."""
    env = {**os.environ, "PATH": f"{tool.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    try:
        proc = subprocess.run([str(tool), "-sass", str(cubin)], capture_output=True, text=True, env=env,
                              timeout=CUOBJDUMP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SassError(f"cuobjdump could not list it: {exc}", path=cubin) from None
    if proc.returncode != 0 or not _LINE.search(proc.stdout):
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise SassError(f"cuobjdump listed no SASS: {detail[-1] if detail else 'no output'}", path=cubin)
    return proc.stdout


def parse_listing(*, sass: str) -> list[tuple[int, str]]:
    """(address, instruction) of every SASS line in order, the guard predicate dropped ('@!P0 BRA x' -> 'BRA x')."""
    return [(int(match.group(1), 16), _PREDICATE.sub("", match.group(2))) for match in _LINE.finditer(sass)]


def opcode(instruction: str) -> str:
    """'HGMMA.64x128x16.F32.BF16 R24, ...' -> 'HGMMA'; '@!P0  SYNCS.ARRIVE ...' -> 'SYNCS' (predicate dropped)."""
    words = _PREDICATE.sub("", instruction.strip()).split(None, 1)
    return words[0].split(".", 1)[0] if words else ""


def innermost_loops(*, listing: Sequence[tuple[int, str]], issuing: str) -> list[list[str]]:
    """Each loop that issues `issuing` and closes no other loop inside it: its instructions, head to back-branch."""
    index_of = {address: index for index, (address, _) in enumerate(listing)}
    backward: dict[int, int] = {}  # the back-branch's index -> the loop head's index
    for index, (address, instruction) in enumerate(listing):
        target = _BRANCH.match(instruction)
        if target and int(target.group(1), 16) < address and int(target.group(1), 16) in index_of:
            backward[index] = index_of[int(target.group(1), 16)]
    loops = []
    for end, start in backward.items():
        body = [instruction for _, instruction in listing[start:end + 1]]
        inner = not any(start <= other < end for other in backward)
        if inner and any(opcode(instruction) == issuing for instruction in body):
            loops.append(body)
    return loops


def loop_stats(*, body: Sequence[str], opcodes: Iterable[str]) -> LoopStats:
    """A loop's length and how many of its instructions are each of `opcodes`."""
    counted = Counter(opcode(instruction) for instruction in body)
    return LoopStats(instructions=len(body), counts=tuple((name, counted.get(name, 0)) for name in opcodes))


def cubin_loop_stats(*, cubin: Path, tool: Path, issuing: str, opcodes: Iterable[str]) -> list[LoopStats]:
    """Each innermost loop of a cubin that issues `issuing`, counted for `opcodes` (cuobjdump's listing)."""
    names = tuple(opcodes)
    loops = innermost_loops(listing=parse_listing(sass=dump_sass(cubin=cubin, tool=tool)), issuing=issuing)
    return [loop_stats(body=body, opcodes=names) for body in loops]
