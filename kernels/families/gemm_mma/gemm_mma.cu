// gemm_mma: C[M,N] = A[M,K] * B[N,K]^T in bf16 with fp32 accumulation (tensor cores, mma.sync).
//
// A is M x K row-major, B is N x K row-major (a linear layer's weight), C is M x N row-major.
// Any M >= 1; N and K multiples of 8 (checked on the host by kernels/families.py), so every
// 16-byte chunk of a row is either wholly inside or wholly outside the matrix.
//
// Structure (classic Ampere-style, runs on sm_90a):
//   * a block computes a BLOCK_M x BLOCK_N tile; WARPS_M x WARPS_N warps each own a
//     (BLOCK_M/WARPS_M) x (BLOCK_N/WARPS_N) sub-tile of m16n8k16 accumulators;
//   * WARPS_K > 1 ("sliced K") repeats that warp layout WARPS_K times, each slice taking its
//     share of every k-tile's k16 steps; the slices' accumulators are summed in slice order
//     through shared memory after the last k-tile. For skinny M, where a warp has few MMAs per
//     loaded byte, this puts more warps (latency hiding, load issue) on the same tile without
//     narrowing it, so B is still read once per M tile;
//   * STAGES-deep cp.async pipeline into XOR-swizzled shared memory (conflict-free ldmatrix);
//     rows or k-chunks outside the matrix are zero-filled (cp.async src-size 0); each thread's
//     copy addresses are set up once (a fixed chunk column, rows a constant stride apart), so a
//     k-tile costs one add and a compare per 16-byte copy;
//   * GROUP_M raster swizzle of the block index for L2 reuse;
//   * SPLIT_K > 1: blockIdx.z owns a slice of K and writes fp32 partials to workspace
//     [SPLIT_K, M, N]; the last split of a tile to finish (per-tile counter) sums them in split
//     order and writes C: deterministic, and no second kernel launch (a reduction kernel cost
//     skinny shapes a kernel boundary, 1-2 us of a 14 us GEMM). The counters follow the
//     partials in the workspace, start zeroed (the host clears new workspaces) and are reset by
//     that last split.
//
// Tunables are -D defines. Values that cannot work fail here with a static_assert.

#include <cuda_bf16.h>
#include <stdint.h>

#include "common/quad_store.cuh"
#include "common/splitk.cuh"

#if !defined(BLOCK_M) || !defined(BLOCK_N) || !defined(BLOCK_K) || !defined(WARPS_M) || \
    !defined(WARPS_N) || !defined(WARPS_K) || !defined(STAGES) || !defined(SPLIT_K) || !defined(GROUP_M)
#error "gemm_mma.cu needs -DBLOCK_M -DBLOCK_N -DBLOCK_K -DWARPS_M -DWARPS_N -DWARPS_K -DSTAGES -DSPLIT_K -DGROUP_M"
#endif

