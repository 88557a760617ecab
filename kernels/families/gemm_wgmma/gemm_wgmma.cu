// gemm_wgmma: C[M,N] = A[M,K] * B[N,K]^T in bf16 with fp32 accumulation, Hopper only (sm_90a).
//
// Same contract as gemm_mma.cu: A is M x K row-major, B is N x K row-major, C is M x N
// row-major; any M >= 1, N and K multiples of 8 (16-byte global strides for TMA; checked on
// the host by kernels/families.py). Edges need no special loads: TMA fills out-of-range
// elements with zeros, and the epilogue masks its stores.
//
// Structure:
//   * one producer warpgroup (one elected thread) streams BLOCK_M x BLOCK_K and
//     BLOCK_N x BLOCK_K tiles of A and B with TMA (cp.async.bulk.tensor, 128-byte swizzle)
//     into a STAGES-deep ring of shared-memory stages, each guarded by a "full" and an "empty"
//     mbarrier; setmaxnreg gives its registers to the consumers;
//   * CONSUMERS (1-3) warpgroups each own BLOCK_M / CONSUMERS rows of the tile (one or two m64
//     slices) and issue wgmma.mma_async m64nBLOCK_Nk16 straight from shared memory (descriptors built in
//     uniform registers), keeping one k-tile of wgmma in flight while they release the stage before it; setmaxnreg gives the producer's
//     registers to them (two: up to 192 accumulators, 256 x 192 tiles; three: 192-row tiles for
//     M = 129-192 or 333 -> two tiles, at most 96 accumulators: ptxas refuses a wider fragment at 512 threads);
//   * persistent: the grid is at most one block per SM; blocks walk the work items (tiles x
//     SPLIT_K) with a GROUP_M raster (RASTER 0: down M first, 1: along N first) for L2 reuse;
//   * thread-block clusters of CLUSTER_M x CLUSTER_N blocks share operand tiles: A tiles are
//     multicast across the cluster's N direction, B tiles across its M direction, each block
//     loading one slice of the shared tile for all; a stage is reused only when the consumers
//     of every block of the cluster have released it;
//   * SPLIT_K > 1 (skinny M): each split writes its fp32 partial tile to the workspace as its threads
//     hold it (common/splitk.cuh's fragment-native slots: coalesced float4s, one slot per split, tile,
//     consumer and slice); the last split of a tile to finish (per-tile counter) sums them in split
//     order, many loads in flight, and writes C:
//     deterministic, and no second kernel launch. The counters follow the partials in the
//     workspace, start zeroed (the host clears new workspaces) and are reset by that last split;
//   * whole tiles are stored through shared memory: stmatrix writes the accumulator fragment (its
//     native layout) into the consumer's own rows of A in the tile's last stage, held until the store
//     is done, then each warp writes whole 16-byte runs of 128-byte rows (benchmarks/notes_gemm_wgmma.md
//     v13: +1.3-2.2 % at large M, up to +5 % on one-consumer rings, against the in-register transpose),
//     and so is the tile a split finishes (v14: +0.7-4.7 % per split-K / tail-split configuration);
//   * TAIL_SPLIT = 1 (a last wave that would leave SMs idle): the full waves' tiles go whole; each of
//     the R tiles of the last partial wave is split along K into min(U / R, k-tiles, 8) equal runs (U: clusters), all
//     in one last round, split s of every tile on neighbouring clusters (the same k-tiles of a shared
//     panel at the same time), and finished like a split-K tile (Schedule; the host sizes the
//     workspace with the same plan: families/common.py's tail_split_plan).
//
// Tunables are -D defines; combinations that cannot work fail here with a static_assert.

#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "common/hopper.cuh"
#include "common/quad_store.cuh"
#include "common/splitk.cuh"
#include "common/wgmma_ops.cuh"

#if !defined(BLOCK_M) || !defined(BLOCK_N) || !defined(BLOCK_K) || !defined(STAGES) || !defined(CONSUMERS) || \
    !defined(CLUSTER_M) || !defined(CLUSTER_N) || !defined(RASTER) || !defined(GROUP_M) || !defined(SPLIT_K) || \
    !defined(TAIL_SPLIT)
