"""Helpers shared by the bench tests: the test kernel family, driver specs, journal counts."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from tunetable.yamlio import load_yaml_file

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "bench"
DRIVER = FIXTURES / "driver.py"


def written_variant(*, patch: Path, folder: Path) -> Path:
    """The .cu that scripts/apply_patch.py writes from a copy of ``patch`` in ``folder`` (it must succeed)."""
    copy = folder / patch.name
    copy.write_text(patch.read_text())
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "apply_patch.py"), str(copy)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return copy.with_suffix(".cu")


def load_benchmark_script(name: str) -> Any:
    """benchmarks/<name>.py as a module (benchmarks/ is not a package on pytest's path)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def load_test_families() -> dict[str, Any]:
    """FAMILIES of tests/fixtures/bench/family.py (the test kernel's launch geometry)."""
    spec = importlib.util.spec_from_file_location("bench_test_family", FIXTURES / "family.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_test_family"] = module
    spec.loader.exec_module(module)
    return module.FAMILIES


def write_spec(path: Path, *, backend: str, settings: dict[str, Any], jobs: list[dict[str, Any]]) -> Path:
    """A driver spec file."""
    path.write_text(json.dumps({"backend": backend, "settings": settings, "jobs": jobs}))
    return path


def start_driver(spec: Path) -> subprocess.Popen[bytes]:
    """Start the bench driver as a real process (its own session, so kill -9 hits only it)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.Popen([sys.executable, str(DRIVER), str(spec)], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def journal_records(path: Path) -> list[dict[str, Any]]:
    """Complete measurement records of a journal (its shard checksum records, type "shard", left out)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
            if record.get("type") != "shard":
                out.append(record)
        except json.JSONDecodeError:
            continue
    return out


def sample_counts(path: Path) -> Counter[str]:
    """Timed samples per configuration in a journal."""
    return Counter(r["config_id"] for r in journal_records(path) if r["type"] == "sample")


def kill9_when(process: subprocess.Popen[bytes], journal: Path, *, samples: int, limit_s: float) -> list[str]:
    """SIGKILL the process once the journal holds ``samples`` samples; returns the journal lines then."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if sum(sample_counts(journal).values()) >= samples:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            return journal.read_text().splitlines()
        if process.poll() is not None:
            raise RuntimeError(f"driver ended before the kill: {process.stdout.read().decode()[-2000:]}")
        time.sleep(0.01)
    process.kill()
    raise RuntimeError("the journal never reached the sample count")


def gemm_mma_only_params(folder: Path, *, search: dict[str, Any] | None) -> Path:
    """The project's gemm_mma table alone (same grid, kernel and recording) with ``search:``, as folder/params.yaml."""
    params = load_yaml_file(REPO / "params.yaml")
    table = dict(params["tables"]["gemm_mma"])
    table.pop("search", None)
    if search is not None:
        table["search"] = search
    params["tables"] = {"gemm_mma": table}
    params.pop("dispatch", None)
    params.pop("selector", None)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path
