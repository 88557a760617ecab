"""Process isolation: a worker subprocess owns the device context; the parent enforces timeouts.

The parent (``WorkerProcess``) speaks JSON lines to ``python -m tunetable.bench.worker --backend NAME``,
which answers each request with a call on its ``Backend`` (tunetable.bench.backend: cuda or cpu-test):

    {"op": "hello"}                                  -> {"device", "driver", ...}
    {"op": "shape", "M", "N", "K", "settings"}       -> {"sets", "set_bytes", ...}
    {"op": "prepare", "config_id", "payload"}        -> {"status": "ok"|"verify", "rel_err", "batch", ...}
    {"op": "sample", "config_id"}                    -> {"sample_ms", "batch", "sm_clock_mhz", "power_w"}
    {"op": "quit"}

A fault (illegal address, trap) answers ``{"status": "launch", "fatal": true}`` and the worker
exits, since its context is lost; a crash without an answer (SIGSEGV, exit) or no answer within
the timeout (a hang: the parent kills it) is classified by the parent. The parent restarts it.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path
from typing import IO, Any

from tunetable.bench.backend import answer, load_backend
from tunetable.bench.failures import LaunchFailure, WorkerFailure

STARTUP_TIMEOUT_S = 180.0
PR_SET_PDEATHSIG = 1
PARENT_ENV = "TUNETABLE_BENCH_PARENT"
_EOF = object()


# --- the worker side -----------------------------------------------------------------------------

def serve(backend_name: str, requests: IO[str], replies: IO[str]) -> int:
    """Answer requests until 'quit' or end of input; a fault answers and exits non-zero."""
    def reply(message: dict[str, Any]) -> None:
        """Write one JSON reply line and flush it."""
        replies.write(json.dumps(message, allow_nan=True) + "\n")
        replies.flush()

    try:
        backend = load_backend(backend_name)
    except LaunchFailure as exc:
        reply({"status": "launch", "error": str(exc), "fatal": True})
        return 3
    for line in requests:
        request = json.loads(line)
        if request.get("op") == "quit":
            break
        try:
            result = answer(backend, request)
        except LaunchFailure as exc:
            reply({"status": "launch", "error": str(exc), "fatal": True})
            return 3
        except Exception as exc:  # any other error: report it as a launch failure, then restart clean
            reply({"status": "launch", "error": f"{exc.__class__.__name__}: {exc}", "fatal": True})
            return 4
        reply({"ok": True, **result})
    backend.close()
    return 0


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the bench process dies (kill -9), even inside a hung kernel."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    expected = os.environ.get(PARENT_ENV)
    if expected is not None and os.getppid() != int(expected):  # it died before prctl took effect
        os._exit(1)


def main() -> None:
    """Entry point: keep fd 1 for the protocol only, everything else printed goes to stderr."""
    _die_with_parent()
    backend_name = sys.argv[sys.argv.index("--backend") + 1] if "--backend" in sys.argv else "cuda"
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # libraries that print (nvcc warnings, cuBLAS) cannot corrupt the protocol
    sys.stdout = sys.stderr
    code = serve(backend_name, sys.stdin, protocol)
    protocol.flush()
    os._exit(code)  # never run a poisoned context's destructors


# --- the parent side -----------------------------------------------------------------------------

def _describe_exit(code: int | None) -> str:
    """An exit code in words: still running, killed by a signal, or the exit status."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


class WorkerProcess:
    """Parent-side handle of one worker: start, request with a timeout, classify deaths, restart."""

    def __init__(self, *, backend: str, gpu: str | None = None, stderr_lines: int = 20):
        self.backend = backend
        self.gpu = gpu
        self.process: subprocess.Popen[str] | None = None
        self.info: dict[str, Any] = {}
        self.starts = 0
        self._replies: queue.Queue[Any] = queue.Queue()
        self._stderr: deque[str] = deque(maxlen=stderr_lines)

    def _env(self) -> dict[str, str]:
        """The worker's environment: repo on PYTHONPATH, unbuffered, parent pid, CUDA_VISIBLE_DEVICES for ``gpu``."""
        env = dict(os.environ)
        repo = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        env[PARENT_ENV] = str(os.getpid())
        if self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.gpu)
        return env

    def start(self) -> dict[str, Any]:
        """Spawn the worker and wait for its hello (device, driver)."""
        self._replies = queue.Queue()
        self._stderr.clear()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tunetable.bench.worker", "--backend", self.backend],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, bufsize=1, env=self._env(),
        )
        self.starts += 1
        threading.Thread(target=self._pump_stdout, args=(self.process, self._replies), daemon=True).start()
        threading.Thread(target=self._pump_stderr, args=(self.process,), daemon=True).start()
        self.info = self.request({"op": "hello"}, timeout=STARTUP_TIMEOUT_S)
        return self.info

    @staticmethod
    def _pump_stdout(process: subprocess.Popen[str], replies: queue.Queue[Any]) -> None:
        """Queue every stdout line of the worker, then the end-of-output marker."""
        for line in process.stdout:  # type: ignore[union-attr]
            replies.put(line)
        replies.put(_EOF)

    def _pump_stderr(self, process: subprocess.Popen[str]) -> None:
        """Keep the worker's last stderr lines for error messages."""
        for line in process.stderr:  # type: ignore[union-attr]
            self._stderr.append(line.rstrip())

    @property
    def alive(self) -> bool:
        """True while the worker process runs."""
        return self.process is not None and self.process.poll() is None

    def stderr_tail(self, lines: int = 3) -> str:
        """The last lines the worker wrote to stderr."""
        return " | ".join(list(self._stderr)[-lines:])

    def request(self, message: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        """Send one request; a hang past ``timeout`` kills the worker (``timeout``), a death is ``launch``."""
        process = self.process
        if process is None or process.poll() is not None or process.stdin is None:
            raise WorkerFailure("launch", "worker is not running")
        try:
            process.stdin.write(json.dumps(message) + "\n")
            process.stdin.flush()
        except BrokenPipeError:
            pass  # it died; the reply queue tells how
        try:
            line = self._replies.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise WorkerFailure("timeout", f"no answer within {timeout:g} s: worker killed") from None
        if line is _EOF:
            code = self._wait_exit()
            tail = self.stderr_tail()
            raise WorkerFailure("launch", f"worker died ({_describe_exit(code)})" + (f": {tail}" if tail else ""))
        reply = json.loads(line)
        if reply.get("fatal"):
            self._wait_exit()
        return reply

    def _wait_exit(self) -> int | None:
        """The worker's exit code within 10 s (killed past that); None when it was never started."""
        if self.process is None:
            return None
        try:
            return self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.process.returncode

    def kill(self) -> None:
        """SIGKILL the worker and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass  # a GPU context can take a moment to tear down; the OS reaps it

    def stop(self) -> None:
        """Ask the worker to quit; kill it if it does not."""
        if self.alive and self.process is not None and self.process.stdin is not None:
            try:
                self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.process.stdin.flush()
                self.process.wait(timeout=10)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                pass
        self.kill()


if __name__ == "__main__":
    main()