namespace gemm_mma_cfg {
constexpr int kWarpsMN = WARPS_M * WARPS_N;            // warps of one k slice
constexpr int kThreads = kWarpsMN * WARPS_K * 32;
constexpr int kWarpM = BLOCK_M / WARPS_M;               // rows of C per warp
constexpr int kWarpN = BLOCK_N / WARPS_N;               // columns of C per warp
constexpr int kMmaM = kWarpM / 16;                      // m16 fragments per warp
constexpr int kMmaN = kWarpN / 8;                       // n8 fragments per warp
constexpr int kChunks = BLOCK_K / 8;                    // 16-byte chunks per smem row
constexpr int kStageA = BLOCK_M * BLOCK_K;              // bf16 elements per stage
constexpr int kStageB = BLOCK_N * BLOCK_K;
constexpr int kSmemBytes = STAGES * (kStageA + kStageB) * 2;
constexpr int kAccRegs = kMmaM * kMmaN * 4;             // fp32 accumulators per thread
constexpr int kSteps = BLOCK_K / 16;                    // k16 steps per k-tile
constexpr int kSliceSteps = kSteps / WARPS_K;           // k16 steps per k slice
#ifndef TT_CROSS_TILE
#define TT_CROSS_TILE 1
#endif
// The next k-tile's first fragments load during the last k16 step. Needs an even step count (so
// that they land in buffer 0, where step 0 reads them) and registers for both fragment sets live
// across the barrier and the refill's copies next to the accumulators (+32 for addresses and
// indices): 512-thread blocks get 128 registers each and spill with 64 x 32 warp tiles otherwise.
// TT_CROSS_TILE=0 switches it off for A/B measurements (benchmarks/probes/).
constexpr int kFragRegs = kMmaM * 4 + kMmaN * 2;
constexpr int kRegCap = 65536 / kThreads < 255 ? 65536 / kThreads : 255;
constexpr bool kCrossTile = TT_CROSS_TILE && kSliceSteps % 2 == 0 && kAccRegs + 2 * kFragRegs + 32 <= kRegCap;
constexpr int kReduceBytes = (WARPS_K - 1) * BLOCK_M * BLOCK_N * 4;  // other slices' fp32 tiles

static_assert(BLOCK_M > 0 && BLOCK_N > 0 && BLOCK_K > 0, "BLOCK_M, BLOCK_N, BLOCK_K must be positive");
static_assert(WARPS_M > 0 && WARPS_N > 0 && WARPS_K > 0, "WARPS_M, WARPS_N and WARPS_K must be positive");
static_assert(BLOCK_M % (WARPS_M * 16) == 0, "BLOCK_M must be a multiple of WARPS_M * 16 (m16 fragments)");
static_assert(BLOCK_N % (WARPS_N * 16) == 0, "BLOCK_N must be a multiple of WARPS_N * 16 (ldmatrix.x4 loads two n8 fragments)");
static_assert(BLOCK_K == 16 || BLOCK_K == 32 || BLOCK_K == 64 || BLOCK_K == 128, "BLOCK_K must be 16, 32, 64 or 128 (swizzle pattern)");
static_assert(kSteps % WARPS_K == 0, "BLOCK_K / 16 must be a multiple of WARPS_K (each k slice owns whole k16 steps)");
static_assert(kReduceBytes <= kSmemBytes, "sliced-K reduction (WARPS_K-1)*BLOCK_M*BLOCK_N*4 bytes exceeds the pipeline's shared memory");
static_assert(STAGES >= 2 && STAGES <= 8, "STAGES must be between 2 and 8");
static_assert(SPLIT_K >= 1 && SPLIT_K <= 64, "SPLIT_K must be between 1 and 64");
static_assert(GROUP_M >= 1, "GROUP_M must be at least 1");
static_assert(kThreads <= 1024, "WARPS_M * WARPS_N * WARPS_K * 32 must not exceed 1024 threads per block");
static_assert(kAccRegs <= 128, "warp tile too large: (BLOCK_M/WARPS_M)*(BLOCK_N/WARPS_N)/32 accumulators per thread must be <= 128");
static_assert(kSmemBytes <= 232448, "shared memory STAGES*(BLOCK_M+BLOCK_N)*BLOCK_K*2 exceeds the 227 KB per-block limit");
#ifdef SMEM_BYTES
static_assert(SMEM_BYTES == kSmemBytes, "SMEM_BYTES define disagrees with the kernel's shared-memory formula");
#endif
#ifdef THREADS
static_assert(THREADS == kThreads, "THREADS define disagrees with WARPS_M * WARPS_N * WARPS_K * 32");
#endif
}  // namespace gemm_mma_cfg

using namespace gemm_mma_cfg;

