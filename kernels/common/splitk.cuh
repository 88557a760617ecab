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
