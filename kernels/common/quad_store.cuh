// Epilogue helper shared by the GEMM kernels: mma.sync m16n8 and wgmma m64nN accumulators give
// each thread a column pair (8*b + 2*(lane%4), +1) of every 8-column block b in its row, so a
// plain store writes 4 bytes per thread and half-filled sectors. The four threads of a quad
// (same row) trade their pairs, a 4 x 4 transpose of 32-bit words through shuffles, so that each
// writes one whole 16-byte run: a quarter of the store instructions and full 32-byte sectors.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// w[i] for a run-time i without an indexed (local-memory) register array.
__device__ __forceinline__ uint32_t select4(const uint32_t (&w)[4], int i) {
  return i == 0 ? w[0] : i == 1 ? w[1] : i == 2 ? w[2] : w[3];
}

// `mine[b]`: this thread's packed pair of block b of a group of four blocks. Returns the eight
// columns of block (lane % 4). Every lane of the warp must call it (shuffles), rows in or out.
__device__ __forceinline__ uint4 quad_transpose(const uint32_t (&mine)[4]) {
  const int quad = threadIdx.x & 3;
  uint32_t got[4];  // got[i]: the pair of block `quad` held by thread quad ^ i
  got[0] = select4(mine, quad);
#pragma unroll
  for (int i = 1; i < 4; ++i) got[i] = __shfl_xor_sync(0xffffffffu, select4(mine, quad ^ i), i);
  return make_uint4(select4(got, quad), select4(got, quad ^ 1), select4(got, quad ^ 2), select4(got, quad ^ 3));
}