// Element offset of (row, 16-byte chunk) inside one tile: XOR swizzle so that the 8 rows an
// ldmatrix phase reads at the same logical chunk land in 8 different 16-byte bank groups.
__device__ __forceinline__ int swizzled(int row, int chunk) {
  int phys;
  if constexpr (kChunks >= 8) {
    phys = chunk ^ (row & 7);
  } else {
    constexpr int kRowsPerSwizzle = kChunks >= 8 ? 1 : 8 / kChunks;  // never 0, even where this branch is discarded
    phys = chunk ^ ((row / kRowsPerSwizzle) & (kChunks - 1));
  }
  return row * BLOCK_K + phys * 8;
}

#ifndef TT_L2_PREFETCH
#define TT_L2_PREFETCH 0
#endif
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;  // 0: zero-fill, nothing is read
#if TT_L2_PREFETCH == 256
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
#elif TT_L2_PREFETCH == 128
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
#endif
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One thread's share of copying k-tiles of rows [row0, row0 + ROWS) of a row-major
// [rows_total, K] matrix into a swizzled tile. kThreads is a multiple of kChunks, so the thread
// always copies the same 16-byte chunk column, in rows kRowStep apart; and kRowStep is a multiple
// of 8 rows, so all its rows share one swizzle phase and sit kRowStep * BLOCK_K elements apart in
// the tile. Set up once per block; a k-tile then costs an add and a compare per copy.
template <int ROWS>
struct TileCopy {
  static constexpr int kRowStep = kThreads / kChunks;
  static constexpr int kCopies = (ROWS + kRowStep - 1) / kRowStep;
  // Tiles and thread counts are powers of two: either whole passes of kRowStep rows (a multiple
  // of 8) or one partial pass.
  static_assert(kThreads % kChunks == 0 && kRowStep % 8 == 0 && (ROWS % kRowStep == 0 || ROWS < kRowStep),
                "copy layout: each thread needs a fixed chunk column and rows in one swizzle phase");

  const __nv_bfloat16* src;  // this thread's first row, its chunk column, k-tile 0
  int rows_left;             // rows of the matrix at and below that row (<= 0: none)
  int row_stride;            // kRowStep rows, in elements
  int k_col;                 // the chunk's first column within a k-tile
  uint32_t dst_offset;       // bytes into the tile of the first row's chunk
  bool active;               // the thread's row is inside the tile (matters when ROWS < kRowStep)

  __device__ __forceinline__ TileCopy(const __nv_bfloat16* __restrict__ g, int row0, int rows_total, int K, int tid) {
    const int row = tid / kChunks;
    const int chunk = tid % kChunks;
    k_col = chunk * 8;
    active = row < ROWS;
    rows_left = rows_total - row0 - row;
    row_stride = kRowStep * K;
    src = g + (size_t)(row0 + row) * K + k_col;
    dst_offset = swizzled(row, chunk) * 2;
  }

  __device__ __forceinline__ void copy(uint32_t smem_tile, const __nv_bfloat16* __restrict__ g, int K, int kt) const {
    const int k0 = kt * BLOCK_K;
    const bool k_in = k0 + k_col < K;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      if (ROWS >= kRowStep || active) {
        const bool valid = k_in && i * kRowStep < rows_left;
        const __nv_bfloat16* from = valid ? src + i * row_stride + k0 : g;  // a zero-fill reads nothing
        cp_async16(smem_tile + dst_offset + i * kRowStep * BLOCK_K * 2, from, valid);
      }
    }
  }
};

// A and B fragments of one k16 step of a warp's sub-tile (ldmatrix.x4, swizzled addresses).
__device__ __forceinline__ void load_fragments(uint32_t (&a_frag)[kMmaM][4], uint32_t (&b_frag)[kMmaN][2],
                                               uint32_t tile_a, uint32_t tile_b, int ks, int a_row, int a_chunk,
                                               int b_row, int b_chunk) {
#pragma unroll
  for (int i = 0; i < kMmaM; ++i) {
    ldmatrix_x4(a_frag[i], tile_a + swizzled(a_row + i * 16, ks * 2 + a_chunk) * 2);
  }
#pragma unroll
  for (int j = 0; j < kMmaN / 2; ++j) {
    uint32_t r[4];
    ldmatrix_x4(r, tile_b + swizzled(b_row + j * 16, ks * 2 + b_chunk) * 2);
    b_frag[2 * j][0] = r[0];
    b_frag[2 * j][1] = r[1];
    b_frag[2 * j + 1][0] = r[2];
    b_frag[2 * j + 1][1] = r[3];
  }
}

