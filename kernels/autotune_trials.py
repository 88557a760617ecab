"""Running one autotune trial: copying and restoring written arguments, verifying outputs, timing.

Split from tunetable.kernels.autotune (which re-exports every name here): the decorator keeps the keys, the
cache and the choice; this module holds what it calls to run and measure a configuration.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any


# --- restoring written arguments ---------------------------------------------------------------

def snapshot(value: Any) -> Any:
    """A copy of an array argument (torch ``clone``, CuPy/numpy/pycuda ``copy``)."""
    if hasattr(value, "clone"):
        return value.clone()
    if hasattr(value, "copy"):
        return value.copy()
    raise TypeError(f"restore_value: cannot copy an argument of type {type(value).__name__}")


def restore(target: Any, saved: Any) -> None:
    """Copy ``saved`` back into ``target`` in place."""
    if hasattr(target, "copy_"):
        target.copy_(saved)
    elif hasattr(target, "gpudata"):  # pycuda GPUArray: device-to-device copy
        import pycuda.driver as cuda  # lazy: a pycuda array is being restored, so pycuda is there

        cuda.memcpy_dtod(target.gpudata, saved.gpudata, target.nbytes)
    else:
        target[...] = saved


# --- verification ------------------------------------------------------------------------------

def to_numpy(value: Any) -> Any:
    """A host float64 copy of an array from torch, CuPy, pycuda or numpy."""
    import numpy as np  # lazy: verification only; importing the runtime loads no numpy

    if hasattr(value, "detach"):  # torch (bf16 has no numpy dtype: widen on the device first)
        value = value.detach().float().cpu().numpy()
    elif hasattr(value, "get") and not isinstance(value, Mapping):  # CuPy, pycuda GPUArray
        value = value.get()
    return np.asarray(value).astype(np.float64)


def relative_error(actual: Any, expected: Any) -> float:
    """||actual - expected|| / ||expected|| (Frobenius), inf when shapes differ or values are not finite."""
    import numpy as np  # lazy: verification only

    got, want = to_numpy(actual), to_numpy(expected)
    if got.shape != want.shape or not np.isfinite(got).all():
        return float("inf")
    norm = float(np.linalg.norm(want))
    diff = float(np.linalg.norm(got - want))
    return diff / norm if norm > 0 else diff


def close_to(
    reference: Callable[[Mapping[str, Any]], Mapping[str, Any]], *, rtol: float = 0.02
) -> Callable[[Mapping[str, Any]], bool]:
    """A ``verify`` callable: each output ``reference(args)`` names is within ``rtol`` of its value."""

    def verify(args: Mapping[str, Any]) -> bool:
        """True when every output the reference names is within ``rtol`` of its expected value."""
        expected = reference(args)
        return all(relative_error(args[name], value) <= rtol for name, value in expected.items())

    return verify


# --- timing ------------------------------------------------------------------------------------

def wall_clock_timer(
    launch: Callable[[], Any], *, warmup_ms: float = 5.0, rounds: int = 10, reset: Callable[[], Any] | None = None
) -> list[float]:
    """Time a host function with perf_counter: time-based warm-up, then ``rounds`` samples (ms).

    ``reset`` (restoring written arguments) runs before every launch, outside the timed region.
    """
    reset = reset or _nothing
    deadline = time.perf_counter() + warmup_ms / 1e3
    reset()
    launch()
    while time.perf_counter() < deadline:
        reset()
        launch()
    samples = []
    for _ in range(rounds):
        reset()
        started = time.perf_counter()
        launch()
        samples.append((time.perf_counter() - started) * 1e3)
    return samples


def _nothing() -> None:
    """The default ``reset``: does nothing."""
    return None


def cai_nbytes(value: Any) -> int:
    """Bytes of a device array from its CUDA array interface (shape x the typestr's item size)."""
    interface = value.__cuda_array_interface__
    size = int(str(interface["typestr"])[2:] or 1)
    return math.prod(int(dim) for dim in interface["shape"]) * size


def device_l2_bytes() -> int:
    """The current device's L2 size (pycuda; the runtime's context is current)."""
    import pycuda.driver as cuda  # lazy: only a GPU trial gets here

    return int(cuda.Context.get_device().get_attribute(cuda.device_attribute.L2_CACHE_SIZE))


def interleaved_samples(
    launches: Mapping[int, Callable[[int], Any]], *, timer: Any, sets: int, warmup_ms: float, rounds: int,
    min_batch_ms: float, before: Callable[[], Any] | None = None,
) -> tuple[dict[int, list[float]], dict[int, str]]:
    """Every configuration's cold-L2 samples as the bench takes them: each warmed up and its batch sized, then
    ``rounds`` rounds timing each once (the order rotated a step per round), so that clock and temperature
    drift between the first and the last configuration falls on all of them alike.

    ``timer``: a ColdL2Timer (``warm_up``, ``batch_size``, ``sample``); ``before`` runs before each batch.
    Returns (samples by index, error text by index of those that raised: they take no further part).
    """
    samples: dict[int, list[float]] = {index: [] for index in launches}
    errors: dict[int, str] = {}
    batches: dict[int, int] = {}
    for index, launch_on in launches.items():
        try:
            _, per_launch = timer.warm_up(launch_on, sets=sets, warmup_ms=warmup_ms)
            batches[index] = timer.batch_size(per_launch, min_batch_ms=min_batch_ms)
        except Exception as exc:  # a configuration that cannot run is a failed trial, not a crash
            errors[index] = f"{type(exc).__name__}: {exc}"
    order = [index for index in launches if index not in errors]
    for step in range(rounds):
        shift = step % len(order) if order else 0
        for index in order[shift:] + order[:shift]:
            if index in errors:
                continue
            try:
                if before is not None:
                    before()
                samples[index].append(timer.sample(launches[index], sets=sets, batch=batches[index]))
            except Exception as exc:  # as above: this configuration drops out, the others go on
                errors[index] = f"{type(exc).__name__}: {exc}"
    return {index: found for index, found in samples.items() if index not in errors}, errors
