"""The docs site and the lock files, checked without building or installing: mkdocs.yml's nav lists every page of
docs/ and only pages that exist, the README links only to files that exist, and each lock file pins every
dependency of the extras CI installs. CI builds the site itself with `mkdocs build --strict` (.ci/run)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tunetable.yamlio import load_yaml_file

REPO = Path(__file__).resolve().parents[1]
LOCKS = ("requirements/lock-py311.txt", "requirements/lock-py312.txt")
EXTRAS = ("dev", "slurm", "docs")


def nav_pages(entries: list) -> list[str]:
    """Every page named in an mkdocs nav (nested sections flattened)."""
    pages = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_nav_lists_every_page_once_and_only_pages_that_exist() -> None:
    config = load_yaml_file(REPO / "mkdocs.yml")
    listed = nav_pages(config["nav"])
    on_disk = sorted(str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md"))
    assert sorted(listed) == on_disk and len(set(listed)) == len(listed)
    assert config["strict"] is True and config["theme"]["name"] == "material"


def test_readme_links_and_picture_exist_and_it_stays_short() -> None:
    text = (REPO / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert "results/plots/gemm_dispatch.png" in targets and "docs/pytorch.md" in targets
    missing = [t for t in targets if not t.startswith("http") and not (REPO / t).exists()]
    assert not missing, missing
    assert len(text.splitlines()) <= 250


def requirement_names(pyproject: str) -> set[str]:
    """The distribution names required by the project and by EXTRAS (normalised: lower case, - for _ and .)."""
    from tomllib import loads

    project = loads(pyproject)["project"]
    specs = list(project["dependencies"]) + [s for extra in EXTRAS for s in project["optional-dependencies"][extra]]
    return {re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", s).group(0)).lower() for s in specs}


@pytest.mark.parametrize("lock", LOCKS)
def test_lock_pins_every_dependency_with_hashes(lock: str) -> None:
    text = (REPO / lock).read_text()
    pinned = {re.sub(r"[-_.]+", "-", name).lower() for name in re.findall(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==",
                                                                          text, flags=re.M)}
    missing = requirement_names((REPO / "pyproject.toml").read_text()) - pinned
    assert not missing, f"{lock} lacks {sorted(missing)}: run bash scripts/lock.sh"
    blocks = re.split(r"\n(?=[A-Za-z0-9])", text.strip())
    assert all("--hash=sha256:" in block for block in blocks if "==" in block)


def test_ci_and_readme_install_from_the_lock() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert 'pip install -q -r "$lock"' in ci and "pip install -q --no-deps -e ." in ci
    assert "mkdocs build --strict" in ci
    readme = (REPO / "README.md").read_text()
    assert "pip install -r requirements/lock-py311.txt && pip install --no-deps -e ." in readme