#error "gemm_wgmma.cu needs -DBLOCK_M -DBLOCK_N -DBLOCK_K -DSTAGES -DCONSUMERS -DCLUSTER_M -DCLUSTER_N -DRASTER -DGROUP_M -DSPLIT_K -DTAIL_SPLIT"
#endif

namespace gemm_wgmma_cfg {
constexpr int kThreads = (CONSUMERS + 1) * 128;
constexpr int kWgRows = BLOCK_M / CONSUMERS;           // rows of the tile per consumer warpgroup
constexpr int kSlices = kWgRows / 64;                  // m64 wgmma slices per consumer
constexpr int kAtoms = BLOCK_K / 64;                   // 64-element (128-byte) swizzle atoms per k-tile
constexpr int kAtomBytesA = BLOCK_M * 128;
constexpr int kAtomBytesB = BLOCK_N * 128;
constexpr int kStageBytesA = kAtoms * kAtomBytesA;
constexpr int kStageBytesB = kAtoms * kAtomBytesB;
constexpr int kStageBytes = kStageBytesA + kStageBytesB;
constexpr int kClusterSize = CLUSTER_M * CLUSTER_N;
constexpr int kSliceRowsA = BLOCK_M / CLUSTER_N;       // rows of A each block of a cluster row loads
constexpr int kSliceRowsB = BLOCK_N / CLUSTER_M;       // rows of B each block of a cluster column loads
constexpr int kAlignSlack = 1024;                      // 128-byte swizzle wants 1024-byte aligned stages
constexpr int kBarrierBytes = 1024;                    // full/empty mbarriers and split-K flags
constexpr int kSmemBytes = STAGES * kStageBytes + kAlignSlack + kBarrierBytes;
constexpr int kAccRegs = kSlices * BLOCK_N / 2;        // fp32 accumulators per consumer thread
constexpr int kSlotVecs = BLOCK_N / 8 * 128;           // float4s of one m64 slice's split-K partials
constexpr int kFinishBatch = splitk_finish_batch(kThreads, kAccRegs);  // loads in flight in the split-K sum

static_assert(CONSUMERS >= 1 && CONSUMERS <= 3, "CONSUMERS must be 1, 2 or 3 warpgroups");
static_assert(BLOCK_M % (CONSUMERS * 64) == 0 && (kSlices == 1 || kSlices == 2),
              "BLOCK_M / CONSUMERS must be 64 or 128 (one or two m64 wgmma slices per consumer)");
static_assert(BLOCK_N % 16 == 0 && BLOCK_N >= 32 && BLOCK_N <= 256,
              "BLOCK_N must be a multiple of 16 from 32 to 256 (the wgmma n of one instruction)");
static_assert(BLOCK_K == 64 || BLOCK_K == 128, "BLOCK_K must be 64 or 128 (whole 128-byte swizzle atoms)");
// setmaxnreg moves the producer's registers to the consumers: 40 + 2 x 232 (CUTLASS's split) or, with four
// warpgroups, 24 + 3 x 160 (of 512 per 128-thread slot). ptxas still checks each wgmma against the 128
// registers of 512 threads (an m64n208 fragment does not compile), so three consumers stop at m64n192.
constexpr int kProducerRegs = CONSUMERS == 3 ? 24 : 40;
constexpr int kConsumerRegs = CONSUMERS == 3 ? 160 : 232;
constexpr int kMaxAccRegs = CONSUMERS == 3 ? 96 : 192;
static_assert(kAccRegs <= kMaxAccRegs,
              "consumer tile too large: (BLOCK_M / CONSUMERS) * BLOCK_N / 128 accumulators must be <= 192 (<= 96 with 3 consumers)");
// Up to 16: skinny tiles keep as many bytes in flight as the 227 KB allow (cuBLAS runs 64 x 64 tiles in 13 stages).
static_assert(STAGES >= 2 && STAGES <= 16, "STAGES must be between 2 and 16");
static_assert(2 * STAGES * 8 + 2 * 16 <= kBarrierBytes, "barrier area too small");
static_assert(kSmemBytes <= 232448, "shared memory STAGES*(BLOCK_M+BLOCK_N)*BLOCK_K*2 + 2048 exceeds the 227 KB per-block limit");
static_assert((CLUSTER_M == 1 || CLUSTER_M == 2) && (CLUSTER_N == 1 || CLUSTER_N == 2), "CLUSTER_M and CLUSTER_N must be 1 or 2");
static_assert(kSliceRowsA % 8 == 0 && kSliceRowsB % 8 == 0, "multicast slices must be whole 8-row swizzle atoms");
static_assert(RASTER == 0 || RASTER == 1, "RASTER must be 0 (down M first) or 1 (along N first)");
static_assert(GROUP_M >= 1, "GROUP_M must be at least 1");
static_assert(SPLIT_K >= 1 && SPLIT_K <= 16, "SPLIT_K must be between 1 and 16");
static_assert(TAIL_SPLIT == 0 || TAIL_SPLIT == 1, "TAIL_SPLIT must be 0 or 1");
static_assert(TAIL_SPLIT == 0 || SPLIT_K == 1, "TAIL_SPLIT splits K itself: SPLIT_K must be 1");
constexpr bool kPartials = SPLIT_K > 1 || TAIL_SPLIT == 1;  // some tiles are summed from fp32 partials
// Three consumers keep the in-register store in a kernel with partials: the tail split's 192 x 128 spilled
// 4 bytes with both stores in it.
constexpr bool kStagedStore = !(CONSUMERS == 3 && kPartials);
// The tile that a split finishes is stored staged too (v14): its consumer holds its last stage through the
// split-K count. Two tilings keep the in-register finish: with it ptxas spilled 4-8 bytes for the 64 x 256
// one-consumer tile at SPLIT_K = 4 and the 128 x 192 tail split in 2 x 1 clusters (nvcc 13.0).
constexpr bool kStagedFinish = kStagedStore && kPartials && !(CONSUMERS == 1 && BLOCK_N == 256) &&
                               !(BLOCK_N == 192 && CLUSTER_M * CLUSTER_N > 1);
constexpr int kMaxTailSplits = 8;  // the last split reads the others' partials: more would cost more than they save
#ifdef SMEM_BYTES
static_assert(SMEM_BYTES == kSmemBytes, "SMEM_BYTES define disagrees with the kernel's shared-memory formula");
#endif
#ifdef THREADS
static_assert(THREADS == kThreads, "THREADS define disagrees with (CONSUMERS + 1) * 128");
#endif
}  // namespace gemm_wgmma_cfg

