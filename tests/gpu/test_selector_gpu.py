"""gemm() on shapes no table holds, on the H200 (`pytest -m gpu`): the selector's choice and online tuning.

The validation shapes (data/validation_shapes.csv: kept out of params.yaml, never tuned on) run
through gemm() untuned: each result is checked against a float32 reference, each shape no table
holds (or at an M no recording measured) warns once (UntunedShapeWarning) and runs the shape selector's choice. With
TUNETABLE_AUTOTUNE=1 a shape no table holds is tuned on its first call among the selector's top
candidates (at most 8, each verified), the choice is written to the cache folder, and a fresh
process reads it back without tuning.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
pytest.importorskip("pycuda")

from tunetable.kernels.runtime import decide, launch, online  # noqa: E402
from tunetable.kernels.runtime.decide import UntunedShapeWarning  # noqa: E402
from tunetable.kernels.runtime.decide import shape_selector as selector  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
REL_TOL = 1e-2   # bf16 output, fp32 accumulation
ONLINE_SHAPE = (200, 5120, 5120)   # a validation shape: no table holds (5120, 5120)


def validation_shapes() -> list[tuple[int, int, int]]:
    """data/validation_shapes.csv (comment lines skipped)."""
    lines = [line for line in (REPO / "data" / "validation_shapes.csv").read_text().splitlines()
             if line and not line.startswith("#")]
    return [(int(r["M"]), int(r["N"]), int(r["K"])) for r in csv.DictReader(lines)]


def serving() -> str:
    """The recorded device whose tables gemm() serves this GPU (an H100 its own, since 2026-12-06)."""
    return launch.runtime().table.device


def operands(m: int, n: int, k: int, seed: int = 0) -> tuple["torch.Tensor", "torch.Tensor"]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.float32).to(torch.bfloat16)
    b = torch.randn((n, k), generator=gen, device="cuda", dtype=torch.float32).to(torch.bfloat16)
    return a, b


def rel_err(c: "torch.Tensor", a: "torch.Tensor", b: "torch.Tensor") -> float:
    ref = a.float() @ b.float().T
    return float((c.float() - ref).norm() / ref.norm())


@pytest.fixture
def fresh_runtime(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The generated tables and a new selector, no plans or online tuners yet, a private autotune cache."""
    monkeypatch.setenv("TUNETABLE_CACHE_DIR", str(tmp_path / "autotune"))
    decide.set_dispatcher(None, device=serving())
    launch._online.clear()
    yield tmp_path / "autotune"
    decide.set_dispatcher(None, device=serving())
    launch._online.clear()


@pytest.mark.parametrize("shape", validation_shapes(), ids=lambda s: "M{}_N{}_K{}".format(*s))
def test_gemm_on_a_validation_shape_is_correct_and_an_untuned_one_warns_once(shape, fresh_runtime) -> None:
    m, n, k = shape
    a, b = operands(m, n, k)
    # A table entry serves a measured M of a held (N, K); every other shape is the selector's (one warning).
    device = serving()
    held = (decide.dispatcher(device=device).table_for(m=m, n=n, k=k)[1] is not None
            and m in selector(device=device).starts)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = launch.gemm(a, b)
        again = launch.gemm(a, b)
    torch.cuda.synchronize()
    untuned = [w for w in caught if issubclass(w.category, UntunedShapeWarning)]
    assert len(untuned) == (0 if held else 1), [str(w.message) for w in caught]
    if not held:
        chosen = selector(device=serving()).choose(m=m, n=n, k=k).candidate
        assert chosen.config_id in str(untuned[0].message)
        assert decide.dispatcher(device=serving()).decide(m=m, n=n, k=k).entry.config_id == chosen.config_id
    assert rel_err(c, a, b) < REL_TOL and rel_err(again, a, b) < REL_TOL


def test_online_tuning_measures_the_selectors_top_candidates_and_caches_the_choice(
        fresh_runtime: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(online.AUTOTUNE_ENV, "1")
    m, n, k = ONLINE_SHAPE
    a, b = operands(m, n, k, seed=1)
    out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    with pytest.warns(online.OnlineTuningWarning):
        launch.gemm(a, b, out=out)
    torch.cuda.synchronize()
    assert rel_err(out, a, b) < REL_TOL
    files = list(fresh_runtime.glob("*.json"))
    assert len(files) == 1
    entry = json.loads(files[0].read_text())
    top = [p.candidate.config_id for p in online.ranking(selector(device=serving()), m=m, n=n, k=k)[:online.MAX_TOP_K]]
    assert [json.loads(c)["config_id"] for c in entry["configs"]] == top
    assert len(entry["trials"]) == len(top) and all(t["status"] == "ok" for t in entry["trials"])
    best = min(entry["trials"], key=lambda t: t["median_ms"])
    assert json.loads(entry["best_config"])["config_id"] == json.loads(best["config"])["config_id"]
    chosen = json.loads(entry["best_config"])
    assert launch.runtime().shape_plans[(m, n, k)] is launch.runtime().plan(
        decide.explicit_entry(chosen["family"], tuple(chosen["tunables"].items()), n, k), m=m, n=n, k=k)
    # A new process reads the cached choice: no tuning, no warning about tuning.
    script = ("import warnings, torch\nfrom tunetable.kernels.runtime import launch, online\n"
              f"a = torch.randn({m}, {k}, device='cuda', dtype=torch.bfloat16)\n"
              f"b = torch.randn({n}, {k}, device='cuda', dtype=torch.bfloat16)\n"
              "with warnings.catch_warnings(record=True) as caught:\n"
              "    warnings.simplefilter('always')\n"
              "    launch.gemm(a, b)\n"
              "torch.cuda.synchronize()\n"
              "tuner = next(iter(launch._online['tuner'].tuners.values()))\n"
              "print(tuner.cache_hits, sum(issubclass(w.category, online.OnlineTuningWarning) for w in caught))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False,
                          env={**os.environ, online.AUTOTUNE_ENV: "1", "TUNETABLE_CACHE_DIR": str(fresh_runtime)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "0"]
