"""Analytical GEMM performance model: orders and prunes configurations before any GPU time.

Predicted time of C[M,N] = A[M,K] B[N,K]^T for one tiled configuration on an H200:

- **Occupancy**: blocks per SM from threads, registers (allocated per warp in 256-register
  units) and shared memory (the compile report's static smem + the pipeline's dynamic smem).
- **Wave quantisation**: ``tiles = ceil(M/BM) ceil(N/BN) SPLIT_K`` spread over 132 SMs; the
  busiest SM runs ``ceil(tiles / 132)`` tiles, concurrently up to the blocks-per-SM limit.
- **Per-SM work**: tensor-core time of the (padded) tile flops at the mma.sync rate, slowed
  when few warps are resident or when warp tiles are so small that shared-memory reads bound
  the MMAs; and the time to feed the tiles from L2, limited by bytes in flight (stages x tile
  bytes x resident blocks, Little's law) and by the SM's L2 port.
- **Sliced K** (WARPS_K, default 1): WARPS_K copies of the WARPS_M x WARPS_N layout share each
  k-tile's k16 steps, so the block has WARPS_K times the warps on the same warp tiles (same
  shared-memory bytes per flop, better warp fill) and per tile sums WARPS_K - 1 fp32 tiles
  through shared memory (written once, read once, between two barriers).
- **Roofline**: the device floor ``max(bytes / 4.13 TB/s, flops / 800 TFLOP/s)``; split-K
  writes fp32 partials, then the last split of each tile reads the others' partials back and
  writes C (added: it waits for the tile's slowest split).
- Exposed latency per tile (pipeline fill, a barrier per BLOCK_K step), shared by the resident
  blocks; one launch overhead (split-K reduces in the same kernel, no second launch).

Persistent TMA + wgmma kernels (CONSUMERS instead of WARPS_M/N, e.g. gemm_wgmma) get their own
variant, ``predict_persistent_seconds``: one block per SM; (cluster tile x split) work items
spread over the resident clusters, the busiest cluster's count setting the time; per item, the
tile flops at the wgmma rate (one consumer warpgroup leaves the tensor cores idle while it waits
on its single k-tile in flight; narrow wgmma n is bounded by shared-memory reads of both
operands) plus a barrier handshake per k-tile, against feeding it by TMA (STAGES stages in
flight, the L2 reads of this block's slice of a cluster-shared tile); plus the epilogue and
split-K finish the consumers do between items, and the same device roofline. With TAIL_SPLIT = 1
the busiest cluster's work is its full waves' whole tiles plus one split of a last-wave tile
(``tail_split_plan``, the kernel's own plan), whose fp32 partials the tile's last split sums;
TAIL_SPLIT = 2 (the stream-K tail of a probe variant) the same with its longest run.

The constants are H200 datasheet or DESIGN.md numbers, not fitted to any recording: the model
only has to rank configurations, and the model-based search corrects what it gets wrong.

Pure Python (no numpy): the build (``tunetable.search.prior``, the search) and the runtime's shape selector
(``tunetable.kernels.runtime.selector_serve``) both evaluate it; the selector builder evaluates millions of shapes
through its numpy twins (``tunetable.perfmodel_grid``, bit-equal: a change here needs the same change there).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from typing import Any

from tunetable.kernels.families.common import tail_split_plan
from tunetable.kernels.families.devices import Ceilings

NUM_SMS = 132
HBM_BYTES_PER_S = 4.13e12          # measured device-to-device copy (DESIGN.md)
DEVICE_FLOPS = 800e12              # cuBLAS bf16 ceiling measured here (DESIGN.md)
MMA_SYNC_FRACTION = 0.5            # mma.sync reaches about half of the wgmma ceiling (reference §6.2)
SM_CLOCK_HZ = 1.6e9                # sustained clock under load (1450-1980 MHz measured)
SMEM_BYTES_PER_CLOCK = 128         # shared-memory bandwidth per SM
L2_BYTES_PER_CLOCK = 64            # L2 -> SM bandwidth per SM
MEMORY_LATENCY_S = 0.8e-6          # global-load latency under load, for Little's law
SATURATING_WARPS = 8               # resident warps per SM needed to keep the tensor cores busy
SYNC_CYCLES_PER_K_STEP = 80        # barrier + pipeline bookkeeping per BLOCK_K step
SMEM_PER_SM = 233472               # 228 KiB
SMEM_RESERVED_PER_BLOCK = 1024
REGISTERS_PER_SM = 65536
MAX_THREADS_PER_SM = 2048
MAX_BLOCKS_PER_SM = 32
LAUNCH_OVERHEAD_S = 3e-6
SINGLE_CONSUMER_FRACTION = 0.75    # tensor-core share one consumer warpgroup keeps busy (two: all of it)
WGMMA_M = 64                       # rows of one wgmma instruction
EPILOGUE_BYTES_PER_CLOCK = 64      # an SM's global-store rate for the epilogue
BF16_BYTES = 2
FP32_BYTES = 4


@dataclass(frozen=True)
class Resources:
    """Per-block resource usage of a compiled configuration (compile report + launch geometry)."""

    registers: int          # per thread
    smem_bytes: int         # static + dynamic shared memory per block
    threads: int


@dataclass(frozen=True)
class GemmTile:
    """The tiling parameters the model reads from a configuration."""

    block_m: int
    block_n: int
    block_k: int
    warps_m: int
    warps_n: int
    warps_k: int
    stages: int
    split_k: int

    @classmethod
    def from_config(cls, config: Any) -> "GemmTile":
        """Read the tile of a configuration (anything with ``defines()`` and ``id``, e.g. a KernelConfig)."""
        return cls.from_defines(config.defines(), label=f"configuration {config.id}")

    @classmethod
    def from_defines(cls, values: Mapping[str, Any], *, label: str = "a configuration") -> "GemmTile":
        """Read BLOCK_M/N/K, WARPS_M/N, WARPS_K (default 1), STAGES, SPLIT_K (default 1) from -D defines."""
        missing = [n for n in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "WARPS_M", "WARPS_N", "STAGES") if n not in values]
        if missing:
            raise ValueError(f"{label} lacks {', '.join(missing)}: the GEMM model cannot rank it")
        return cls(
            block_m=int(values["BLOCK_M"]),
            block_n=int(values["BLOCK_N"]),
            block_k=int(values["BLOCK_K"]),
            warps_m=int(values["WARPS_M"]),
            warps_n=int(values["WARPS_N"]),
            warps_k=int(values.get("WARPS_K", 1)),
            stages=int(values["STAGES"]),
            split_k=int(values.get("SPLIT_K", 1)),
        )

    @property
    def threads(self) -> int:
        """Threads per block: WARPS_M x WARPS_N warps per k slice, WARPS_K slices."""
        return self.warps_m * self.warps_n * self.warps_k * 32


def estimated_resources(tile: GemmTile) -> Resources:
    """Resources when no compile report is at hand: fp32 accumulators + overhead, pipelined smem."""
    accumulators = tile.block_m * tile.block_n * tile.warps_k // tile.threads   # every k slice holds a whole tile
    registers = min(255, accumulators + 48)
    smem = tile.stages * (tile.block_m + tile.block_n) * tile.block_k * BF16_BYTES
    return Resources(registers=registers, smem_bytes=smem, threads=tile.threads)


def blocks_per_sm(resources: Resources) -> int:
    """Resident blocks per SM (0: the block cannot launch)."""
    warps = math.ceil(resources.threads / 32)
    registers_per_warp = math.ceil(max(resources.registers, 1) * 32 / 256) * 256
    by_registers = (REGISTERS_PER_SM // registers_per_warp) // warps
    by_smem = SMEM_PER_SM // (resources.smem_bytes + SMEM_RESERVED_PER_BLOCK)
    by_threads = MAX_THREADS_PER_SM // resources.threads
    return max(min(by_registers, by_smem, by_threads, MAX_BLOCKS_PER_SM), 0)


def roofline_floor_s(*, m: int, n: int, k: int, ceilings: Ceilings | None = None) -> float:
    """DESIGN.md's floor: max(bytes / copy bandwidth, flops / peak) for the ideal GEMM, on a device's measured
    ``ceilings`` (None: the H200's, 4.13 TB/s and 800 TFLOP/s, the unit the performance model and the shape
    selector are fitted in)."""
    moved = (m * k + n * k + m * n) * BF16_BYTES
    if ceilings is None:
        return max(moved / HBM_BYTES_PER_S, 2.0 * m * n * k / DEVICE_FLOPS)
    return max(moved / (ceilings.copy_tb_s * 1e12), 2.0 * m * n * k / (ceilings.tflops * 1e12))


def slice_reduction_s(*, tile: GemmTile, resident: int) -> float:
    """Per-tile cost of summing the k slices: their fp32 tiles through smem and two barriers (latency shared)."""
    if tile.warps_k == 1:
        return 0.0
    smem_bytes = 2 * (tile.warps_k - 1) * tile.block_m * tile.block_n * FP32_BYTES   # written, then read back
    return (smem_bytes / SMEM_BYTES_PER_CLOCK + 2 * SYNC_CYCLES_PER_K_STEP / resident) / SM_CLOCK_HZ


def tiled_rates(*, tile: GemmTile) -> tuple[float, int, float]:
    """What ``tiled_model`` needs of the tile alone: (tensor-core rate of the busiest SM, bytes of the stages in
    flight, the SM's L2 port rate)."""
    bm, bn = tile.block_m, tile.block_n
    # Tensor-core rate of the busiest SM: the mma.sync rate, bounded by smem reads when warp tiles are small.
    mma_rate = DEVICE_FLOPS * MMA_SYNC_FRACTION / NUM_SMS
    warp_m, warp_n = bm / tile.warps_m, bn / tile.warps_n
    smem_bytes_per_flop = BF16_BYTES * (warp_m + warp_n) / (2.0 * warp_m * warp_n)
    smem_rate = SMEM_BYTES_PER_CLOCK * SM_CLOCK_HZ / smem_bytes_per_flop
    stage_bytes = max(tile.stages - 1, 1) * (bm + bn) * tile.block_k * BF16_BYTES
    return min(mma_rate, smem_rate), stage_bytes, L2_BYTES_PER_CLOCK * SM_CLOCK_HZ


def tiled_model(*, tile: GemmTile, resources: Resources) -> Callable[[int, int, int], float]:
    """``predict_seconds`` of one tile as ``f(m, n, k)``: what depends on the tile alone computed once, the rest
    with the same float operations in the same order (bit-equal times; ``persistent_model`` says why)."""
    per_sm = blocks_per_sm(resources)
    if per_sm == 0:
        return lambda m, n, k: math.inf
    bm, bn, bk, split_k = tile.block_m, tile.block_n, tile.block_k, tile.split_k
    tile_area = 2.0 * bm * bn
    peak_rate, stage_bytes, port = tiled_rates(tile=tile)
    # min / max written as conditionals, the float operations as a single call's (``persistent_model`` says why).
    threads, sync_cycles, clock, latency = tile.threads, SYNC_CYCLES_PER_K_STEP, SM_CLOCK_HZ, MEMORY_LATENCY_S
    hbm, flops, launch = HBM_BYTES_PER_S, DEVICE_FLOPS, LAUNCH_OVERHEAD_S
    slices = tile.warps_k > 1

    def seconds(m: int, n: int, k: int) -> float:
        """Predicted time in seconds of the tile on (m, n, k)."""
        k_part = -(-k // split_k)
        tiles = -(-m // bm) * -(-n // bn) * split_k
        tiles_on_busiest_sm = -(-tiles // NUM_SMS)
        resident = per_sm if per_sm < tiles_on_busiest_sm else tiles_on_busiest_sm
        tile_flops = tile_area * k_part
        # Derated when too few warps hide latency.
        warp_fill = resident * threads / 32 / SATURATING_WARPS
        if warp_fill > 1.0:
            warp_fill = 1.0
        # Per-tile latency other resident blocks cannot hide: pipeline fill and one barrier per k step.
        exposed_s = (latency + -(-k_part // bk) * sync_cycles / clock) / resident
        # Sliced K: its warps count in warp_fill (same warp tiles, so same smem bytes per flop), its reduction here.
        slices_s = slice_reduction_s(tile=tile, resident=resident) if slices else 0.0
        compute_s = tiles_on_busiest_sm * (tile_flops / (peak_rate * warp_fill) + exposed_s + slices_s)
        # Feeding the busiest SM: bytes in flight over latency, capped by its L2 port.
        tile_bytes = (bm + bn) * k_part * BF16_BYTES
        in_flight_rate = resident * stage_bytes / latency
        feed_s = tiles_on_busiest_sm * tile_bytes / (in_flight_rate if in_flight_rate < port else port)
        # Device roofline of the main kernel (split-K writes fp32 partials instead of C) ...
        output_bytes = split_k * m * n * FP32_BYTES if split_k > 1 else m * n * BF16_BYTES
        moved = (m * k + n * k) * BF16_BYTES + output_bytes
        memory_s, math_s = moved / hbm, tiles * tile_flops / flops
        device_s = math_s if math_s > memory_s else memory_s
        # ... and the split-K reduction in the same launch: each tile's last split reads the partials back.
        reduce_s = 0.0
        if split_k > 1:
            reduce_s = (split_k * m * n * FP32_BYTES + m * n * BF16_BYTES) / hbm
        slowest = feed_s if feed_s > compute_s else compute_s
        return (device_s if device_s > slowest else slowest) + reduce_s + launch

    return seconds


def predict_seconds(*, tile: GemmTile, resources: Resources, m: int, n: int, k: int) -> float:
    """Predicted kernel time in seconds (inf when the block cannot be resident)."""
    return tiled_model(tile=tile, resources=resources)(m, n, k)


@dataclass(frozen=True)
class PersistentTile:
    """The parameters the persistent (TMA + wgmma, CONSUMERS warpgroups, clusters) model reads."""

    block_m: int
    block_n: int
    block_k: int
    stages: int
    consumers: int
    cluster_m: int
    cluster_n: int
    split_k: int
    tail_split: int = 0

    @classmethod
    def from_config(cls, config: Any) -> "PersistentTile":
        """Read the tile of a configuration (anything with ``defines()`` and ``id``, e.g. a KernelConfig)."""
        return cls.from_defines(config.defines(), label=f"configuration {config.id}")

    @classmethod
    def from_defines(cls, values: Mapping[str, Any], *, label: str = "a configuration") -> "PersistentTile":
        """Read BLOCK_M/N/K, STAGES, CONSUMERS, CLUSTER_M/N (default 1), SPLIT_K (default 1), TAIL_SPLIT
        (default 0) from -D defines."""
        missing = [n for n in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "STAGES", "CONSUMERS") if n not in values]
        if missing:
            raise ValueError(f"{label} lacks {', '.join(missing)}: the persistent model cannot rank it")
        return cls(
            block_m=int(values["BLOCK_M"]),
            block_n=int(values["BLOCK_N"]),
            block_k=int(values["BLOCK_K"]),
            stages=int(values["STAGES"]),
            consumers=int(values["CONSUMERS"]),
            cluster_m=int(values.get("CLUSTER_M", 1)),
            cluster_n=int(values.get("CLUSTER_N", 1)),
            split_k=int(values.get("SPLIT_K", 1)),
            tail_split=int(values.get("TAIL_SPLIT", 0)),
        )


def tail_split_busiest_s(*, plan: Any, units: int, k_tiles: int, tile_s: float, epilogue_s: float) -> float:
    """The busiest cluster's time with TAIL_SPLIT: its whole tiles, then one split of a last-wave tile.

    The split stores fp32 partials (twice a bf16 tile's bytes); the tile's last split reads the
    others' back before it stores C.
    """
    whole = math.ceil(plan.whole_tiles / units) * (tile_s + epilogue_s)
    if not plan.shared_tiles:
        return whole
    if plan.max_splits == 1:   # a last wave too full to split: its tiles run whole, stored straight to C
        return whole + tile_s + epilogue_s
    fp32 = FP32_BYTES / BF16_BYTES * epilogue_s
    return whole + plan.per_split / k_tiles * tile_s + plan.max_splits * fp32 + epilogue_s


def persistent_rates(*, tile: PersistentTile) -> tuple[float, float, int, float]:
    """What ``persistent_model`` needs of the tile alone: (math rate, TMA feed rate, output bytes per element,
    epilogue store rate)."""
    bm, bn, bk, split_k = tile.block_m, tile.block_n, tile.block_k, tile.split_k
    # Tensor cores: the padded tile at the wgmma rate, derated for a single consumer and bounded
    # by shared-memory reads (both operands come from smem: (64 + n) x 16 x 2 bytes per m64nNk16).
    fill = 1.0 if tile.consumers > 1 else SINGLE_CONSUMER_FRACTION
    smem_bytes_per_flop = (WGMMA_M + bn) / (WGMMA_M * bn)
    rate = min(DEVICE_FLOPS / NUM_SMS * fill, SMEM_BYTES_PER_CLOCK * SM_CLOCK_HZ / smem_bytes_per_flop)
    # TMA feed: STAGES stages in flight sustain a rate, capped by the L2 port.
    in_flight = tile.stages * (bm + bn) * bk * BF16_BYTES
    feed_rate = min(L2_BYTES_PER_CLOCK * SM_CLOCK_HZ, in_flight / MEMORY_LATENCY_S)
    out_element_bytes = BF16_BYTES if split_k == 1 else FP32_BYTES * (1 + split_k)
    epilogue_rate = EPILOGUE_BYTES_PER_CLOCK * SM_CLOCK_HZ
    return rate, feed_rate, out_element_bytes, epilogue_rate


def persistent_model(tile: PersistentTile) -> Callable[[int, int, int], float]:
    """``predict_persistent_seconds`` of one tile as ``f(m, n, k)``: what depends on the tile alone is computed once.

    The shape selector scores a few configurations per new shape at run time (tens of microseconds in
    all), so the per-shape part is kept to integer tile counts and the same float operations, in the
    same order, as a single call: the two give bit-equal times.
    """
    bm, bn, bk = tile.block_m, tile.block_n, tile.block_k
    cm, cn, split_k, tail = tile.cluster_m, tile.cluster_n, tile.split_k, tile.tail_split
    cluster = cm * cn
    max_clusters = NUM_SMS // cluster
    tile_area = 2.0 * bm * bn
    rate, feed_rate, out_element_bytes, epilogue_rate = persistent_rates(tile=tile)

    # Per shape: integer tile counts and the float operations of a single call, in the same order; min / max
    # written as conditionals (the selector calls this per candidate: builtin calls are most of its cost).
    sync_cycles, clock, latency, launch = SYNC_CYCLES_PER_K_STEP, SM_CLOCK_HZ, MEMORY_LATENCY_S, LAUNCH_OVERHEAD_S
    hbm, flops = HBM_BYTES_PER_S, DEVICE_FLOPS

    def seconds(m: int, n: int, k: int) -> float:
        """Predicted time in seconds of the tile on (m, n, k)."""
        items = -(-(-(-m // bm)) // cm) * -(-(-(-n // bn)) // cn) * split_k
        k_tiles = -(-k // bk)
        # The tail split takes every SM its splits can fill (the family's launch).
        clusters = items * k_tiles if tail else items
        if clusters > max_clusters:
            clusters = max_clusters
        if clusters < 1:
            clusters = 1
        k_part = -(-k // split_k)
        tile_flops = tile_area * k_part
        # Each k-tile also costs a full/empty mbarrier handshake the consumers wait through.
        compute_s = tile_flops / rate + -(-k_part // bk) * sync_cycles / clock
        # This block's L2 reads: its slice of a cluster-shared tile; rows past M or N are zero-filled, not read.
        rows_a = bm if bm < m else m
        rows_b = bn if bn < n else n
        feed_s = (rows_a / cn + rows_b / cm) * k_part * BF16_BYTES / feed_rate
        # Between items the consumers store the tile (bf16, or fp32 partials and the last split's sum).
        epilogue_s = rows_a * rows_b * out_element_bytes / epilogue_rate
        tile_s = feed_s if feed_s > compute_s else compute_s
        if tail:
            plan = tail_split_plan(tiles=items, units=clusters, k_tiles=k_tiles, streamk=tail == 2)
            busiest_s = latency + tail_split_busiest_s(plan=plan, units=clusters, k_tiles=k_tiles, tile_s=tile_s,
                                                       epilogue_s=epilogue_s)
        else:
            busiest_s = latency + -(-items // clusters) * (tile_s + epilogue_s)
        output_bytes = split_k * m * n * FP32_BYTES if split_k > 1 else m * n * BF16_BYTES
        memory_s = ((m * k + n * k) * BF16_BYTES + output_bytes) / hbm
        math_s = items * cluster * tile_flops / flops
        device_s = math_s if math_s > memory_s else memory_s
        return (device_s if device_s > busiest_s else busiest_s) + launch

    return seconds


def predict_persistent_seconds(*, tile: PersistentTile, m: int, n: int, k: int) -> float:
    """Predicted time in seconds of a persistent TMA + wgmma kernel (one block per SM)."""
    return persistent_model(tile)(m, n, k)