using namespace gemm_wgmma_cfg;

// --- PTX wrappers for clusters (the single-block ones are common/hopper.cuh's) ------------------------

// Arrive on the barrier at the same shared-memory offset in block `cta` of the cluster. Plain
// arrive: with .release.cluster every stage release cost a cluster-scope fence, and clusters
// ran 25 % slower than single blocks (benchmarks/notes_gemm_wgmma.md).
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t cta) {
  if constexpr (kClusterSize == 1) {
    mbar_arrive(bar);
  } else {
    asm volatile(
        "{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
        " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
        "r"(cta)
        : "memory");
  }
}

__device__ __forceinline__ void cluster_sync() {
  if constexpr (kClusterSize > 1) {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  } else {
    __syncthreads();
  }
}

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank = 0;
  if constexpr (kClusterSize > 1) asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

// 2-D tile load (coordinates: element along K, row) completing on `bar` in every block of `mask`.
__device__ __forceinline__ void tma_load_multicast(uint32_t dst, const CUtensorMap* map, uint32_t bar, int k, int row,
                                                   uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;\n"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(k), "r"(row), "h"(mask)
      : "memory");
}

// --- the work-item walk shared by producer and consumers ------------------------------------------

struct WorkItem {
  int tile_m, tile_n;  // this block's tile
  int split;           // which slice of K
  int splits;          // slices of this tile's K (1: the whole tile here, stored straight to C)
  int slot_tile;       // this block tile's place among the tiles with partials (workspace slots, counters)
  int kt_begin, kt_end;
};

