"""The gemm_wgmma table in params.yaml: grid expansion, derived values, snippet and generated class agree."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections import Counter
from pathlib import Path

import pytest

from tunetable.kernels.runtime.decide import make_entry, tunable_fields
from tunetable.kernels.families import FAMILIES
from tunetable.kernels.families.common import MAX_SHARED_BYTES_PER_BLOCK
from tunetable.kernels.tuning_configs import WgmmaTuningConfig
from tunetable.grid import DeviceLimits, compile_rules, expand, first_failed_rule
from tunetable.params import load_params, table_spec

REPO = Path(__file__).resolve().parents[1]
PARAMS = load_params(REPO / "params.yaml")
SPEC = table_spec(PARAMS, "gemm_wgmma")
FAMILY = FAMILIES["gemm_wgmma"]
TUNABLES = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "STAGES", "CONSUMERS", "CLUSTER_M", "CLUSTER_N", "RASTER", "GROUP_M",
            "SPLIT_K", "TAIL_SPLIT")


@pytest.fixture(scope="module")
def grid():
    return expand(SPEC, limits=DeviceLimits.from_params(PARAMS))


def test_table_declaration_matches_the_kernel_family() -> None:
    assert (SPEC.family, SPEC.kernel, SPEC.arch) == ("gemm_wgmma", str(FAMILY.source), "sm_90a")
    assert FAMILY.source == REPO / "kernels/families/gemm_wgmma/gemm_wgmma.cu"
    # gemm_mma's shapes and the Ms between its buckets (112, 176, 320) that tell the selector where odd tiles win
    mma_shapes = table_spec(PARAMS, "gemm_mma").shapes()
    assert set(mma_shapes) < set(SPEC.shapes())
    assert {m for m, _, _ in SPEC.shapes()} - {m for m, _, _ in mma_shapes} == {112, 176, 320}
    assert SPEC.recording == "data/recordings/h200_gemm_wgmma.parquet"
    assert SPEC.codegen.manifest == "manifests/gemm_wgmma.yaml"
    assert SPEC.codegen.snippet == str(REPO / "kernels/families/gemm_wgmma/gemm_wgmma.snippet")


def primary_groups() -> list[dict]:
    """params.yaml's gemm_wgmma groups of the table's device, the first declared (straight from the YAML): a group
    with a ``devices`` list is another device's unless it names this one."""
    primary = next(iter(PARAMS["devices"]))
    return [group for group in PARAMS["tables"]["gemm_wgmma"]["grid"]["groups"]
            if primary in group.get("devices", [primary])]


def declared_configs() -> dict[frozenset, str]:
    """Every combination the primary device's gemm_wgmma groups declare -> its first group."""
    first: dict[frozenset, str] = {}
    for group in primary_groups():
        values = {name: value for name, value in group.items() if name not in ("name", "devices")}
        for combination in itertools.product(*values.values()):
            first.setdefault(frozenset(zip(values, combination)), group["name"])
    return first


def test_grid_expansion_counts_and_groups(grid) -> None:
    declared = declared_configs()
    assert grid.counts.expanded == len(declared) == len(grid.kept) + len(grid.pruned)
    # Every combination that overflows shared memory is pruned by a rule, before any device limit.
    overflow = {key for key in declared if FAMILY.smem_bytes(dict(key)) > MAX_SHARED_BYTES_PER_BLOCK}
    pruned = {frozenset(p.config.params) for p in grid.pruned}
    assert overflow and overflow <= pruned and {p.stage for p in grid.pruned} == {"rule"}
    assert grid.counts.after_rules == grid.counts.after_pruning == len(grid.kept)
    # Each group keeps what it declares first, less what the rules prune; none is left empty.
    groups = Counter(grid.group_of[config.id] for config in grid.kept)
    assert groups == Counter(name for key, name in declared.items() if key not in pruned)
    assert set(groups) == {group["name"] for group in primary_groups()}
    assert all(tuple(dict(config.params)) == TUNABLES for config in grid.kept)


