"""The GPU half of the measurement: run shards in isolated workers, or replay recordings through the same interface.

Layout (Kernel Tuner's runner / backend / observer split; which backend, key and jobs a table's
measurement has is planned above the bench, in ``tunetable.measurement_plan``):
- ``tasks``: the bench settings, a shard's tasks and their launch payloads (no pycuda, no polars);
- ``runner``: the ``Runner`` and ``Measurer`` protocols, ``ShardJob`` and ``run_shards``, which takes
  a runner object: ``live.LiveRunner`` (a worker process per GPU, configurations interleaved across
  rounds) or ``replay.ReplayRunner`` (a recording's rows), peers that a search drives alike;
- ``journal``: the append-only JSONL journal (fsynced per record) that makes a killed run resumable;
- ``worker``: the subprocess that owns the device context and answers requests with its ``Backend``;
  the parent enforces the per-configuration timeout and classifies deaths (``failures``);
- ``backend``: the ``Backend`` protocol (describe, prepare_shape, prepare, sample) and the two that
  implement it: ``cuda_backend`` (+ ``harness.cu``, ``cublas``, ``nvml``: pycuda on a real GPU) and
  ``cpu_backend`` (numpy, for tests without a GPU);
- ``devices``: the GPUs this process may use; ``record``: export cuda shards to a recording.

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
