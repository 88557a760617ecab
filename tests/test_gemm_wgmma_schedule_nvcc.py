"""gemm_wgmma's own work-item walk, run on the host: every k-tile of every tile done exactly once, and the
last wave split as the host's plan says (families/common.py's tail_split_plan sizes the workspace from it).

The kernel's Schedule is compiled for the host (tests/fixtures/kernels/wgmma_schedule_dump.cu) from the
stream-K tail's probe variant (benchmarks/versions/gemm_wgmma_streamk_tail.patch, TAIL_SPLIT = 2), whose
Schedule is __host__ __device__; its TAIL_SPLIT = 1 is the recorded kernel's plan.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tunetable.kernels.families import FAMILIES
from tunetable.kernels.families.common import cluster_blocks, tail_pieces, tail_split_plan
from tunetable.kernels.jit import include_flags

pytestmark = pytest.mark.nvcc

REPO = Path(__file__).resolve().parents[1]
PATCH = REPO / "benchmarks" / "versions" / "gemm_wgmma_streamk_tail.patch"
DUMP = REPO / "tests" / "fixtures" / "kernels" / "wgmma_schedule_dump.cu"
FAMILY = FAMILIES["gemm_wgmma"]

BASE = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "STAGES": 4, "CONSUMERS": 2, "CLUSTER_M": 1, "CLUSTER_N": 1,
        "RASTER": 0, "GROUP_M": 16, "SPLIT_K": 1, "TAIL_SPLIT": 2}
CONFIGS = {
    "streamk_128x256": BASE,
    "streamk_128x224_2x1": {**BASE, "BLOCK_N": 224, "STAGES": 5, "CLUSTER_M": 2, "RASTER": 1, "GROUP_M": 8},
    "streamk_128x128_1x2": {**BASE, "BLOCK_N": 128, "STAGES": 6, "CLUSTER_N": 2, "RASTER": 1, "GROUP_M": 8},
    "equal_runs_128x256": {**BASE, "RASTER": 1, "GROUP_M": 8, "TAIL_SPLIT": 1},
}
# Last waves from nearly full (116 of 132 tiles at 4096^3) to a few tiles (1100 x 4096^2), odd edges, one and
# three k-tiles, and a long K (16384 k-tiles in four tiles).
SHAPES = ["4096x4096x4096", "512x4096x14336", "2048x4096x4096", "8192x4096x4096", "1024x14336x4096",
          "1100x4096x4096", "333x5000x712", "1x4096x64", "300x4096x192", "64x1024x1048576"]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The dump program of each configuration, compiled from the patched kernel (PTX only: no GPU code needed)."""
    folder = tmp_path_factory.mktemp("schedule")
    patch = folder / PATCH.name
    patch.write_text(PATCH.read_text())
    applied = subprocess.run([sys.executable, str(REPO / "scripts" / "apply_patch.py"), str(patch)],
                             capture_output=True, text=True, check=False)
    assert applied.returncode == 0, applied.stderr
    built = {}
    for name, defines in CONFIGS.items():
        out = folder / name
        command = ["nvcc", "-gencode=arch=compute_90a,code=compute_90a", "-std=c++17", *include_flags(),
                   *(f"-D{key}={value}" for key, value in defines.items()),
                   "-include", str(patch.with_suffix(".cu")), str(DUMP), "-o", str(out)]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        assert result.returncode == 0, f"{name}: {result.stderr[-2000:]}"
        built[name] = out
    return built


def run_dump(program: Path, *, shape: str, clusters: int) -> tuple[list[int], list[list[int]]]:
    """The kernel's plan fields and every work item of every block, as the dump prints them."""
    m, n, k = shape.split("x")
    out = subprocess.run([str(program), m, n, k, str(clusters)], capture_output=True, text=True, check=True).stdout
    plan, items = [], []
    for line in out.splitlines():
        kind, *values = line.split()
        (plan if kind == "plan" else items).append([int(v) for v in values])
    return plan[0], items


def grids(defines: dict[str, int], shape: str) -> list[int]:
    """The family's launch (in clusters) and grids cut shorter, as plan.py may cut a launch."""
    m, n, k = (int(v) for v in shape.split("x"))
    launched = FAMILY.launch(defines, m, n, k).grid[0] // cluster_blocks(defines)
    return sorted({launched, min(launched, 100), min(launched, 7), 1})


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_kernels_walk_does_every_k_tile_once_as_the_host_plans(dumps: dict[str, Path], name: str,
                                                                     shape: str) -> None:
    defines = CONFIGS[name]
    bm, bn, bk = defines["BLOCK_M"], defines["BLOCK_N"], defines["BLOCK_K"]
    cm, cn = defines["CLUSTER_M"], defines["CLUSTER_N"]
    streamk = defines["TAIL_SPLIT"] == 2
    m, n, k = (int(v) for v in shape.split("x"))
    tiles_m, tiles_n, k_tiles = math.ceil(m / bm), math.ceil(n / bn), math.ceil(k / bk)
    cluster_tiles = math.ceil(tiles_m / cm) * math.ceil(tiles_n / cn)
    workspace = FAMILY.launch({**defines, **FAMILY.derived(defines)}, m, n, k).workspace_bytes
    for clusters in grids({**defines, **FAMILY.derived(defines)}, shape):
        where = f"{name} {shape} on {clusters} clusters"
        (dp_tiles, shared, per_tail, max_splits, slot_tiles, runs), items = run_dump(dumps[name], shape=shape,
                                                                                      clusters=clusters)
        plan = tail_split_plan(tiles=cluster_tiles, units=clusters, k_tiles=k_tiles, streamk=streamk)
        assert (dp_tiles, shared, per_tail, max_splits, runs) == (
            plan.whole_tiles, plan.shared_tiles, plan.per_split, plan.max_splits, plan.runs), where

        # Each cluster's items after its whole tiles are the host's pieces of the last wave, in order.
        by_block = defaultdict(list)
        for rank, unit, _, *rest in items:
            by_block[rank, unit].append(rest)
        for (rank, unit), walk in by_block.items():
            whole = math.ceil((dp_tiles - unit) / clusters) if dp_tiles > unit else 0
            expected = tail_pieces(plan, k_tiles=k_tiles, unit=unit, streamk=streamk)
            got = [(slot // (cm * cn), begin, end, split, splits)
                   for _, _, split, splits, slot, begin, end in walk[whole:]]
            assert got == [tuple(piece) for piece in expected], f"{where}: cluster {unit}, block {rank}"

        # Every tile's k-tiles exactly once; a shared tile's splits numbered 0.. splits - 1 in one slot.
        runs_of = defaultdict(list)
        for _, _, _, tile_m, tile_n, split, splits, slot, begin, end in items:
            if tile_m < tiles_m and tile_n < tiles_n:  # not a cluster's padding tile
                runs_of[tile_m, tile_n].append((begin, end, split, splits, slot))
        assert set(runs_of) == {(i, j) for i in range(tiles_m) for j in range(tiles_n)}, where
        slots = {}
        for tile, tile_runs in runs_of.items():
            tile_runs.sort()
            assert tile_runs[0][0] == 0 and tile_runs[-1][1] == k_tiles, f"{where}: tile {tile}"
            assert all(a[1] == b[0] for a, b in zip(tile_runs, tile_runs[1:])), f"{where}: tile {tile}: {tile_runs}"
            assert all(begin < end for begin, end, *_ in tile_runs), f"{where}: tile {tile}: an empty run"
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

