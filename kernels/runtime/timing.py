"""The one cold-L2 timing method, shared by the bench, the runtime benchmarks and autotune.

Launches rotate over input sets that together exceed ``l2_factor`` x the device's L2, so a set is
evicted before it comes round again and every timed launch reads cold inputs. A spin kernel holds
the stream while the host queues a whole batch, CUDA events bracket the batch (GPU time only, no
launch gaps), and a sample is the batch time over its launches. Warm-up is time-based and sizes
the batch to at least ``min_batch_ms`` of GPU time.

``launch(i)`` enqueues one launch on input set ``i`` on the timer's stream (a pycuda Stream, or
None: the legacy default stream that torch, CuPy and ``tunetable.gemm`` use). Needs a current
CUDA context and pycuda; the spin kernel is compiled once through ``tunetable.kernels.jit``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from tunetable.kernels.jit import compile_config, default_cache_dir

SPIN_SOURCE = Path(__file__).with_name("spin.cu")
MAX_SETS = 2048
MAX_BATCH = 512
SPIN_FLOOR_NS = 200_000          # the spin outlasts queueing the batch: a floor ...
SPIN_PER_LAUNCH_NS = 20_000      # ... plus a generous host cost per queued launch
SPIN_CAP_NS = 20_000_000

Launch = Callable[[int], Any]


def input_sets(*, set_bytes: int, l2_bytes: int, l2_factor: float) -> int:
    """How many input sets of ``set_bytes`` a rotation needs to exceed ``l2_factor`` x L2 (at least 2)."""
    return max(2, min(MAX_SETS, math.ceil(float(l2_factor) * l2_bytes / max(set_bytes, 1))))


def spin_ns(count: int) -> int:
    """How long the spin holds the stream before a batch of ``count`` launches."""
    return min(SPIN_CAP_NS, SPIN_FLOOR_NS + SPIN_PER_LAUNCH_NS * count)


@lru_cache(maxsize=4)
def _spin_cubin(arch: str) -> str:
    """The spin kernel's cubin for ``arch`` (compiled once, content-addressed)."""
    result = compile_config(kernel_path=SPIN_SOURCE, defines={}, flags=("-O3",), arch=arch,
                            cache_dir=default_cache_dir())
    if result.status != "ok" or result.cubin is None:
        raise RuntimeError(f"the timer's spin kernel failed to compile: {result.error}")
    return result.cubin


class ColdL2Timer:
    """Times launches over rotating input sets with a spin-held stream and events around each batch."""

    def __init__(self, *, cuda: Any, stream: Any = None):
        self.cuda = cuda
        self.stream = stream
        major, minor = cuda.Context.get_device().compute_capability()
        self.spin = cuda.module_from_file(_spin_cubin(f"sm_{major}{minor}")).get_function("spin_ns")
        self.spin.prepare("Q")
        self.start, self.end = cuda.Event(), cuda.Event()
        self.rotation = 0   # the next input set: shared by everything this timer times (interleaved)

    def batch_ms(self, launch: Launch, count: int, *, sets: int, spin: bool) -> float:
        """Elapsed ms of ``count`` launches over the rotating sets, bracketed by events (spin first if asked)."""
        if spin:
            self.spin.prepared_async_call((1, 1, 1), (1, 1, 1), self.stream, spin_ns(count))
        self.start.record(self.stream)
        for _ in range(count):
            launch(self.rotation % sets)
            self.rotation += 1
        self.end.record(self.stream)
        self.end.synchronize()
        return float(self.end.time_since(self.start))

    def warm_up(self, launch: Launch, *, sets: int, warmup_ms: float) -> tuple[int, float]:
        """Launch in doubling groups for ``warmup_ms`` of GPU time; (launches made, last ms per launch)."""
        group, total_ms, launches, per_launch = 1, 0.0, 0, 0.0
        while True:
            elapsed = self.batch_ms(launch, group, sets=sets, spin=False)
            total_ms += elapsed
            launches += group
            per_launch = elapsed / group
            if total_ms >= warmup_ms:
                return launches, per_launch
            group = min(MAX_BATCH, group * 2)

    @staticmethod
    def batch_size(per_launch_ms: float, *, min_batch_ms: float) -> int:
        """Launches per timed batch: at least ``min_batch_ms`` of GPU time, at most MAX_BATCH."""
        return max(1, min(MAX_BATCH, math.ceil(min_batch_ms / max(per_launch_ms, 1e-6))))

    def sample(self, launch: Launch, *, sets: int, batch: int) -> float:
        """One timed batch: ms per launch."""
        return self.batch_ms(launch, batch, sets=sets, spin=True) / batch

    def samples(self, launch: Launch, *, sets: int, warmup_ms: float, min_batch_ms: float, rounds: int,
                before: Callable[[], Any] | None = None) -> list[float]:
        """Warm up, size the batch, then ``rounds`` samples (ms per launch); ``before`` runs before each batch."""
        _, per_launch = self.warm_up(launch, sets=sets, warmup_ms=warmup_ms)
        batch = self.batch_size(per_launch, min_batch_ms=min_batch_ms)
        out = []
        for _ in range(rounds):
            if before is not None:
                before()
            out.append(self.sample(launch, sets=sets, batch=batch))
        return out
