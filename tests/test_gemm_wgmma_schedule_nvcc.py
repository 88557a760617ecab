"""The TMA kernels' own work-item walks, run on the host: every k-tile of every tile done exactly once, and the
last wave split as the host's plan says (families/common.py's tail_split_plan sizes the workspace from it).

Each kernel's schedule is compiled for the host (tests/fixtures/kernels/*_schedule_dump.cu) from its stream-K tail
probe variant (benchmarks/versions/gemm_wgmma_streamk_tail.patch and gemm_wgmma_swap_streamk_tail.patch,
TAIL_SPLIT = 2), whose schedule is __host__ __device__; gemm_wgmma's TAIL_SPLIT = 1 is the recorded kernel's plan,
and the swap kernel's SPLIT_K walk the recorded one's.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

import pytest

from tunetable.kernels.families import FAMILIES
from tunetable.kernels.families.common import cluster_blocks, tail_pieces, tail_split_plan
from tunetable.kernels.jit import include_flags

pytestmark = pytest.mark.nvcc

REPO = Path(__file__).resolve().parents[1]
VERSIONS = REPO / "benchmarks" / "versions"
FIXTURES = REPO / "tests" / "fixtures" / "kernels"


class Variant(NamedTuple):
    """A kernel source (a probe variant's patch, or the kernel itself once adopted) and the program that prints its
    schedule."""

    family: str
    source: Path  # benchmarks/versions/*.patch, or a .cu
    dump: Path


VARIANTS = {
    "gemm_wgmma": Variant("gemm_wgmma", VERSIONS / "gemm_wgmma_streamk_tail.patch",
                          FIXTURES / "wgmma_schedule_dump.cu"),
    "gemm_wgmma_swap": Variant("gemm_wgmma_swap", VERSIONS / "gemm_wgmma_swap_streamk_tail.patch",
                               FIXTURES / "swap_schedule_dump.cu"),
}
BASE = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "STAGES": 4, "CONSUMERS": 2, "CLUSTER_M": 1, "CLUSTER_N": 1,
        "RASTER": 0, "GROUP_M": 16, "SPLIT_K": 1, "TAIL_SPLIT": 2}
SWAP = {"BLOCK_M": 200, "BLOCK_N": 128, "BLOCK_K": 64, "STAGES": 5, "CONSUMERS": 2, "SPLIT_K": 1, "TAIL_SPLIT": 2}
CONFIGS = {
    "streamk_128x256": ("gemm_wgmma", BASE),
    "streamk_128x224_2x1": ("gemm_wgmma", {**BASE, "BLOCK_N": 224, "STAGES": 5, "CLUSTER_M": 2, "RASTER": 1,
                                           "GROUP_M": 8}),
    "streamk_128x128_1x2": ("gemm_wgmma", {**BASE, "BLOCK_N": 128, "STAGES": 6, "CLUSTER_N": 2, "RASTER": 1,
                                           "GROUP_M": 8}),
    "equal_runs_128x256": ("gemm_wgmma", {**BASE, "RASTER": 1, "GROUP_M": 8, "TAIL_SPLIT": 1}),
    "swap_streamk_200x128": ("gemm_wgmma_swap", SWAP),
    "swap_streamk_40x64": ("gemm_wgmma_swap", {**SWAP, "BLOCK_M": 40, "BLOCK_N": 64, "STAGES": 8, "CONSUMERS": 1}),
    "swap_split_k3": ("gemm_wgmma_swap", {**SWAP, "BLOCK_M": 64, "STAGES": 4, "CONSUMERS": 1, "SPLIT_K": 3,
                                          "TAIL_SPLIT": 0}),
}
# Last waves from nearly full (116 of 132 tiles at 4096^3) to a few tiles (1100 x 4096^2), odd edges, one and
# three k-tiles, and a long K (16384 k-tiles in four tiles).
SHAPES = ["4096x4096x4096", "512x4096x14336", "2048x4096x4096", "8192x4096x4096", "1024x14336x4096",
          "1100x4096x4096", "333x5000x712", "1x4096x64", "300x4096x192", "64x1024x1048576"]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The dump program of each configuration, compiled from its patched kernel (PTX only: no GPU code needed)."""
    folder = tmp_path_factory.mktemp("schedule")
    sources = {}
    for family, variant in VARIANTS.items():
        if variant.source.suffix == ".cu":
            sources[family] = variant.source
            continue
        patch = folder / variant.source.name
        patch.write_text(variant.source.read_text())
        applied = subprocess.run([sys.executable, str(REPO / "scripts" / "apply_patch.py"), str(patch)],
                                 capture_output=True, text=True, check=False)
        assert applied.returncode == 0, applied.stderr
        sources[family] = patch.with_suffix(".cu")
    built = {}
    for name, (family, defines) in CONFIGS.items():
        out = folder / name
        command = ["nvcc", "-gencode=arch=compute_90a,code=compute_90a", "-std=c++17", *include_flags(),
                   *(f"-D{key}={value}" for key, value in defines.items()),
                   "-include", str(sources[family]), str(VARIANTS[family].dump), "-o", str(out)]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        assert result.returncode == 0, f"{name}: {result.stderr[-2000:]}"
        built[name] = out
    return built


def run_dump(program: Path, *, shape: str, units: int) -> tuple[list[int], list[list[int]]]:
    """The kernel's plan fields and every work item of every block, as the dump prints them."""
    m, n, k = shape.split("x")
    out = subprocess.run([str(program), m, n, k, str(units)], capture_output=True, text=True, check=True).stdout
    plan, items = [], []
    for line in out.splitlines():
        kind, *values = line.split()
        (plan if kind == "plan" else items).append([int(v) for v in values])
    return plan[0], items


def with_derived(family: str, defines: dict[str, int]) -> dict[str, int]:
    """The defines with the family's THREADS and SMEM_BYTES."""
    return {**defines, **FAMILIES[family].derived(defines)}


def grids(family: str, defines: dict[str, int], shape: str) -> list[int]:
    """The family's launch (in clusters) and grids cut shorter, as plan.py may cut a launch."""
    m, n, k = (int(v) for v in shape.split("x"))
    launched = FAMILIES[family].launch(with_derived(family, defines), m, n, k).grid[0] // cluster_blocks(defines)
    return sorted({launched, min(launched, 100), min(launched, 7), 1})


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_kernels_walk_does_every_k_tile_once_as_the_host_plans(dumps: dict[str, Path], name: str,
                                                                     shape: str) -> None:
    family, defines = CONFIGS[name]
    bm, bn, bk = defines["BLOCK_M"], defines["BLOCK_N"], defines["BLOCK_K"]
    cm, cn = defines.get("CLUSTER_M", 1), defines.get("CLUSTER_N", 1)
    tail, split_k = defines["TAIL_SPLIT"], defines["SPLIT_K"]
    streamk = tail == 2
    m, n, k = (int(v) for v in shape.split("x"))
    tiles_m, tiles_n, k_tiles = math.ceil(m / bm), math.ceil(n / bn), math.ceil(k / bk)
    cluster_tiles = math.ceil(tiles_m / cm) * math.ceil(tiles_n / cn)
    workspace = FAMILIES[family].launch(with_derived(family, defines), m, n, k).workspace_bytes
    for units in grids(family, defines, shape):
        where = f"{name} {shape} on {units} clusters"
        (dp_tiles, shared, per_tail, max_splits, slot_tiles, runs), items = run_dump(dumps[name], shape=shape,
                                                                                      units=units)
        if tail:
            plan = tail_split_plan(tiles=cluster_tiles, units=units, k_tiles=k_tiles, streamk=streamk)
            assert (dp_tiles, shared, per_tail, max_splits, runs) == (
                plan.whole_tiles, plan.shared_tiles, plan.per_split, plan.max_splits, plan.runs), where

            # Each cluster's items after its whole tiles are the host's pieces of the last wave, in order.
            by_block = defaultdict(list)
            for rank, unit, _, *rest in items:
                by_block[rank, unit].append(rest)
            for (rank, unit), walk in by_block.items():
                whole = math.ceil((dp_tiles - unit) / units) if dp_tiles > unit else 0
                expected = tail_pieces(plan, k_tiles=k_tiles, unit=unit, streamk=streamk)
                got = [(slot // (cm * cn), begin, end, split, splits)
                       for _, _, split, splits, slot, begin, end in walk[whole:]]
                assert got == [tuple(piece) for piece in expected], f"{where}: cluster {unit}, block {rank}"
        else:
            assert (shared, max_splits, runs) == (0, split_k, 0), where

        # Every tile's k-tiles exactly once; a split tile's splits numbered 0 .. splits - 1 in one slot. Only a
        # fixed SPLIT_K may leave a split empty (K shorter than its splits); a stream-K piece never is.
        runs_of = defaultdict(list)
        for _, _, _, tile_m, tile_n, split, splits, slot, begin, end in items:
            if tile_m < tiles_m and tile_n < tiles_n:  # not a cluster's padding tile
                runs_of[tile_m, tile_n].append((begin, end, split, splits, slot))
        assert set(runs_of) == {(i, j) for i in range(tiles_m) for j in range(tiles_n)}, where
        slots = {}
        for tile, tile_runs in runs_of.items():
            tile_runs.sort()
            assert split_k > 1 or all(begin < end for begin, end, *_ in tile_runs), f"{where}: tile {tile}: empty run"
            filled = [run for run in tile_runs if run[0] < run[1]]
            assert filled[0][0] == 0 and filled[-1][1] == k_tiles, f"{where}: tile {tile}"
            assert all(a[1] == b[0] for a, b in zip(filled, filled[1:])), f"{where}: tile {tile}: {tile_runs}"
            if len(tile_runs) == 1:
                assert tile_runs[0][3] == 1, f"{where}: tile {tile} done whole but counted as split"
                continue
            assert sorted(run[2] for run in tile_runs) == list(range(len(tile_runs))), f"{where}: tile {tile}"
            assert {run[3] for run in tile_runs} == {len(tile_runs)} and len(tile_runs) <= max_splits, where
            assert len({run[4] for run in tile_runs}) == 1 and tile_runs[0][4] < slot_tiles, where
            assert slots.setdefault(tile_runs[0][4], tile) == tile, f"{where}: two tiles in slot {tile_runs[0][4]}"
        if slots:  # the partials and counters fit in the workspace the host allocates for the launch
            need = max_splits * slot_tiles * bm * bn * 4 + slot_tiles * defines["CONSUMERS"] * 4
            assert workspace >= need, where
