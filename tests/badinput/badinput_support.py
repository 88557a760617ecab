"""The bad-input suite's harness: a throw-away project, the real CLI run in-process, and the four checks.

Every case checks (``Outcome.expect_error`` / ``expect_ok``):
1. the exit status;
2. the one error line on stderr: ``error: <file>: <place>: <message>``, matched by a regex that names
   the file and the place (entry index, line, key, row), and no traceback anywhere;
3. that every file of the project is byte-identical to before (or, for a case that succeeds, that
   only the expected files changed, each fully rewritten), and that no file appeared outside the
   expected outputs (temp files included);
4. that nothing from the data ran: payloads try to create ``MARKER`` (outside the project).
The CLI runs in this process (``tunetable.cli.main``), so that a hundred cases stay fast; the kill
cases run real subprocesses.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Files a project copy needs for params, manifests, snippets and codegen cases: every declared table's,
# and the shape selectors' data files.
PROJECT_FILES = ("params.yaml", "kernels/tuning_configs.py",
                 *(str(p.relative_to(REPO)) for p in sorted((REPO / "kernels" / "snippets").glob("*.snippet"))),
                 *(str(p.relative_to(REPO)) for p in sorted((REPO / "manifests").glob("*.yaml"))),
                 *(str(p.relative_to(REPO)) for p in sorted((REPO / "kernels" / "data").glob("*.json"))))
RECORDINGS = tuple(str(p.relative_to(REPO)) for p in sorted((REPO / "data" / "recordings").glob("h200_gemm_*"))
                   if p.suffix in (".parquet", ".json"))


def sha256(path: Path) -> str:
    """Hex sha256 of a file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path -> sha256)."""
    return {str(p.relative_to(root)): sha256(p) for p in sorted(root.rglob("*")) if p.is_file()}


@dataclass
class Project:
    """A copy of the project's files in a temp folder, with a snapshot to compare against."""

    root: Path
    marker: Path                       # a payload that runs would create this file
    before: dict[str, str] = field(default_factory=dict)

    def path(self, relative: str) -> Path:
        """A file of the project."""
        return self.root / relative

    def text(self, relative: str) -> str:
        """A file's text."""
        return self.path(relative).read_text(encoding="utf-8")

    def write(self, relative: str, data: str | bytes) -> None:
        """Replace a file (text as UTF-8)."""
        target = self.path(relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)

    def edit(self, relative: str, old: str, new: str, *, count: int = 1) -> None:
        """Replace ``old`` by ``new`` in a file (``old`` must be there)."""
        text = self.text(relative)
        assert old in text, f"{relative} has no {old!r}"
        self.write(relative, text.replace(old, new, count))

    def freeze(self) -> None:
        """Take the snapshot the case is checked against (after its bad input was written)."""
        self.before = snapshot(self.root)


def make_project(tmp_path: Path, *, files: Iterable[str] = PROJECT_FILES) -> Project:
    """A project folder holding copies of ``files`` (relative to the repository)."""
    root = tmp_path / "project"
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, root / name)
    return Project(root=root, marker=tmp_path / "PAYLOAD_RAN")


@dataclass(frozen=True)
class Outcome:
    """One CLI run: exit status, stdout, stderr, and the project it ran in."""

    code: int
    out: str
    err: str
    project: Project

    def _files_unchanged(self, *, changed: Iterable[str] = (), new: Iterable[str] = ()) -> None:
        """Every file as it was, except ``changed`` ones; only the ``new`` ones (regexes) appeared."""
        after = snapshot(self.project.root)
        allowed_changes = set(changed)
        new_patterns = [re.compile(pattern) for pattern in new]
        for name, digest in self.project.before.items():
            assert name in after, f"{name} disappeared"
            if name not in allowed_changes:
                assert after[name] == digest, f"{name} changed"
        for name in after:
            if name not in self.project.before:
                assert any(p.fullmatch(name) for p in new_patterns), f"unexpected new file {name}"
        assert not self.project.marker.exists(), "a payload from the data ran"

    def expect_error(self, pattern: str, *, code: int = 2) -> str:
        """Exit ``code``, one error line matching ``pattern`` (a regex, anchored), nothing written, nothing ran."""
        assert "Traceback" not in self.out + self.err, self.err[-3000:]
        assert self.code == code, f"exit {self.code}, expected {code}: {self.err[-2000:]}"
        lines = [line for line in self.err.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("error: ")]
        assert len(errors) == 1, f"expected one error line: {self.err}"
        assert re.fullmatch(pattern, errors[0]), f"{errors[0]!r} does not match {pattern!r}"
        self._files_unchanged()
        return errors[0]

    def expect_ok(self, *, changed: Iterable[str] = (), new: Iterable[str] = ()) -> None:
        """Exit 0, no traceback, only the expected files changed or appeared, nothing ran."""
        assert "Traceback" not in self.out + self.err, self.err[-3000:]
        assert self.code == 0, f"exit {self.code}: {self.err[-2000:]}"
        self._files_unchanged(changed=changed, new=new)


def run_cli(project: Project, *argv: str) -> Outcome:
    """``tunetable ARGV...`` in the project folder, in this process; SystemExit becomes the exit status."""
    from tunetable.cli import main

    out, err = io.StringIO(), io.StringIO()
    previous = Path.cwd()
    os.chdir(project.root)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(argv))
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.chdir(previous)
    return Outcome(code=code, out=out.getvalue(), err=err.getvalue(), project=project)


@dataclass(frozen=True)
class Case:
    """One bad input: how to make it (``mutate``) and the error line it must give (a regex)."""

    name: str
    mutate: Callable[[Project], None]
    error: str
    argv: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return self.name


def ids(cases: Iterable[Case]) -> list[str]:
    """pytest ids of cases."""
    return [case.name for case in cases]