// Visit this thread's in-range accumulator pairs: fn(row, col, v0, v1) for columns col, col + 1
// (N % 8 == 0, so a pair is in or out whole).
template <typename Fn>
__device__ __forceinline__ void for_each_pair(float (&acc)[kMmaM][kMmaN][4], int row_base, int col_base, int M, int N,
                                              Fn&& fn) {
#pragma unroll
  for (int i = 0; i < kMmaM; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row_base + i * 16 + half * 8;
      if (row >= M) continue;
#pragma unroll
      for (int j = 0; j < kMmaN; ++j) {
        const int col = col_base + j * 8;
        if (col < N) fn(row, col, acc[i][j][half * 2], acc[i][j][half * 2 + 1]);
      }
    }
  }
}

// bf16 C from the accumulators. With whole groups of four n8 blocks per warp, each quad trades
// its pairs so that a thread writes one 16-byte run (common/quad_store.cuh); else one pair each.
__device__ __forceinline__ void store_c_bf16(float (&acc)[kMmaM][kMmaN][4], __nv_bfloat16* __restrict__ C, int row_base,
                                             int col_base, int M, int N) {
  if constexpr (kMmaN % 4 == 0) {
    const int lane = threadIdx.x & 31;
    const int block_col = col_base - (lane & 3) * 2;  // the warp's first column
#pragma unroll
    for (int i = 0; i < kMmaM; ++i) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row_base + i * 16 + half * 8;
#pragma unroll
        for (int g = 0; g < kMmaN / 4; ++g) {
          uint32_t mine[4];
#pragma unroll
          for (int b = 0; b < 4; ++b) mine[b] = pack_bf16x2(acc[i][4 * g + b][half * 2], acc[i][4 * g + b][half * 2 + 1]);
          const uint4 run = quad_transpose(mine);  // every lane shuffles, rows in or out
          const int col = block_col + (4 * g + (lane & 3)) * 8;
          if (row < M && col < N) *reinterpret_cast<uint4*>(C + (size_t)row * N + col) = run;
        }
      }
    }
  } else {
    for_each_pair(acc, row_base, col_base, M, N, [&](int row, int col, float& v0, float& v1) {
      *reinterpret_cast<__nv_bfloat162*>(C + (size_t)row * N + col) = __floats2bfloat162_rn(v0, v1);
    });
  }
}

// Sum the k slices' accumulators into slice 0's, in slice order (deterministic), through the
// pipeline's shared memory: free once every copy has landed and every warp left the main loop.
__device__ __forceinline__ void reduce_k_slices(float (&acc)[kMmaM][kMmaN][4], float* red, int warp_k, int warp_mn,
                                                int lane) {
  __syncthreads();  // every slice is done reading the last k-tile
  if (warp_k > 0) {
    float* mine = red + ((warp_k - 1) * kWarpsMN + warp_mn) * kAccRegs * 32 + lane;  // lane-contiguous: no conflicts
#pragma unroll
    for (int i = 0; i < kMmaM; ++i)
#pragma unroll
      for (int j = 0; j < kMmaN; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) mine[((i * kMmaN + j) * 4 + e) * 32] = acc[i][j][e];
  }
  __syncthreads();
  if (warp_k == 0) {
#pragma unroll 1
    for (int slice = 1; slice < WARPS_K; ++slice) {
      const float* theirs = red + ((slice - 1) * kWarpsMN + warp_mn) * kAccRegs * 32 + lane;
#pragma unroll
      for (int i = 0; i < kMmaM; ++i)
#pragma unroll
        for (int j = 0; j < kMmaN; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][j][e] += theirs[((i * kMmaN + j) * 4 + e) * 32];
    }
  }
}

