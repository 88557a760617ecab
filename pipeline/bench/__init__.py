"""The GPU half of the measurement: plan shards, run them in isolated workers, replay recordings.

Layout (Kernel Tuner's runner / backend / observer split):
- ``plan``: settings, tasks, launch payloads, content keys and backend choice (no pycuda, no polars);
- ``journal``: the append-only JSONL journal (fsynced per record) that makes a killed run resumable;
- ``runner``: schedules configurations across interleaved rounds over a worker process, one per GPU;
- ``worker``: the subprocess that owns the GPU context (or the CPU test runner) and answers requests;
  the parent enforces the per-configuration timeout and classifies deaths (``failures``);
- ``cuda_backend`` (+ ``harness.cu``, ``cublas``, ``nvml``): the pycuda measurement;
  ``cpu_runner``: the CPU test runner with the same protocol, for tests without a GPU;
- ``replay`` / ``record``: serve a recording's rows instead of measuring / export cuda shards to one;
- ``session``: a table's shard jobs, replay of a whole table, the time estimate.

How a configuration is measured (cuda backend), per (table, shape) shard:
1. inputs: enough (A, B, C) sets to exceed ``l2_factor`` x the device's L2 (read from the device),
   filled on the GPU with uniform random bf16 in [-1, 1); the cuBLAS result of set 0 is the reference;
2. verify: C poisoned with NaN, one run, ||C - Cref|| / ||Cref|| reduced on the GPU; above
   ``verify_rtol`` (or NaN: an unwritten element) the configuration is ``verify`` and never timed;
3. warm-up for ``warmup_ms`` of GPU time, which also sizes the batch to >= ``min_batch_ms``;
4. ``rounds`` timed batches, interleaved with every other configuration of the shard (the order
   rotates per round); each batch: a spin kernel holds the stream while the host queues the batch
   (launch overhead never enters a sample), CUDA events around the batch, each launch on the next
   input set (cold L2); sample = batch time / launches; SM clock and power (NVML) read after it;
5. the row keeps every sample, median, IQR, mean, min, TFLOP/s, rel_err, clock, power, device,
   driver, nvcc, git revision and time; cuBLAS (cublasGemmEx, bf16 in, fp32 compute) is measured
   the same way on the same buffers as the baseline row (``config_id="cublas"``, ``mesh_idx=-1``).
A fault (illegal address, trap) is ``launch`` and the worker restarts; no answer within
``timeout_s`` is ``timeout`` and the worker is killed and restarted; the run goes on.
"""
