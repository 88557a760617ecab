// The cold-L2 timer's spin kernel (tunetable.kernels.runtime.timing): it holds the stream while the
// host queues a whole timed batch, so launch overhead never enters a sample.

// Busy-wait for ns nanoseconds of the global timer (one thread).
extern "C" __global__ void spin_ns(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