extern "C" __global__ void __launch_bounds__(kThreads, 1)
    gemm_mma(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B, __nv_bfloat16* __restrict__ C,
             float* __restrict__ workspace, int M, int N, int K) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t smem_a = smem_base;
  const uint32_t smem_b = smem_base + STAGES * kStageA * 2;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warp_k = warp / kWarpsMN;  // the k slice; slice 0 owns the epilogue
  const int warp_mn = warp % kWarpsMN;
  const int warp_m = warp_mn / WARPS_N;
  const int warp_n = warp_mn % WARPS_N;

  // GROUP_M raster: walk GROUP_M row-tiles down before moving right, so B tiles stay in L2.
  const int tiles_m = (M + BLOCK_M - 1) / BLOCK_M;
  const int tiles_n = (N + BLOCK_N - 1) / BLOCK_N;
  const int pid = blockIdx.x;
  const int per_group = GROUP_M * tiles_n;
  const int first_m = (pid / per_group) * GROUP_M;
  const int group_rows = min(tiles_m - first_m, GROUP_M);
  const int tile_m = first_m + (pid % per_group) % group_rows;
  const int tile_n = (pid % per_group) / group_rows;
  const int m0 = tile_m * BLOCK_M;
  const int n0 = tile_n * BLOCK_N;

  // This split's k-tiles (an empty range still writes its zero partials).
  const int k_tiles = (K + BLOCK_K - 1) / BLOCK_K;
  const int per_split = (k_tiles + SPLIT_K - 1) / SPLIT_K;
  const int kt_begin = min(k_tiles, (int)blockIdx.z * per_split);
  const int kt_end = min(k_tiles, kt_begin + per_split);
  const int n_tiles = kt_end - kt_begin;

  float acc[kMmaM][kMmaN][4];
#pragma unroll
  for (int i = 0; i < kMmaM; ++i)
#pragma unroll
    for (int j = 0; j < kMmaN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

  const TileCopy<BLOCK_M> copy_a(A, m0, M, K, tid);
  const TileCopy<BLOCK_N> copy_b(B, n0, N, K, tid);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < n_tiles) {
      copy_a.copy(smem_a + s * kStageA * 2, A, K, kt_begin + s);
      copy_b.copy(smem_b + s * kStageB * 2, B, K, kt_begin + s);
    }
    cp_async_commit();
  }

  // ldmatrix lane addressing (row within a 16-row fragment, chunk within a k16 step).
  const int a_row = warp_m * kWarpM + (lane & 15);
  const int a_chunk = lane >> 4;
  const int b_row = warp_n * kWarpN + (lane & 7) + ((lane >> 4) << 3);
  const int b_chunk = (lane >> 3) & 1;

  // Fragments double-buffered across k16 steps: ldmatrix for step ks+1 is issued before the
  // mma.sync of step ks, so shared-memory latency hides behind tensor-core work. Slice warp_k
  // takes steps [warp_k * kSliceSteps, (warp_k + 1) * kSliceSteps) of every k-tile. With
  // kCrossTile the last step of a k-tile already waits for the next k-tile and loads its first
  // fragments, so the barrier and that first ldmatrix overlap the last step's MMAs.
  const int step0 = warp_k * kSliceSteps;
  uint32_t a_frag[2][kMmaM][4];
  uint32_t b_frag[2][kMmaN][2];
  int read_stage = 0;
  int write_stage = STAGES - 1;
  if constexpr (kCrossTile) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // k-tile 0 visible to all
    load_fragments(a_frag[0], b_frag[0], smem_a, smem_b, step0, a_row, a_chunk, b_row, b_chunk);
  }
  for (int t = 0; t < n_tiles; ++t) {
    if constexpr (!kCrossTile) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // tile t visible to all; stage written below was fully consumed at t-1
    }
    // Into the stage k-tile t-1 used: every warp passed a barrier after its last read of it.
    const int next = t + STAGES - 1;
    if (next < n_tiles) {
      copy_a.copy(smem_a + write_stage * kStageA * 2, A, K, kt_begin + next);
      copy_b.copy(smem_b + write_stage * kStageB * 2, B, K, kt_begin + next);
    }
    cp_async_commit();

    const uint32_t tile_a = smem_a + read_stage * kStageA * 2;
    const uint32_t tile_b = smem_b + read_stage * kStageB * 2;
    read_stage = (read_stage + 1 == STAGES) ? 0 : read_stage + 1;
    write_stage = (write_stage + 1 == STAGES) ? 0 : write_stage + 1;
    if constexpr (!kCrossTile) load_fragments(a_frag[0], b_frag[0], tile_a, tile_b, step0, a_row, a_chunk, b_row, b_chunk);
