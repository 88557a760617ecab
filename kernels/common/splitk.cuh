// Split-K in one launch, shared by the GEMM kernels. Every split of a tile stores its fp32
// partials to workspace [splits, M, N]; a per-tile counter after the partials counts the splits
// in, and the split that arrives last sums all partials in split order (its own straight from
// registers: the bits it stored) and writes C. Deterministic, no second kernel. The counters
// start zeroed (the host clears a new workspace) and the last split resets its tile's to zero.
#pragma once
#include <stdint.h>

__device__ __forceinline__ int* splitk_counters(float* workspace, int splits, int M, int N) {
  return reinterpret_cast<int*>(workspace + (size_t)splits * M * N);
}

// Count one thread group's partials in, after every thread of the group stored its share;
// returns, uniformly across the group, whether it arrived last. `sync` is the group's barrier,
// `flag` a shared int of the group and `leader` true in exactly one of its threads.
template <typename Sync>
__device__ __forceinline__ bool splitk_arrive(int* counter, int splits, int* flag, bool leader, Sync&& sync) {
  __threadfence();  // this thread's partials are visible GPU-wide before the group counts in
  sync();
  if (leader) *flag = atomicAdd(counter, 1) == splits - 1;
  sync();
  const bool last = *flag != 0;
  sync();  // every thread read the flag before the group may write it again (persistent kernels)
  if (last) __threadfence();  // the other splits' partials are read after their counts
  return last;
}

// The split-order sum of one column pair (row, col), col+1 over every split's partials.
__device__ __forceinline__ float2 splitk_sum_pair(const float* __restrict__ workspace, int splits, int own_split,
                                                  int M, int N, int row, int col, float2 own) {
  float2 sum = make_float2(0.f, 0.f);
  for (int split = 0; split < splits; ++split) {
    const float2 part =
        split == own_split ? own : __ldcg(reinterpret_cast<const float2*>(workspace + ((size_t)split * M + row) * N + col));
    sum.x += part.x;
    sum.y += part.y;
  }
  return sum;
}

__device__ __forceinline__ void splitk_store_pair(float* __restrict__ workspace, int split, int M, int N, int row,
                                                  int col, float v0, float v1) {
  *reinterpret_cast<float2*>(workspace + ((size_t)split * M + row) * N + col) = make_float2(v0, v1);
}

// --- fragment-native split-K (the TMA + wgmma kernels) ------------------------------------------------
// A consumer warpgroup stores its partial tile as its 128 threads hold it: float4 v of thread t
// at slot[v * 128 + t], one slot per (split, tile, consumer, m64 slice), so stores and loads are
// whole 16-byte words, coalesced, and every split's element e of thread t lines up with the own
// split's. The last split then reads each other split's partials kBatch float4s at a time, all in
// flight together, where the pair-by-pair sum above keeps two loads in flight and its latency chain
// capped split-K (benchmarks/notes_gemm_wgmma_swap.md). The sum is in split order from 0.f, the
// same additions as splitk_sum_pair: deterministic whichever split arrives last.

// `live`: whether thread t's rows of the slice are in the matrix (rows past M are never stored or read:
// a skinny M would otherwise move whole padded tiles).
// float4s of another split's partials to keep in flight in splitk_sum_fragment: what the registers
// of a thread (65536 per block, at most 255) leave beside the accumulators, at about 6 per float4
// (a batch of loads, one of sums, addresses); ptxas confirms no spills on every tile of both grids
// (tests/test_gemm_wgmma_nvcc.py, tests/test_gemm_wgmma_swap_nvcc.py).
constexpr int splitk_finish_batch(int threads, int acc_regs) {
  const int cap = (65536 / threads) / 8 * 8 < 255 ? (65536 / threads) / 8 * 8 : 255;
  const int batch = (cap - acc_regs) / 6;
  return batch < 1 ? 1 : batch > 16 ? 16 : batch;
}

template <int kFloats>
__device__ __forceinline__ void splitk_store_fragment(float4* __restrict__ slot, const float (&acc)[kFloats], int t,
                                                      bool live) {
  static_assert(kFloats % 4 == 0, "a fragment is whole float4s");
  if (!live) return;
#pragma unroll
  for (int v = 0; v < kFloats / 4; ++v)
    __stcg(slot + v * 128 + t, make_float4(acc[4 * v], acc[4 * v + 1], acc[4 * v + 2], acc[4 * v + 3]));
}

// Load float4s v0 .. v0 + kBatch - 1 of thread t from one split's slot: kBatch loads in flight.
template <int kFloats, int kBatch>
__device__ __forceinline__ void splitk_load_batch(float4 (&part)[kBatch], const float4* __restrict__ slot, int v0, int t) {
#pragma unroll
  for (int b = 0; b < kBatch; ++b)
    part[b] = v0 + b < kFloats / 4 ? __ldcg(slot + (v0 + b) * 128 + t) : make_float4(0.f, 0.f, 0.f, 0.f);
}

// acc (this split's partials, `own`) becomes the split-order sum over every split's slot; slot0 is
// split 0's slot of this (tile, consumer, slice), split s's is split_stride float4s further on.
// Registers: the accumulators, one batch of loads and (before `own`) one batch of sums.
template <int kFloats, int kBatch>
__device__ __forceinline__ void splitk_sum_fragment(float (&acc)[kFloats], const float4* __restrict__ slot0,
                                                    size_t split_stride, int splits, int own, int t, bool live) {
  if (!live) return;
#pragma unroll
  for (int v0 = 0; v0 < kFloats / 4; v0 += kBatch) {
    float4 part[kBatch];
    float before[4 * kBatch];  // 0.f plus the splits before this one, in order
#pragma unroll
    for (int i = 0; i < 4 * kBatch; ++i) before[i] = 0.f;
    for (int split = 0; split < own; ++split) {
      splitk_load_batch<kFloats, kBatch>(part, slot0 + split * split_stride, v0, t);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        before[4 * b] += part[b].x;
        before[4 * b + 1] += part[b].y;
        before[4 * b + 2] += part[b].z;
        before[4 * b + 3] += part[b].w;
      }
    }
#pragma unroll
    for (int i = 0; i < 4 * kBatch; ++i)
      if (4 * v0 + i < kFloats) acc[4 * v0 + i] = before[i] + acc[4 * v0 + i];
    for (int split = own + 1; split < splits; ++split) {
      splitk_load_batch<kFloats, kBatch>(part, slot0 + split * split_stride, v0, t);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (v0 + b >= kFloats / 4) continue;
        acc[4 * (v0 + b)] += part[b].x;
        acc[4 * (v0 + b) + 1] += part[b].y;
        acc[4 * (v0 + b) + 2] += part[b].z;
        acc[4 * (v0 + b) + 3] += part[b].w;
      }
    }
  }
}
