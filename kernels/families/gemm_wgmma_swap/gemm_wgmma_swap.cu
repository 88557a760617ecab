// gemm_wgmma_swap: C[M,N] = A[M,K] * B[N,K]^T in bf16 with fp32 accumulation, Hopper only (sm_90a),
// computed as its transpose (swap-AB): C^T = B * A^T, so that the long side N feeds the 64-row
// wgmma and the problem's M becomes the wgmma n, which comes in steps of 8 (8..256). A skinny or
// odd M (M = 77, 144, 200, 333, ...) then fills its tiles: an M of 200 is one n-200 tile, where
// gemm_wgmma pads it to 256 rows of m64 slices.
//
// Same contract as gemm_wgmma.cu: A is M x K row-major, B is N x K row-major, C is M x N
// row-major; any M >= 1, N and K multiples of 8 (16-byte global strides for TMA; checked on the
// host by the family). TMA fills out-of-range rows and columns with zeros; the epilogue masks.
//
// Structure (as gemm_wgmma.cu, without clusters):
//   * one producer thread streams BLOCK_N x BLOCK_K tiles of B and BLOCK_M x BLOCK_K tiles of A
//     with TMA (128-byte swizzle) into a STAGES-deep ring guarded by full/empty mbarriers;
//   * CONSUMERS warpgroups each own BLOCK_N / CONSUMERS rows (problem N) of the C^T tile and
//     issue wgmma m64nBLOCK_Mk16 with B's tile as the "A" operand and A's tile as the "B" operand;
//   * each wgmma's shared-memory descriptors are two built once per consumer plus the operand's offset,
//     in uniform registers (notes_gemm_wgmma_swap.md, v9);
//   * persistent: at most one block per SM walks the work items (N tiles x SPLIT_K x M tiles, M
//     tiles fastest, so the blocks that run together read the same rows of B: L2 reuse);
//   * SPLIT_K > 1: each split stores its fp32 partial tile to the workspace as its threads hold it
//     (common/splitk.cuh's fragment-native slots: coalesced float4s, never out of range), and the
//     last split of a tile to count in sums them in split order, many loads in flight, and writes C:
//     deterministic, one launch.
//   * the last tile of M loads its BLOCK_M rows of A whole 8-row groups higher (never above row 0), so that at
//     most 7 of them lie past M, and the consumers read the tile that many rows further into the stage: TMA's
//     zero fill of rows past M costs more than loading them (notes_gemm_wgmma_swap.md, "Partial M tiles": +9-19 %
//     on the odd-M tiles). A's stages come first in shared memory so that a shifted read of the last stage runs
//     into B's, never past the tiles;
//   * the epilogue writes C transposed. Whole tiles (SPLIT_K = 1) go through shared memory:
//     stmatrix.trans puts each 8 x 8 block of the C^T fragment there as rows of C, inside the
//     consumer's own rows of B in the tile's last stage (held until the store is done), then whole
//     16-byte runs along N go to C (benchmarks/notes_gemm_wgmma_swap.md v7: +2.7-7.3 % per
//     configuration against the 2-byte stores). The split-K finish keeps the 2-byte store: the 8
//     lanes that hold one column of the C^T tile write 8 consecutive elements of one row of C.
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
    !defined(SPLIT_K)
#error "gemm_wgmma_swap.cu needs -DBLOCK_M -DBLOCK_N -DBLOCK_K -DSTAGES -DCONSUMERS -DSPLIT_K"
#endif