#pragma unroll
    for (int ks = 0; ks < kSliceSteps; ++ks) {
      if (ks + 1 < kSliceSteps) {
        load_fragments(a_frag[(ks + 1) & 1], b_frag[(ks + 1) & 1], tile_a, tile_b, step0 + ks + 1, a_row, a_chunk,
                       b_row, b_chunk);
      } else if (kCrossTile && t + 1 < n_tiles) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // k-tile t+1 visible to all; every warp is past its reads of k-tile t
        load_fragments(a_frag[0], b_frag[0], smem_a + read_stage * kStageA * 2, smem_b + read_stage * kStageB * 2,
                       step0, a_row, a_chunk, b_row, b_chunk);
      }
#pragma unroll
      for (int i = 0; i < kMmaM; ++i)
#pragma unroll
        for (int j = 0; j < kMmaN; ++j) {
          // Serpentine over j keeps one B fragment hot between consecutive mma.sync.
          const int jj = (i & 1) ? kMmaN - 1 - j : j;
          mma_bf16(acc[i][jj], a_frag[ks & 1][i], b_frag[ks & 1][jj][0], b_frag[ks & 1][jj][1]);
        }
    }
  }
  cp_async_wait<0>();
  if constexpr (WARPS_K > 1) reduce_k_slices(acc, reinterpret_cast<float*>(smem_raw), warp_k, warp_mn, lane);
  const bool owner = warp_k == 0;  // slice 0 holds the tile's sum; the others only join the barriers

  // Epilogue: each thread owns pairs of adjacent columns; N % 8 == 0 so a pair is in or out whole.
  const int row_base = m0 + warp_m * kWarpM + (lane >> 2);
  const int col_base = n0 + warp_n * kWarpN + (lane & 3) * 2;
  if constexpr (SPLIT_K > 1) {
    const int split = blockIdx.z;
    if (owner) {
      for_each_pair(acc, row_base, col_base, M, N, [&](int row, int col, float& v0, float& v1) {
        splitk_store_pair(workspace, split, M, N, row, col, v0, v1);
      });
    }
    int* counter = splitk_counters(workspace, SPLIT_K, M, N) + tile_m * tiles_n + tile_n;
    int* last_flag = reinterpret_cast<int*>(smem_raw);  // the tiles (and slice sums) are consumed by its first barrier
    if (!splitk_arrive(counter, SPLIT_K, last_flag, tid == 0, [] { __syncthreads(); })) return;
    if (owner) {
      for_each_pair(acc, row_base, col_base, M, N, [&](int row, int col, float& v0, float& v1) {
        const float2 sum = splitk_sum_pair(workspace, SPLIT_K, split, M, N, row, col, make_float2(v0, v1));
        v0 = sum.x;
        v1 = sum.y;
      });
    }
    if (tid == 0) *counter = 0;  // ready for the next launch
  }
  if (owner) store_c_bf16(acc, C, row_base, col_base, M, N);
}
