"""The perf models on arrays of shapes: numpy twins of the per-shape closures of
``tunetable.kernels.perfmodel`` (``persistent_model``, ``tiled_model``) for the selector build, which evaluates
millions of shapes (the runtime's selector evaluates a few per new shape, so its closures stay pure Python).

Each twin repeats its closure's integer and float operations in the same order, its conditionals as ``np.where``:
the times are bit-equal (tests/test_perfmodel_grid.py compares both on every configuration of every table's
grid, so a closure changed without its twin fails there). A TAIL_SPLIT tile has no twin (its plan is per shape):
``model_grid`` returns None for it and the caller evaluates the closure per point.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from tunetable.kernels.perfmodel import (
    BF16_BYTES,
    DEVICE_FLOPS,
    FP32_BYTES,
    HBM_BYTES_PER_S,
    LAUNCH_OVERHEAD_S,
    MEMORY_LATENCY_S,
    NUM_SMS,
    SATURATING_WARPS,
    SM_CLOCK_HZ,
    SYNC_CYCLES_PER_K_STEP,
    GemmTile,
    PersistentTile,
    Resources,
    blocks_per_sm,
    persistent_rates,
    slice_reduction_s,
    tiled_rates,
)
from tunetable.kernels.runtime.selector_serve import model_tile

GridFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]   # (M, N, K arrays of one shape) -> seconds


def persistent_grid(tile: PersistentTile) -> GridFn | None:
    """``persistent_model(tile)`` over arrays of M, N and K (None: a TAIL_SPLIT tile)."""
    if tile.tail_split:
        return None
    bm, bn, bk = tile.block_m, tile.block_n, tile.block_k
    cm, cn, split_k = tile.cluster_m, tile.cluster_n, tile.split_k
    cluster = cm * cn
    max_clusters = NUM_SMS // cluster
    tile_area = 2.0 * bm * bn
    rate, feed_rate, out_element_bytes, epilogue_rate = persistent_rates(tile=tile)

    def seconds(m: np.ndarray, n: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Predicted times in seconds of the tile on every (m, n, k)."""
        items = -(-(-(-m // bm)) // cm) * -(-(-(-n // bn)) // cn) * split_k
        clusters = np.where(items > max_clusters, max_clusters, items)
        clusters = np.where(clusters < 1, 1, clusters)
        k_part = -(-k // split_k)
        tile_flops = tile_area * k_part
        compute_s = tile_flops / rate + -(-k_part // bk) * SYNC_CYCLES_PER_K_STEP / SM_CLOCK_HZ
        rows_a = np.where(bm < m, bm, m)
        rows_b = np.where(bn < n, bn, n)
        feed_s = (rows_a / cn + rows_b / cm) * k_part * BF16_BYTES / feed_rate
        epilogue_s = rows_a * rows_b * out_element_bytes / epilogue_rate
        tile_s = np.where(feed_s > compute_s, feed_s, compute_s)
        busiest_s = MEMORY_LATENCY_S + -(-items // clusters) * (tile_s + epilogue_s)
        output_bytes = split_k * m * n * FP32_BYTES if split_k > 1 else m * n * BF16_BYTES
        memory_s = ((m * k + n * k) * BF16_BYTES + output_bytes) / HBM_BYTES_PER_S
        math_s = items * cluster * tile_flops / DEVICE_FLOPS
        device_s = np.where(math_s > memory_s, math_s, memory_s)
        return np.where(device_s > busiest_s, device_s, busiest_s) + LAUNCH_OVERHEAD_S

    return seconds


def tiled_grid(*, tile: GemmTile, resources: Resources) -> GridFn:
    """``tiled_model(tile=..., resources=...)`` over arrays of M, N and K."""
    per_sm = blocks_per_sm(resources)
    if per_sm == 0:
        return lambda m, n, k: np.full(np.broadcast(m, n, k).shape, np.inf)
    bm, bn, bk, split_k = tile.block_m, tile.block_n, tile.block_k, tile.split_k
    tile_area = 2.0 * bm * bn
    peak_rate, stage_bytes, port = tiled_rates(tile=tile)
    threads = tile.threads
    slices = tile.warps_k > 1

    def seconds(m: np.ndarray, n: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Predicted times in seconds of the tile on every (m, n, k)."""
        k_part = -(-k // split_k)
        tiles = -(-m // bm) * -(-n // bn) * split_k
        tiles_on_busiest_sm = -(-tiles // NUM_SMS)
        resident = np.where(per_sm < tiles_on_busiest_sm, per_sm, tiles_on_busiest_sm)
        tile_flops = tile_area * k_part
        warp_fill = resident * threads / 32 / SATURATING_WARPS
        warp_fill = np.where(warp_fill > 1.0, 1.0, warp_fill)
        exposed_s = (MEMORY_LATENCY_S + -(-k_part // bk) * SYNC_CYCLES_PER_K_STEP / SM_CLOCK_HZ) / resident
        slices_s = slice_reduction_s(tile=tile, resident=resident) if slices else 0.0
        compute_s = tiles_on_busiest_sm * (tile_flops / (peak_rate * warp_fill) + exposed_s + slices_s)
        tile_bytes = (bm + bn) * k_part * BF16_BYTES
        in_flight_rate = resident * stage_bytes / MEMORY_LATENCY_S
        feed_s = tiles_on_busiest_sm * tile_bytes / np.where(in_flight_rate < port, in_flight_rate, port)
        output_bytes = split_k * m * n * FP32_BYTES if split_k > 1 else m * n * BF16_BYTES
        moved = (m * k + n * k) * BF16_BYTES + output_bytes
        memory_s, math_s = moved / HBM_BYTES_PER_S, tiles * tile_flops / DEVICE_FLOPS
        device_s = np.where(math_s > memory_s, math_s, memory_s)
        reduce_s = 0.0
        if split_k > 1:
            reduce_s = (split_k * m * n * FP32_BYTES + m * n * BF16_BYTES) / HBM_BYTES_PER_S
        slowest = np.where(feed_s > compute_s, feed_s, compute_s)
        return np.where(device_s > slowest, device_s, slowest) + reduce_s + LAUNCH_OVERHEAD_S

    return seconds


def model_grid(*, family: str, tunables: Mapping[str, int], registers: int, smem_bytes: int) -> GridFn | None:
    """The twin of ``selector_serve.model_parts``'s perf model (without ``m_fit_factor``); None: none (TAIL_SPLIT)."""
    found = model_tile(family=family, tunables=tunables, registers=registers, smem_bytes=smem_bytes)
    if isinstance(found, PersistentTile):
        return persistent_grid(found)
    tile, resources = found
    return tiled_grid(tile=tile, resources=resources)
