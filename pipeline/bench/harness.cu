// Harness kernels of the bench (compiled once per worker through pycuda): random inputs and the
// relative error against the reference computed on the GPU. The timing (its spin kernel included)
// is tunetable.kernels.runtime.timing, shared with the runtime benchmarks and autotune.
#include <cuda_bf16.h>

__device__ __forceinline__ unsigned long long splitmix64(unsigned long long x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform values in [-1, 1) from a counter-based hash: reproducible for a (seed, index).
extern "C" __global__ void fill_random_bf16(__nv_bfloat16* out, unsigned long long n, unsigned long long seed) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    const unsigned long long bits = splitmix64(seed * 0xD1B54A32D192ED03ull + i);
    const float unit = (float)(bits >> 40) * (1.0f / 16777216.0f);
    out[i] = __float2bfloat16(2.0f * unit - 1.0f);
  }
}

// sums[0] += sum((c - ref)^2), sums[1] += sum(ref^2), in double; a NaN anywhere in c (an
// unwritten, poisoned element) makes sums[0] NaN, so it can never pass.
extern "C" __global__ void rel_err_sums(const __nv_bfloat16* c, const __nv_bfloat16* ref, unsigned long long n,
                                        double* sums) {
  double err = 0.0, norm = 0.0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    const double r = (double)__bfloat162float(ref[i]);
    const double d = (double)__bfloat162float(c[i]) - r;
    err += d * d;
    norm += r * r;
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    err += __shfl_down_sync(0xffffffffu, err, offset);
    norm += __shfl_down_sync(0xffffffffu, norm, offset);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&sums[0], err);
    atomicAdd(&sums[1], norm);
  }
}
