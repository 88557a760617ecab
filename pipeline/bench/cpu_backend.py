"""The CPU test backend: the Backend protocol of the cuda backend, with numpy GEMMs as kernels.

It plugs into the real subprocess worker exactly like ``cuda_backend.CudaBackend`` (both are a
``tunetable.bench.backend.Backend``), so that the
scheduling, failure classification, restarts, timeouts and journal/resume are exercised by CPU
tests with real processes. Its timings are real (perf_counter around real numpy work) but are
CPU timings: this backend exists for tests, never for tables.

Kernels are picked by the payload's ``entry``:
- ``gemm``: C = A @ B^T, correct;
- ``gemm_wrong``: C scaled by 1.25 (a wrong result: ``verify``);
- ``gemm_unwritten``: leaves the poisoned output (NaN) untouched (``verify``);
- ``fault``: reports a context-killing fault (like an illegal address: ``launch``);
- ``segv``: the process dies of SIGSEGV; ``exit``: the process exits; ``hang``: never returns.
A payload ``"after": n`` arms the failure only from the n-th timed sample on (faults mid-rounds).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import numpy as np

from tunetable.bench.failures import LaunchFailure

FAILURES = ("fault", "segv", "exit", "hang")


class CpuTestBackend:
    """A worker backend over numpy arrays (float32 in, float64 reference)."""

    def __init__(self) -> None:
        self.a = self.b = self.ref = None
        self.configs: dict[str, dict[str, Any]] = {}
        self.settings: dict[str, Any] = {}

    def describe(self) -> dict[str, Any]:
        """Device and driver of this backend."""
        return {"device": "cpu-test-backend", "driver": "numpy " + np.__version__, "pid": os.getpid()}

    def prepare_shape(self, *, m: int, n: int, k: int, settings: dict[str, Any]) -> dict[str, Any]:
        """Random inputs (never zeros) and the float64 reference."""
        rng = np.random.default_rng(int(settings.get("seed", 0)))
        self.a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        self.b = rng.uniform(-1, 1, (n, k)).astype(np.float32)
        self.ref = self.a.astype(np.float64) @ self.b.astype(np.float64).T
        self.settings = settings
        self.configs = {}
        return {"sets": 1, "set_bytes": int(self.a.nbytes + self.b.nbytes)}

    def _fail(self, entry: str) -> None:
        """Trigger the failure that ``entry`` names (fault, segv, exit, hang); nothing for any other entry."""
        if entry == "fault":
            raise LaunchFailure("test fault: illegal address (cpu-test backend)")
        if entry == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if entry == "exit":
            os._exit(7)
        if entry == "hang":
            while True:
                time.sleep(3600)

    def _run(self, entry: str) -> np.ndarray:
        """C for ``entry``: correct, scaled wrong (gemm_wrong) or left NaN-poisoned (gemm_unwritten)."""
        out = np.full(self.ref.shape, np.nan, dtype=np.float32)  # poisoned before every run
        if entry == "gemm_unwritten":
            return out
        np.matmul(self.a, self.b.T, out=out)
        if entry == "gemm_wrong":
            out *= 1.25
        return out

    def prepare(self, *, config_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Verify against the reference, warm up for warmup_ms, size the batch."""
        entry = str(payload.get("entry", "gemm"))
        if entry in FAILURES and not payload.get("after"):
            self._fail(entry)
        out = self._run(entry)
        rel_err = float(np.linalg.norm(out - self.ref) / np.linalg.norm(self.ref))
        if not np.isfinite(rel_err) or rel_err > float(self.settings["verify_rtol"]):
            return {"status": "verify", "rel_err": rel_err,
                    "error": f"rel_err {rel_err:.3g} > {self.settings['verify_rtol']}"}
        start = time.perf_counter()
        launches = 0
        while (time.perf_counter() - start) * 1e3 < float(self.settings["warmup_ms"]) or launches == 0:
            self._run(entry)
            launches += 1
        per_launch_ms = (time.perf_counter() - start) * 1e3 / launches
        batch = max(1, int(np.ceil(float(self.settings["min_batch_ms"]) / per_launch_ms)))
        self.configs[config_id] = {"entry": entry, "batch": batch, "after": payload.get("after"), "samples": 0}
        return {"status": "ok", "rel_err": rel_err, "batch": batch, "warmup_launches": launches}

    def sample(self, *, config_id: str) -> dict[str, Any]:
        """One timed batch (real CPU time of real numpy work)."""
        state = self.configs[config_id]
        state["samples"] += 1
        if state["after"] and state["samples"] >= int(state["after"]) and state["entry"] in FAILURES:
            self._fail(state["entry"])
        start = time.perf_counter()
        for _ in range(state["batch"]):
            self._run(state["entry"])
        elapsed_ms = (time.perf_counter() - start) * 1e3
        return {"sample_ms": elapsed_ms / state["batch"], "batch": state["batch"],
                "sm_clock_mhz": None, "power_w": None}

    def close(self) -> None:
        """Nothing to release."""