namespace gemm_wgmma_swap_cfg {
constexpr int kThreads = (CONSUMERS + 1) * 128;
constexpr int kWgRows = BLOCK_N / CONSUMERS;           // rows of the C^T tile (problem N) per consumer
constexpr int kSlices = kWgRows / 64;                  // m64 wgmma slices per consumer
constexpr int kAtoms = BLOCK_K / 64;                   // 64-element (128-byte) swizzle atoms per k-tile
constexpr int kAtomBytesB = BLOCK_N * 128;             // B's tile: the wgmma A operand
constexpr int kAtomBytesA = BLOCK_M * 128;             // A's tile: the wgmma B operand
constexpr int kStageBytesB = kAtoms * kAtomBytesB;
constexpr int kStageBytesA = kAtoms * kAtomBytesA;
constexpr int kStageBytes = kStageBytesA + kStageBytesB;
constexpr int kAlignSlack = 1024;                      // 128-byte swizzle wants 1024-byte aligned stages
constexpr int kBarrierBytes = 1024;                    // full/empty mbarriers and split-K flags
constexpr int kSmemBytes = STAGES * kStageBytes + kAlignSlack + kBarrierBytes;
constexpr int kAccRegs = kSlices * BLOCK_M / 2;        // fp32 accumulators per consumer thread
constexpr int kSlotVecs = BLOCK_M / 8 * 128;           // float4s of one m64 slice's split-K partials
constexpr int kFinishBatch = splitk_finish_batch(kThreads, kAccRegs);  // loads in flight in the split-K sum

static_assert(CONSUMERS == 1 || CONSUMERS == 2, "CONSUMERS must be 1 or 2 warpgroups");
static_assert(BLOCK_N % (CONSUMERS * 64) == 0 && (kSlices == 1 || kSlices == 2),
              "BLOCK_N / CONSUMERS must be 64 or 128 (one or two m64 wgmma slices per consumer)");
static_assert(BLOCK_M % 8 == 0 && BLOCK_M >= 8 && BLOCK_M <= 256, "BLOCK_M is the wgmma n: a multiple of 8, 8-256");
static_assert(BLOCK_K == 64 || BLOCK_K == 128, "BLOCK_K must be 64 or 128 (whole 128-byte swizzle atoms)");
static_assert(kAccRegs <= 192, "consumer tile too large: (BLOCK_N / CONSUMERS) * BLOCK_M / 128 accumulators must be <= 192");
// The split-K sum batches its partial loads in the registers the accumulators leave: past 128 ptxas spills.
static_assert(SPLIT_K == 1 || kAccRegs <= 128, "split-K tiles hold at most 128 accumulators per consumer thread");
static_assert(STAGES >= 2 && STAGES <= 8, "STAGES must be between 2 and 8");
static_assert(2 * STAGES * 8 + 2 * 16 <= kBarrierBytes, "barrier area too small");
// A shifted tile reads up to BLOCK_M - 8 rows past its stage's A: the last stage's run into B's stages.
static_assert(STAGES * kStageBytesB >= (BLOCK_M - 8) * 128, "a shifted read of A's last stage would leave the tiles");
static_assert(kSmemBytes <= 232448, "shared memory STAGES*(BLOCK_M+BLOCK_N)*BLOCK_K*2 + 2048 exceeds the 227 KB per-block limit");
static_assert(SPLIT_K >= 1 && SPLIT_K <= 16, "SPLIT_K must be between 1 and 16");
#ifdef SMEM_BYTES
static_assert(SMEM_BYTES == kSmemBytes, "SMEM_BYTES define disagrees with the kernel's shared-memory formula");
#endif
#ifdef THREADS
static_assert(THREADS == kThreads, "THREADS define disagrees with (CONSUMERS + 1) * 128");
#endif
}  // namespace gemm_wgmma_swap_cfg

// How many rows higher than tile tile_m's first the A box starts: whole 8-row groups, so that the box
// ends at most 7 rows past M, never above row 0 (0 for whole tiles and for M below one tile).
__device__ __forceinline__ int a_box_shift(int tile_m, int M) {
  const int row0 = tile_m * BLOCK_M;
  const int start = max(0, min(row0, ((M + 7) & ~7) - BLOCK_M));
  return row0 - start;
}

using namespace gemm_wgmma_swap_cfg;

struct SwapItem {
  int tile_m, tile_n, split, kt_begin, kt_end;
};

struct SwapSchedule {
  int tiles_m, tiles_n, k_tiles, per_split, total;

  __device__ SwapSchedule(int M, int N, int K) {
    tiles_m = (M + BLOCK_M - 1) / BLOCK_M;
    tiles_n = (N + BLOCK_N - 1) / BLOCK_N;
    k_tiles = (K + BLOCK_K - 1) / BLOCK_K;
    per_split = (k_tiles + SPLIT_K - 1) / SPLIT_K;
    total = tiles_n * SPLIT_K * tiles_m;
  }