struct Schedule {
  int tiles_m, tiles_n, cluster_tiles_m, cluster_tiles_n, k_tiles, per_split, total;
  int units;           // clusters of the persistent grid
  // TAIL_SPLIT: cluster tiles [0, dp_tiles) go whole, round-robin; each of the shared_tiles after them
  // splits into max_splits runs of per_tail k-tiles; run s of shared tile r is cluster s * shared_tiles + r's.
  int dp_tiles, shared_tiles, per_tail, max_splits, slot_tiles;
  uint32_t rank, rank_m, rank_n;

  __device__ Schedule(int M, int N, int K, uint32_t cta_rank, int clusters) {
    tiles_m = (M + BLOCK_M - 1) / BLOCK_M;
    tiles_n = (N + BLOCK_N - 1) / BLOCK_N;
    cluster_tiles_m = (tiles_m + CLUSTER_M - 1) / CLUSTER_M;
    cluster_tiles_n = (tiles_n + CLUSTER_N - 1) / CLUSTER_N;
    k_tiles = (K + BLOCK_K - 1) / BLOCK_K;
    per_split = (k_tiles + SPLIT_K - 1) / SPLIT_K;
    total = cluster_tiles_m * cluster_tiles_n * SPLIT_K;
    units = clusters;
    rank = cta_rank;
    rank_m = cta_rank / CLUSTER_N;
    rank_n = cta_rank % CLUSTER_N;
    shared_tiles = TAIL_SPLIT == 1 ? total % units : 0;
    dp_tiles = total - shared_tiles;
    if (shared_tiles > 0) {
      const int splits = min(min(units / shared_tiles, k_tiles), kMaxTailSplits);
      per_tail = (k_tiles + splits - 1) / splits;
      max_splits = (k_tiles + per_tail - 1) / per_tail;  // no empty run
      slot_tiles = shared_tiles * kClusterSize;
    } else {
      per_tail = k_tiles;
      max_splits = SPLIT_K;
      slot_tiles = tiles_m * tiles_n;
    }
  }

  // How many work items cluster u takes.
  __device__ int count(int u) const {
    const int whole = dp_tiles > u ? (dp_tiles - u + units - 1) / units : 0;
    return whole + (u < shared_tiles * max_splits ? 1 : 0);
  }

  // Cluster u's work item j: its whole tiles first, then (TAIL_SPLIT) its run of a last-wave tile.
  __device__ WorkItem at(int u, int j) const {
    const int whole = dp_tiles > u ? (dp_tiles - u + units - 1) / units : 0;
    if (TAIL_SPLIT == 0 || j < whole) return item(u + j * units);
    const int local = u % shared_tiles;  // which last-wave tile
    WorkItem piece = item(dp_tiles + local);
    piece.split = u / shared_tiles;
    piece.splits = max_splits;
    piece.kt_begin = piece.split * per_tail;
    piece.kt_end = min(k_tiles, piece.kt_begin + per_tail);
    piece.slot_tile = local * kClusterSize + (int)rank;
    return piece;
  }

  // Work item w of the whole-tile order (split-K: tile w / SPLIT_K, split w % SPLIT_K): GROUP_M
  // raster over cluster tiles, then this block's place in it.
  __device__ WorkItem item(int w) const {
    const int tile = w / SPLIT_K;
    const int split = w % SPLIT_K;
    // RASTER 0 walks GROUP_M rows of tiles down M before moving right; RASTER 1 the transpose.
    const int major = RASTER == 0 ? cluster_tiles_m : cluster_tiles_n;
    const int minor = RASTER == 0 ? cluster_tiles_n : cluster_tiles_m;
    const int per_group = GROUP_M * minor;
    const int first = (tile / per_group) * GROUP_M;
    const int rows = min(major - first, GROUP_M);
    const int a = first + (tile % per_group) % rows;
    const int b = (tile % per_group) / rows;
    const int cm = RASTER == 0 ? a : b;
    const int cn = RASTER == 0 ? b : a;
    WorkItem item;
    item.tile_m = cm * CLUSTER_M + (int)rank_m;
    item.tile_n = cn * CLUSTER_N + (int)rank_n;
    item.split = split;
    item.splits = SPLIT_K;
    item.slot_tile = item.tile_m * tiles_n + item.tile_n;
    item.kt_begin = min(k_tiles, split * per_split);
    item.kt_end = min(k_tiles, item.kt_begin + per_split);
    return item;
  }
};