def test_derived_values_are_the_familys_geometry(grid) -> None:
    for config in grid.kept:
        defines = config.defines()
        assert defines["THREADS"] == FAMILY.threads(defines) == (defines["CONSUMERS"] + 1) * 128
        assert defines["SMEM_BYTES"] == FAMILY.smem_bytes(defines) <= MAX_SHARED_BYTES_PER_BLOCK
        assert defines["BLOCK_M"] // defines["CONSUMERS"] in (64, 128)
        # Accumulators per consumer thread: <= 192 at two consumers' 232 registers, <= 96 (m64n192) at three.
        accumulators = (defines["BLOCK_M"] // defines["CONSUMERS"]) * defines["BLOCK_N"] // 128
        assert accumulators <= (96 if defines["CONSUMERS"] == 3 else 192)


def test_every_kept_config_launches_on_the_tables_shapes(grid) -> None:
    """Every (config, shape): whole clusters, <= one block per SM, split-K partials (a whole fp32 tile per split and
    tile: the fragment-native slots of common/splitk.cuh) + per-tile counters, zeroed."""
    assert FAMILY.zeroed_workspace is True
    for config in grid.kept:
        defines = config.defines()
        cluster = defines["CLUSTER_M"] * defines["CLUSTER_N"]
        split = defines["SPLIT_K"]
        for m, n, k in SPEC.shapes():
            launch = FAMILY.launch(defines, m, n, k)
            assert launch.grid[0] % cluster == 0 and launch.grid[0] <= 132
            if defines["TAIL_SPLIT"]:
                continue  # its own workspace: test_tail_split_workspace_holds_every_split below
            tiles = math.ceil(m / defines["BLOCK_M"]) * math.ceil(n / defines["BLOCK_N"])
            counters = tiles * defines["CONSUMERS"]  # one per tile and consumer warpgroup, after the partials
            partials = split * tiles * defines["BLOCK_M"] * defines["BLOCK_N"] * 4
            assert launch.workspace_bytes == (partials + counters * 4 if split > 1 else 0), (config.id, m, n)


def test_split_k_workspace_of_the_skinny_heuristic() -> None:
    """64x128 tiles, one consumer, SPLIT_K=2 at 7x4096x4096: 2 x 32 whole 64 x 128 fp32 tiles, then 32 counters."""
    defines = FAMILY.defines_of(FAMILY.skinny_tunables)
    assert (defines["BLOCK_M"], defines["BLOCK_N"], defines["CONSUMERS"], defines["SPLIT_K"]) == (64, 128, 1, 2)
    assert FAMILY.launch(defines, 7, 4096, 4096).workspace_bytes == 2 * 32 * 64 * 128 * 4 + 32 * 4 == 2_097_152 + 128


TAIL_SPLIT_256 = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "STAGES": 4, "CONSUMERS": 2, "CLUSTER_M": 1,
                "CLUSTER_N": 1, "RASTER": 1, "GROUP_M": 8, "SPLIT_K": 1, "TAIL_SPLIT": 1}
TILE_BYTES_256 = 128 * 256 * 4


@pytest.mark.parametrize("shape,tiles,splits", [
    # 2 x 74 = 148 tiles of 56 k-tiles on 132 clusters: one full wave whole, its 16 last-wave tiles split
    # 132 // 16 = 8 ways (runs of 7 k-tiles); no cut grid (99-131 clusters: 17-49 tiles, 2-7 splits) needs more.
    ((250, 18944, 3584), 16, 8),
    # 16 tiles of 64 k-tiles, less than a wave: each split 8 ways (the cap, not 132 // 16 = 8.25 -> 8 anyway).
    ((8, 4096, 4096), 16, 8),
    # 1 x 1 tile of 1 k-tile: one cluster, the tile whole; no workspace.
    ((1, 8, 8), 0, 0),
])
def test_tail_split_workspace_holds_every_split(shape: tuple[int, int, int], tiles: int, splits: int) -> None:
    """TAIL_SPLIT: a whole fp32 tile per (last-wave tile, split), then one counter per such tile and consumer."""
    defines = {**TAIL_SPLIT_256, **FAMILY.derived(TAIL_SPLIT_256)}
    launch = FAMILY.launch(defines, *shape)
    assert launch.workspace_bytes == splits * tiles * TILE_BYTES_256 + (tiles * 2 * 4 if tiles else 0)
    assert launch.grid[0] == min(132, max(1, math.ceil(shape[0] / 128) * math.ceil(shape[1] / 256)
                                          * math.ceil(shape[2] / 64)))


def test_tail_split_and_split_k_exclude_each_other() -> None:
    rules = compile_rules(SPEC.grid, names=list({**TAIL_SPLIT_256, **FAMILY.derived(TAIL_SPLIT_256)}),
                          path="params.yaml", table=SPEC.name, family=FAMILY)
    both = {**TAIL_SPLIT_256, "SPLIT_K": 2}
    failed = first_failed_rule({**both, **FAMILY.derived(both)}, rules)
    assert failed is not None and failed.expression.source == "TAIL_SPLIT == 0 or SPLIT_K == 1"


def test_snippet_fields_are_the_generated_class_and_the_manifest_keys() -> None:
    snippet = (REPO / SPEC.codegen.snippet).read_text()
    fields = [f.name for f in dataclasses.fields(WgmmaTuningConfig)]
    assert re.findall(r"(\w+)=\"?\[@", snippet) == fields   # each field once, in the class's order
    placeholders = re.findall(r"\[@(\w+)\]", snippet)
    assert placeholders == ["M", "M_END", "N", "K", "KERNEL", "CONFIG_ID", *TUNABLES]
    assert tunable_fields("gemm_wgmma") == tuple(name.lower() for name in TUNABLES)


def test_runtime_heuristics_are_kept_configurations(grid) -> None:
    kept = {config.id for config in grid.kept}
    for tunables in (FAMILY.skinny_tunables, FAMILY.default_tunables):
        assert make_entry(tunables=dataclasses.asdict(tunables), n=4096, k=4096, kernel="gemm_wgmma").config_id in kept