  // Work item w: M tiles fastest, then the K split, then the N tile.
  __device__ SwapItem item(int w) const {
    SwapItem it;
    it.tile_m = w % tiles_m;
    const int rest = w / tiles_m;
    it.split = rest % SPLIT_K;
    it.tile_n = rest / SPLIT_K;
    it.kt_begin = min(k_tiles, it.split * per_split);
    it.kt_end = min(k_tiles, it.kt_begin + per_split);
    return it;
  }
};

// C[m][n] for the C^T tile element (r, c): n = n0 + r, m = m0 + c, masked to the matrix. A thread's
// columns of one row r are 8 apart (c = 8 j + 2 (t % 4) + b): one pointer walks them 8 rows of C at a
// time (M * N fits int32: the family checks it).
__device__ __forceinline__ void store_transposed(const float (&acc)[kSlices][BLOCK_M / 2], int consumer,
                                                 __nv_bfloat16* __restrict__ C, int M, int N, int m0, int n0) {
  const int t = threadIdx.x % 128;
  const int lane_row = (t / 32) * 16 + (t % 32) / 4;
  const int first = m0 + (t % 4) * 2;  // this thread's first column of C^T (a row of C)
#pragma unroll
  for (int s = 0; s < kSlices; ++s) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int n = n0 + consumer * kWgRows + s * 64 + lane_row + half * 8;
      if (n >= N) continue;
      __nv_bfloat16* out = C + (size_t)first * N + n;
      const int left = M - first;  // rows of C from `first` on
#pragma unroll
      for (int j = 0; j < BLOCK_M / 8; ++j) {
        const int e = j * 4 + half * 2;
        if (8 * j < left) out[0] = __float2bfloat16_rn(acc[s][e]);
        if (8 * j + 1 < left) out[N] = __float2bfloat16_rn(acc[s][e + 1]);
        out += 8 * N;
      }
    }
  }
}

// Staged transposed store: per m64 slice, in chunks of 64 columns of C^T (rows m of C), the consumer's four
// warps write their 16 rows of C^T with stmatrix.trans as 16-byte pieces of rows of C (128-byte rows: 64
// values of n, the 16-byte chunks XOR-swizzled by row so that the eight row addresses of one stmatrix hit
// distinct banks) into its own rows of B in the held stage (8 KB), then every thread copies 16-byte runs:
// eight lanes write one whole 128-byte line of a row of C.
constexpr int kEpiRows = 64;  // rows of C (columns of C^T) per chunk
static_assert(kEpiRows * 128 <= kWgRows * 128, "the staged store's chunk must fit in one consumer's rows of B");

// Thread t holds C^T[16 w + t/4 (+8)][8 j + 2 (t%4), +1] of its warp w: the stmatrix fragment of 8 x 8 block
// (j, half); .trans stores the block's column c as the 16 bytes of shared row 8 j + c.
__device__ __forceinline__ void store_transposed_staged(const float (&acc)[kSlices][BLOCK_M / 2], int consumer,
                                                        __nv_bfloat16* __restrict__ C, int M, int N, int m0, int n0,
                                                        uint32_t scratch) {
  const int t = threadIdx.x % 128;
  const int warp = t / 32, lane = t % 32;
  const int mat = lane / 8, r = lane % 8;  // the matrix this lane addresses and its row (a row of C)
  const auto consumer_sync = [consumer] { asm volatile("bar.sync %0, 128;\n" ::"r"(consumer + 1) : "memory"); };
#pragma unroll
  for (int s = 0; s < kSlices; ++s) {
    const int n_slice = n0 + consumer * kWgRows + s * 64;  // this slice's first n
#pragma unroll
    for (int c0 = 0; c0 < BLOCK_M; c0 += kEpiRows) {
      // Write: blocks j = c0/8 .. of this chunk, two per stmatrix.x4 (both halves of each), an odd last one by x2.
#pragma unroll
      for (int q = 0; q < kEpiRows / 16; ++q) {
        const int j = c0 / 8 + 2 * q;
        const int jj = j + (mat >> 1);                      // this lane's block
        const int row = jj * 8 - c0 + r;                    // its shared row (a row of C, chunk-relative)
        const int chunk = 2 * warp + (mat & 1);             // the 16-byte piece of the row: 8 values of n
        const uint32_t addr = scratch + row * 128 + ((chunk ^ (row % 8)) * 16);
        if (j + 1 < BLOCK_M / 8) {
          stmatrix_x4_trans(addr, pack_bf16x2(acc[s][4 * j], acc[s][4 * j + 1]),
                            pack_bf16x2(acc[s][4 * j + 2], acc[s][4 * j + 3]),
                            pack_bf16x2(acc[s][4 * j + 4], acc[s][4 * j + 5]),
                            pack_bf16x2(acc[s][4 * j + 6], acc[s][4 * j + 7]));
        } else if (j < BLOCK_M / 8) {
          stmatrix_x2_trans(addr, pack_bf16x2(acc[s][4 * j], acc[s][4 * j + 1]),
                            pack_bf16x2(acc[s][4 * j + 2], acc[s][4 * j + 3]));  // lanes 0-15 address it
        }
      }
      consumer_sync();
      // Read back: rows of C m0 + c0 .. (at most kEpiRows), 8 runs of 16 bytes each (64 values of n).
      const int rows = BLOCK_M - c0 < kEpiRows ? BLOCK_M - c0 : kEpiRows;
#pragma unroll
      for (int k = 0; k < kEpiRows * 8 / 128; ++k) {
        const int i = t + 128 * k;
        const int row = i / 8, chunk = i % 8;
        if (row < rows) {
          const uint4 v = ld_shared_v4(scratch + row * 128 + ((chunk ^ (row % 8)) * 16));
          const int m = m0 + c0 + row, n = n_slice + chunk * 8;
          if (m < M && n < N) *reinterpret_cast<uint4*>(C + (size_t)m * N + n) = v;
        }
      }
      consumer_sync();
    }
  }
}