// --- the epilogue ------------------------------------------------------------------------------------

// Element e of the m64nN accumulator of thread t: row 16*warp + lane/4 (+8 for e%4 >= 2),
// column 8*(e/4) + 2*(lane%4) (+1 for odd e). N % 8 == 0, so a column pair is in or out whole.
// bf16 C: each quad writes whole 16-byte runs (common/quad_store.cuh) over every 32 columns; the 16
// columns past the last 32 (BLOCK_N = 144, 176, ...: two 8-column blocks) go as 4-byte pairs.
__device__ __forceinline__ void store_tile_bf16(const float (&acc)[kSlices][BLOCK_N / 2], __nv_bfloat16* __restrict__ C,
                                                int M, int N, int row0, int col0) {
  const int t = threadIdx.x % 128;
  const int lane_row = (t / 32) * 16 + (t % 32) / 4;
#pragma unroll
  for (int s = 0; s < kSlices; ++s) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + s * 64 + lane_row + half * 8;
#pragma unroll
      for (int g = 0; g < BLOCK_N / 32; ++g) {
        uint32_t mine[4];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const int e = (4 * g + b) * 4 + half * 2;
          mine[b] = pack_bf16x2(acc[s][e], acc[s][e + 1]);
        }
        const uint4 run = quad_transpose(mine);
        const int col = col0 + (4 * g + t % 4) * 8;
        if (row < M && col < N) *reinterpret_cast<uint4*>(C + (size_t)row * N + col) = run;
      }
      if constexpr (BLOCK_N % 32 != 0) {
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          const int block = BLOCK_N / 32 * 4 + b;
          const int e = block * 4 + half * 2;
          const int col = col0 + block * 8 + 2 * (t % 4);
          if (row < M && col < N)
            *reinterpret_cast<uint32_t*>(C + (size_t)row * N + col) = pack_bf16x2(acc[s][e], acc[s][e + 1]);
        }
      }
    }
  }
}

// Staged store: each consumer warp writes 16 rows x 64 columns of its part of the tile at a time (2 KB) to its
// own scratch inside this consumer's own rows of A in the held stage (whose wgmma are done; the other consumers
// may still read theirs), 128-byte rows with the 16-byte chunks XOR-swizzled by row (the eight row addresses
// of one stmatrix hit distinct banks), then reads back whole 16-byte runs, eight lanes per row.
constexpr int kEpiCols = 64;
constexpr int kEpiWarpBytes = 16 * 128;
static_assert(4 * kEpiWarpBytes <= kWgRows * 128, "the staged store's scratch must fit in one consumer's rows of A");

