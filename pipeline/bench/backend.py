"""The Backend protocol: the device side of a bench worker process, and the worker's requests as calls on it.

Kernel Tuner's backends/backend.py: one interface over every device. A ``Backend`` lives inside the
worker subprocess (``tunetable.bench.worker``), which owns its device context; the parent's
``WorkerSession`` (tunetable.bench.live) sends it one request at a time. Two backends implement it:
``cuda`` (``cuda_backend.CudaBackend``, pycuda on a real GPU) and ``cpu-test``
(``cpu_backend.CpuTestBackend``, numpy GEMMs with real CPU timings, for tests without a GPU).
Each is imported by name in the worker only (pycuda exists on a GPU host alone).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, Protocol

BACKENDS = {
    "cuda": "tunetable.bench.cuda_backend:CudaBackend",
    "cpu-test": "tunetable.bench.cpu_backend:CpuTestBackend",
}


class Backend(Protocol):
    """What a worker measures on: a shape's inputs, a configuration's verify and warm-up, one timed batch."""

    def describe(self) -> dict[str, Any]:
        """Device, driver, pid and the facts that shape the measurement."""

    def prepare_shape(self, *, m: int, n: int, k: int, settings: dict[str, Any]) -> dict[str, Any]:
        """Inputs (random, never zeros) and the reference of one shape."""

    def prepare(self, *, config_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Verify one configuration against the reference, warm it up and size its timed batch."""

    def sample(self, *, config_id: str) -> dict[str, Any]:
        """One timed batch of a prepared configuration: its per-launch ms, batch, clock and power."""

    def close(self) -> None:
        """Release the device's resources."""


# The worker protocol's requests (tunetable.bench.worker), each as the Backend call that answers it.
REQUESTS: Mapping[str, Callable[[Backend, Mapping[str, Any]], dict[str, Any]]] = {
    "hello": lambda backend, request: backend.describe(),
    "shape": lambda backend, request: backend.prepare_shape(
        m=int(request["M"]), n=int(request["N"]), k=int(request["K"]), settings=dict(request["settings"])),
    "prepare": lambda backend, request: backend.prepare(config_id=request["config_id"],
                                                        payload=dict(request["payload"])),
    "sample": lambda backend, request: backend.sample(config_id=request["config_id"]),
}


def load_backend(name: str) -> Backend:
    """Instantiate a backend by name: 'cuda' (pycuda) or 'cpu-test'."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend '{name}' (known: {', '.join(sorted(BACKENDS))})")
    module_name, class_name = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)()


def answer(backend: Backend, request: Mapping[str, Any]) -> dict[str, Any]:
    """The backend's answer to one request (hello, shape, prepare, sample); ValueError for an unknown op."""
    op = request.get("op")
    if op not in REQUESTS:
        raise ValueError(f"unknown op {op!r}")
    return REQUESTS[str(op)](backend, request)