extern "C" __global__ void __launch_bounds__(kThreads, 1)
    gemm_wgmma_swap(const __grid_constant__ CUtensorMap tmap_b, const __grid_constant__ CUtensorMap tmap_a,
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

  // Broadcast from lane 0 so that the compiler knows it warp-uniform: the consumer's descriptors then live in
  // uniform registers (as gemm_wgmma.cu, v16).
  const int warpgroup = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full(s), 1);
      mbar_init(empty(s), CONSUMERS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const SwapSchedule schedule(M, N, K);

  if (warpgroup == 0) {
    // Producer: one thread issues every TMA load.
    if constexpr (CONSUMERS == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tmap_b)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tmap_a)) : "memory");
      int stage = 0;
      uint32_t phase = 0;
      for (int w = blockIdx.x; w < schedule.total; w += gridDim.x) {
        const SwapItem item = schedule.item(w);
        const int a_row = item.tile_m * BLOCK_M - a_box_shift(item.tile_m, M);
        for (int kt = item.kt_begin; kt < item.kt_end; ++kt) {
          mbar_wait(empty(stage), phase ^ 1);  // a fresh barrier counts as released
          mbar_expect_tx(full(stage), kStageBytes);
#pragma unroll
          for (int atom = 0; atom < kAtoms; ++atom) {
            const int k = kt * BLOCK_K + atom * 64;
            tma_load(smem_b + stage * kStageBytesB + atom * kAtomBytesB, &tmap_b, full(stage), k, item.tile_n * BLOCK_N);
            tma_load(smem_a + stage * kStageBytesA + atom * kAtomBytesA, &tmap_a, full(stage), k, a_row);
          }
          if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {
    // Consumers: wgmma over this warpgroup's rows of C^T, one k-tile in flight.
    if constexpr (CONSUMERS == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int consumer = warpgroup - 1;
    const int t = threadIdx.x % 128;
    float acc[kSlices][BLOCK_M / 2];
    // Each wgmma's descriptors are these (this consumer's rows of B, all of A; stage 0) plus the operand's byte offset
    // / 16, by uniform adds without R2UR (notes_gemm_wgmma_swap.md, "v9": 18.3 -> 9.9 instructions per HGMMA).
    const uint64_t desc_b = smem_desc(smem_b + consumer * kWgRows * 128);
    int stage = 0;
    uint32_t phase = 0;
    for (int w = blockIdx.x; w < schedule.total; w += gridDim.x) {
      const SwapItem item = schedule.item(w);
#pragma unroll
      for (int s = 0; s < kSlices; ++s)
#pragma unroll
        for (int e = 0; e < BLOCK_M / 2; ++e) acc[s][e] = 0.f;
      // The tile's rows of A start this many rows into the stage; broadcast from lane 0 so that the descriptors stay
      // in uniform registers.
      const int shift = __shfl_sync(0xffffffff, a_box_shift(item.tile_m, M), 0);
      const uint64_t tile_a = smem_desc(smem_a + uint32_t(shift) * 128);
      int previous = -1;
      for (int kt = item.kt_begin; kt < item.kt_end; ++kt) {
        mbar_wait(full(stage), phase);
        wgmma_fence();
        const uint64_t stage_b = desc_b + uint64_t((stage * kStageBytesB) >> 4);
        const uint64_t stage_a = tile_a + uint64_t((stage * kStageBytesA) >> 4);
#pragma unroll
        for (int atom = 0; atom < kAtoms; ++atom) {
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
            for (int s = 0; s < kSlices; ++s) {
              WgmmaN<BLOCK_M>::mma(acc[s], stage_b + uint64_t((atom * kAtomBytesB + s * 64 * 128 + kk * 32) >> 4),
                                   stage_a + uint64_t((atom * kAtomBytesA + kk * 32) >> 4));
            }
          }
        }
        wgmma_commit();
        wgmma_wait<1>();  // the k-tile before this one is done: release its stage
        if (previous >= 0 && t == 0) mbar_arrive(empty(previous));
        previous = stage;
        if (++stage == STAGES) {
          stage = 0;
          phase ^= 1;
        }
      }
      wgmma_wait<0>();
#pragma unroll
      for (int s = 0; s < kSlices; ++s) fence_registers(acc[s]);
      // A whole tile's last stage is held as the staged store's scratch and released after the store.
      if (SPLIT_K > 1 && previous >= 0 && t == 0) mbar_arrive(empty(previous));

      const int m0 = item.tile_m * BLOCK_M;
      const int n0 = item.tile_n * BLOCK_N;
      if constexpr (SPLIT_K == 1) {  // K >= 8: every whole tile has a last k-tile, so previous >= 0
        store_transposed_staged(acc, consumer, C, M, N, m0, n0, smem_b + previous * kStageBytesB + consumer * kWgRows * 128);
        // The consumer's generic-proxy writes to the scratch are ordered before the TMA refill (async proxy).
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        asm volatile("bar.sync %0, 128;\n" ::"r"(consumer + 1) : "memory");
        if (t == 0) mbar_arrive(empty(previous));
      } else {
        // Fragment-native partials (common/splitk.cuh): one slot per (split, tile, consumer, slice).
        const int lane_row = (t / 32) * 16 + (t % 32) / 4;  // this thread's first row of each m64 slice
        const int tile = item.tile_n * schedule.tiles_m + item.tile_m;
        const size_t split_stride = (size_t)schedule.tiles_n * schedule.tiles_m * CONSUMERS * kSlices * kSlotVecs;
        float4* slots = reinterpret_cast<float4*>(workspace) + ((size_t)tile * CONSUMERS + consumer) * kSlices * kSlotVecs;
#pragma unroll
        for (int s = 0; s < kSlices; ++s) splitk_store_fragment(slots + item.split * split_stride + s * kSlotVecs, acc[s], t,
                                                    n0 + consumer * kWgRows + s * 64 + lane_row < N);
        int* counter = reinterpret_cast<int*>(reinterpret_cast<float4*>(workspace) + SPLIT_K * split_stride) +
                       tile * CONSUMERS + consumer;
        const auto consumer_sync = [consumer] { asm volatile("bar.sync %0, 128;\n" ::"r"(consumer + 1) : "memory"); };
        if (splitk_arrive(counter, SPLIT_K, &last_flag[consumer], t == 0, consumer_sync)) {
#pragma unroll
          for (int s = 0; s < kSlices; ++s)
            splitk_sum_fragment<BLOCK_M / 2, kFinishBatch>(acc[s], slots + s * kSlotVecs, split_stride, SPLIT_K, item.split, t,
                                n0 + consumer * kWgRows + s * 64 + lane_row < N);
          store_transposed(acc, consumer, C, M, N, m0, n0);
          if (t == 0) *counter = 0;  // ready for the next launch
        }
      }
    }
  }
  __syncthreads();
}
