"""The GPU half of the measurement: plan shards, run them in isolated workers, replay recordings.

Layout (Kernel Tuner's runner / backend / observer split):
- ``plan``: settings, tasks, content keys and backend resolution (no pycuda, no polars);
- ``journal``: the append-only JSONL journal that makes a killed run resumable;
- ``runner``: schedules configurations across interleaved rounds over a worker process;
- ``worker``: the subprocess that owns a GPU context (or the CPU test runner) and answers requests;
- ``cuda_backend`` (+ ``cublas``, ``nvml``): the pycuda measurement; ``cpu_runner``: the CPU test runner;
- ``replay``: serves a recording's rows instead of measuring.
"""