// The accumulator fragment of an m64nN wgmma is, per 8 x 8 block, the stmatrix fragment: thread t holds row
// t/4 (+8), columns 2*(t%4), +1 of block j. One stmatrix.x4 writes blocks j, j+1 for both row halves.
__device__ __forceinline__ void store_tile_staged(const float (&acc)[kSlices][BLOCK_N / 2], __nv_bfloat16* __restrict__ C,
                                                  int M, int N, int row0, int col0, uint32_t scratch) {
  const int t = threadIdx.x % 128;
  const int warp = t / 32, lane = t % 32;
  const uint32_t mine = scratch + warp * kEpiWarpBytes;
  const int mat = lane / 8;                            // which matrix this lane addresses
  const int srow = lane % 8 + (mat & 1) * 8;            // matrices 0, 2: rows 0-7; 1, 3: rows 8-15
  const uint32_t row_addr = mine + srow * 128;
  const int chunk0 = mat >> 1;                          // matrices 2, 3: the next 8 columns
#pragma unroll
  for (int s = 0; s < kSlices; ++s) {
#pragma unroll
    for (int c0 = 0; c0 < BLOCK_N; c0 += kEpiCols) {
      constexpr int kPairs = kEpiCols / 16;
#pragma unroll
      for (int q = 0; q < kPairs; ++q) {
        const int j = c0 / 8 + 2 * q;  // first 8-column block of the pair
        if (j < BLOCK_N / 8) {
          stmatrix_x4(row_addr + (((2 * q + chunk0) ^ (srow % 8)) * 16), pack_bf16x2(acc[s][4 * j], acc[s][4 * j + 1]),
                      pack_bf16x2(acc[s][4 * j + 2], acc[s][4 * j + 3]),
                      pack_bf16x2(acc[s][4 * j + 4], acc[s][4 * j + 5]),
                      pack_bf16x2(acc[s][4 * j + 6], acc[s][4 * j + 7]));
        }
      }
      __syncwarp();
      const int width = BLOCK_N - c0 < kEpiCols ? BLOCK_N - c0 : kEpiCols;  // 16, 32, 48 or 64
      const int runs_per_row = width / 8;
#pragma unroll
      for (int k = 0; k < kEpiCols / 16; ++k) {
        const int i = lane + 32 * k;
        if (i < 16 * runs_per_row) {
          const int r = i / runs_per_row, seg = i % runs_per_row;
          const uint4 v = ld_shared_v4(mine + r * 128 + ((seg ^ (r % 8)) * 16));
          const int row = row0 + s * 64 + warp * 16 + r;
          const int col = col0 + c0 + seg * 8;
          if (row < M && col < N) *reinterpret_cast<uint4*>(C + (size_t)row * N + col) = v;
        }
      }
      __syncwarp();
    }
  }
}

// --- the kernel ----------------------------------------------------------------------------------------

// Only a real cluster is launched as one: gemm_wgmma_swap's single blocks ran 5-8 % slower at M >= 112
// with __cluster_dims__(1, 1, 1) than without it (benchmarks/notes_gemm_wgmma_swap.md v4).
#if CLUSTER_M * CLUSTER_N > 1
#define WGMMA_CLUSTER_DIMS __cluster_dims__(kClusterSize, 1, 1)
#else
#define WGMMA_CLUSTER_DIMS
#endif

