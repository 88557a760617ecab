"""A non-editable install in a fresh venv: one import name, a light import, gemm()'s decisions outside the repo.

The wheel is built from a copy of the package folders (nothing is written into the repo), installed
with ``pip install --no-deps`` into a new venv, and run from a folder outside the repo: the
runtime must stand alone there (no params.yaml, no build module, no heavy dependency). The
expected decisions come from the manifests (YAML), not from the code under test.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tunetable.yamlio import load_yaml_file

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("polars", "pandas", "snakemake", "dvc", "jsonschema", "yaml", "click", "rich", "numpy")
PROBE = """
import json, sys, warnings
import tunetable
from tunetable import gemm, gemm_with, autotune  # the runtime API, lazily
from tunetable.kernels.runtime.decide import FallbackWarning, dispatcher
shapes = json.loads(sys.argv[1])
warnings.simplefilter("ignore", FallbackWarning)
decisions = [dispatcher().decide(m=m, n=n, k=k) for m, n, k in shapes]
untuned = dispatcher().decide(m=200, n=5120, k=5120)   # the shape selector's choice, from its data file
print(json.dumps({
    "selector": [untuned.entry.config_id, untuned.prediction.seconds],
    "file": tunetable.__file__,
    "heavy": sorted(name for name in sys.modules if name.split(".")[0] in json.loads(sys.argv[2])),
    "decisions": [[d.entry.kernel, d.entry.config_id, d.fallback] for d in decisions],
}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of the working tree's package, built in a copy of it."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("pipeline", "kernels"):
        shutil.copytree(REPO / folder, source / folder, ignore=ignore)
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                           "-w", str(out), str(source)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (found,) = out.glob("tunetable-*.whl")
    return found


@pytest.fixture(scope="module")
def fresh_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a new venv holding only the wheel (no dependencies)."""
    root = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True).create(root)
    python = root / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return python


def test_the_wheel_has_one_top_level_name_every_module_and_every_family_folder(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names if not name.startswith("tunetable-")} == {"tunetable"}
    for top, package in (("pipeline", "tunetable"), ("kernels", "tunetable/kernels")):
        for module in sorted((REPO / top).rglob("*.py")):
            assert f"{package}/{module.relative_to(REPO / top).as_posix()}" in names, module
    for family in sorted(path.parent.name for path in (REPO / "kernels" / "families").glob("*/family.py")):
        for suffix in ("family.py", f"{family}.cu", f"{family}.snippet"):
            assert f"tunetable/kernels/families/{family}/{suffix}" in names
    assert {"tunetable/kernels/common/splitk.cuh", "tunetable/kernels/runtime/spin.cu",
            "tunetable/kernels/runtime/torch_fast.cpp",
            "tunetable/kernels/data/gemm_selector.json"} <= set(names)


def expected_decisions(shapes: list[tuple[int, int, int]]) -> list[list[object]]:
    """What the manifests say each shape runs: the dispatch list's table, that table's entry (first match)."""
    def entries(name: str) -> list[dict]:
        return load_yaml_file(REPO / "manifests" / f"{name}.yaml")["params"]

    def first(rows: list[dict], m: int, n: int, k: int) -> dict:
        return next(e for e in rows if e["N"] == n and e["K"] == k and e["M"] <= m < e["M_END"])

    dispatch, out = entries("gemm_dispatch"), []
    for m, n, k in shapes:
        table = first(dispatch, m, n, k)["TABLE"]
        out.append([table, first(entries(table), m, n, k)["CONFIG_ID"], False])
    return out


def test_import_is_light_and_decisions_work_outside_the_repo(fresh_python: Path, tmp_path: Path) -> None:
    params = load_yaml_file(REPO / "params.yaml")["tables"]["gemm_mma"]["shapes"]
    shapes = [(m, n, k) for n, k in params["NK"] for m in params["M"]]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    done = subprocess.run([str(fresh_python), "-c", PROBE, json.dumps(shapes), json.dumps(HEAVY)], cwd=outside,
                          capture_output=True, text=True, check=False, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    assert Path(found["file"]).is_relative_to(fresh_python.parents[1])  # the installed copy, not the repo
    assert found["heavy"] == []
    assert found["decisions"] == expected_decisions(shapes)
    # The selector's choice from the installed data file, as the code before it was data decided it.
    recorded = json.loads((REPO / "tests" / "fixtures" / "selector" / "decisions.json").read_text())["decisions"]
    before = next(record for record in recorded if record["shape"] == [200, 5120, 5120])
    assert found["selector"] == [before["config_id"], before["prediction"]["seconds"]]