extern "C" __global__ void __launch_bounds__(kThreads, 1) WGMMA_CLUSTER_DIMS
    gemm_wgmma(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
               __nv_bfloat16* __restrict__ C, float* __restrict__ workspace, int M, int N, int K) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t smem_raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t tiles_addr = (smem_raw_addr + kAlignSlack - 1) & ~uint32_t(kAlignSlack - 1);
  const uint32_t smem_a = tiles_addr;                              // STAGES x [kAtoms][BLOCK_M][64]
  const uint32_t smem_b = tiles_addr + STAGES * kStageBytesA;      // STAGES x [kAtoms][BLOCK_N][64]
  const uint32_t bars = tiles_addr + STAGES * kStageBytes;         // full[STAGES], empty[STAGES]
  unsigned char* bars_generic = smem_raw + (bars - smem_raw_addr);
  int* last_flag = reinterpret_cast<int*>(bars_generic + 2 * STAGES * 8);  // one per consumer
  auto full = [&](int s) { return bars + 8u * s; };
  auto empty = [&](int s) { return bars + 8u * (STAGES + s); };

  // Broadcast from lane 0 so that the compiler knows it warp-uniform (CUTLASS's canonical_warp_group_idx): what
  // derives from it, the consumer's descriptors above all, then lives in uniform registers.
  const int warpgroup = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);
  const uint32_t rank = cluster_rank();
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full(s), 1);
      mbar_init(empty(s), CONSUMERS * kClusterSize);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  cluster_sync();  // barriers initialised in every block before anyone multicasts into them

  const int cluster_id = blockIdx.x / kClusterSize;
  const int clusters = gridDim.x / kClusterSize;
  const Schedule schedule(M, N, K, rank, clusters);
  const int items = schedule.count(cluster_id);

  if (warpgroup == 0) {
    // Producer: one thread issues every TMA load.
    if constexpr (CONSUMERS > 1) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tmap_a)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tmap_b)) : "memory");
      uint16_t mask_a = 0, mask_b = 0;  // A goes to the blocks of this cluster row, B of this column
      for (int j = 0; j < CLUSTER_N; ++j) mask_a |= uint16_t(1u << (schedule.rank_m * CLUSTER_N + j));
      for (int i = 0; i < CLUSTER_M; ++i) mask_b |= uint16_t(1u << (i * CLUSTER_N + schedule.rank_n));
      int stage = 0;
      uint32_t phase = 0;
      for (int j = 0; j < items; ++j) {
        const WorkItem item = schedule.at(cluster_id, j);
        for (int kt = item.kt_begin; kt < item.kt_end; ++kt) {
          mbar_wait(empty(stage), phase ^ 1);  // a fresh barrier counts as released
          mbar_expect_tx(full(stage), kStageBytes);
#pragma unroll
          for (int atom = 0; atom < kAtoms; ++atom) {
            const int k = kt * BLOCK_K + atom * 64;
            const uint32_t dst_a = smem_a + stage * kStageBytesA + atom * kAtomBytesA;
            const uint32_t dst_b = smem_b + stage * kStageBytesB + atom * kAtomBytesB;
            // A shared across the cluster's N direction: block rank_n loads slice rank_n of it
            // for all of them; B likewise across M. Each block receives whole tiles.
            if constexpr (CLUSTER_N > 1) {
              tma_load_multicast(dst_a + schedule.rank_n * kSliceRowsA * 128, &tmap_a, full(stage), k,
                                 item.tile_m * BLOCK_M + schedule.rank_n * kSliceRowsA, mask_a);
            } else {
              tma_load(dst_a, &tmap_a, full(stage), k, item.tile_m * BLOCK_M);
            }
            if constexpr (CLUSTER_M > 1) {
              tma_load_multicast(dst_b + schedule.rank_m * kSliceRowsB * 128, &tmap_b, full(stage), k,
                                 item.tile_n * BLOCK_N + schedule.rank_m * kSliceRowsB, mask_b);
            } else {
              tma_load(dst_b, &tmap_b, full(stage), k, item.tile_n * BLOCK_N);
            }
          }
          if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {
    // Consumers: wgmma over this warpgroup's rows, one k-tile in flight.
    if constexpr (CONSUMERS > 1) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
    const int consumer = warpgroup - 1;
    const int t = threadIdx.x % 128;
    float acc[kSlices][BLOCK_N / 2];
    // Each wgmma's descriptors are these (this consumer's rows of A and all of B, stage 0) plus the operand's byte
    // offset / 16: the address field is (address >> 4) in 14 bits, and every operand lies inside the 227 KB of shared
    // memory, so the add never carries out of it. Built by uniform adds, where smem_desc per wgmma cost ~20 vector
    // instructions and an R2UR each (notes_gemm_wgmma.md, "Descriptors in uniform registers": +0.2-0.8 %).
    const uint64_t desc_a = smem_desc(smem_a + consumer * kWgRows * 128);
    const uint64_t desc_b = smem_desc(smem_b);
    int stage = 0;
    uint32_t phase = 0;
    for (int j = 0; j < items; ++j) {
      const WorkItem item = schedule.at(cluster_id, j);
#pragma unroll
      for (int s = 0; s < kSlices; ++s)
#pragma unroll
        for (int e = 0; e < BLOCK_N / 2; ++e) acc[s][e] = 0.f;
      int previous = -1;
      for (int kt = item.kt_begin; kt < item.kt_end; ++kt) {
        mbar_wait(full(stage), phase);
        wgmma_fence();
        const uint64_t stage_a = desc_a + uint64_t((stage * kStageBytesA) >> 4);
        const uint64_t stage_b = desc_b + uint64_t((stage * kStageBytesB) >> 4);
#pragma unroll
        for (int atom = 0; atom < kAtoms; ++atom) {
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
            for (int s = 0; s < kSlices; ++s) {
              WgmmaN<BLOCK_N>::mma(acc[s], stage_a + uint64_t((atom * kAtomBytesA + s * 64 * 128 + kk * 32) >> 4),
                                   stage_b + uint64_t((atom * kAtomBytesB + kk * 32) >> 4));
            }
          }
        }
        wgmma_commit();
        wgmma_wait<1>();  // the k-tile before this one is done: release its stage
        if (previous >= 0 && t < kClusterSize) mbar_arrive_cluster(empty(previous), t);
        previous = stage;
        if (++stage == STAGES) {
          stage = 0;
          phase ^= 1;
        }
      }
      wgmma_wait<0>();
#pragma unroll
      for (int s = 0; s < kSlices; ++s) fence_registers(acc[s]);
      const bool padding = item.tile_m >= schedule.tiles_m || item.tile_n >= schedule.tiles_n;  // cluster padding
      // A tile's last stage is held as the staged store's scratch and released after the store; a split tile's
      // (kStagedFinish) until the count says whether this split finishes it.
      const bool whole = !kPartials || item.splits == 1;  // stored from this consumer's accumulators alone
      const bool staged = kStagedStore && !padding && previous >= 0 && (whole || kStagedFinish);
      if (!staged && previous >= 0 && t < kClusterSize) mbar_arrive_cluster(empty(previous), t);

      if (padding) continue;
      const int row0 = item.tile_m * BLOCK_M + consumer * kWgRows;
      const int col0 = item.tile_n * BLOCK_N;
      if (staged && whole) {
        store_tile_staged(acc, C, M, N, row0, col0, smem_a + previous * kStageBytesA + consumer * kWgRows * 128);
        // Every warp of this consumer is done with the scratch, and its generic-proxy writes are ordered before
        // the TMA refill (async proxy) of the stage.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        asm volatile("bar.sync %0, 128;\n" ::"r"(consumer + 1) : "memory");
        if (t < kClusterSize) mbar_arrive_cluster(empty(previous), t);
      } else if (whole) {
        store_tile_bf16(acc, C, M, N, row0, col0);
      } else {
        // Fragment-native partials (common/splitk.cuh): one slot per (split, tile, consumer, slice).
        const int lane_row = (t / 32) * 16 + (t % 32) / 4;  // this thread's first row of each m64 slice
        const int tile = item.slot_tile;
        const size_t split_stride = (size_t)schedule.slot_tiles * CONSUMERS * kSlices * kSlotVecs;
        float4* slots = reinterpret_cast<float4*>(workspace) + ((size_t)tile * CONSUMERS + consumer) * kSlices * kSlotVecs;
#pragma unroll
        for (int s = 0; s < kSlices; ++s) splitk_store_fragment(slots + item.split * split_stride + s * kSlotVecs, acc[s], t,
                                                    row0 + s * 64 + lane_row < M);
        // Count this consumer's partials in; the last of the tile's splits sums them all.
        int* counter = reinterpret_cast<int*>(reinterpret_cast<float4*>(workspace) + schedule.max_splits * split_stride) +
                       tile * CONSUMERS + consumer;
        const auto consumer_sync = [consumer] { asm volatile("bar.sync %0, 128;\n" ::"r"(consumer + 1) : "memory"); };
        if (splitk_arrive(counter, item.splits, &last_flag[consumer], t == 0, consumer_sync)) {
#pragma unroll
          for (int s = 0; s < kSlices; ++s)
            splitk_sum_fragment<BLOCK_N / 2, kFinishBatch>(acc[s], slots + s * kSlotVecs, split_stride, item.splits,
                                                           item.split, t, row0 + s * 64 + lane_row < M);
          if (staged) {
            store_tile_staged(acc, C, M, N, row0, col0, smem_a + previous * kStageBytesA + consumer * kWgRows * 128);
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            consumer_sync();
          } else {
            store_tile_bf16(acc, C, M, N, row0, col0);
          }
          if (t == 0) *counter = 0;  // ready for the next launch
        }
        if (staged && t < kClusterSize) mbar_arrive_cluster(empty(previous), t);  // the held stage, finisher or not
      }
    }
  }
  cluster_sync();  // no block leaves while a partner may still multicast into it or arrive on it
}
