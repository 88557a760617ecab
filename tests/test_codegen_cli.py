"""``tunetable codegen`` end to end: flags, --check, --all over params.yaml, errors, atomic writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tunetable.cli import main
from tunetable.yamlio import load_yaml_file

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "codegen"

TARGET = """\
\"\"\"Two generated tables in one file.\"\"\"

SMALL = [
    # BEGIN-TUNING-LIST-SMALL
    # END-TUNING-LIST-SMALL
]

LARGE = [
    # BEGIN-TUNING-LIST-LARGE
    old_entry,
    # END-TUNING-LIST-LARGE
]
"""

EXPECTED = """\
\"\"\"Two generated tables in one file.\"\"\"

SMALL = [
    # BEGIN-TUNING-LIST-SMALL
        # Automatically generated from [small.yaml]
        # index: [0]
        dict(m=1, m_end=64, tile=16),
        # Automatically generated from [small.yaml]
        # index: [1]
        dict(m=64, m_end=128, tile=32),
    # END-TUNING-LIST-SMALL
]

LARGE = [
    # BEGIN-TUNING-LIST-LARGE
        # Automatically generated from [large.yaml]
        # index: [0]
        dict(m=128, m_end=2147483647, tile=128, ranged=True),
    # END-TUNING-LIST-LARGE
]
"""

SNIPPET = "dict(m=[@M], m_end=[@M_END], tile=[@TILE])\n"
RANGED_SNIPPET = "dict(m=[@M], m_end=[@M_END], tile=[@TILE], ranged=True)\n"
# Entries hold every field a declared table of the fixture family types (KERNEL, and CONFIG_ID: the id of
# their tunables); the snippets render three of them.
SMALL_MANIFEST = ("defaults: &d\n  N: 8\n  K: 8\n  KERNEL: codegen_fixture\nparams:\n"
                  "  - {<<: *d, M: 1, M_END: 64, TILE: 16, CONFIG_ID: c8bcb7dbc9e}\n"
                  "  - {<<: *d, M: 64, M_END: 128, TILE: 32, CONFIG_ID: cc44d7caab1}\n")
LARGE_MANIFEST = ("params:\n  - {M: 128, M_END: 2147483647, N: 8, K: 8, TILE: 128, _template: ranged,"
                  " KERNEL: codegen_fixture, CONFIG_ID: c27fda14e1d}\n")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A tiny project: two manifests rendered into two regions of one target."""
    (tmp_path / "small.yaml").write_text(SMALL_MANIFEST)
    (tmp_path / "large.yaml").write_text(LARGE_MANIFEST)
    (tmp_path / "entry.snippet").write_text(SNIPPET)
    (tmp_path / "ranged.snippet").write_text(RANGED_SNIPPET)
    (tmp_path / "tables.py").write_text(TARGET)
    return tmp_path


def table_args(root: Path, name: str, *extra: str) -> list[str]:
    """The Modular-style flags for table ``small`` or ``large`` of the ``project`` fixture."""
    upper = name.upper()
    return [
        "codegen",
        "--manifest", str(root / f"{name}.yaml"),
        "--snippet", str(root / "entry.snippet"),
        "--target", str(root / "tables.py"),
        "--begin-marker", f"BEGIN-TUNING-LIST-{upper}",
        "--end-marker", f"END-TUNING-LIST-{upper}",
        "--source-label", f"{name}.yaml",
        "--snippet-variant", f"ranged={root / 'ranged.snippet'}",
        *extra,
    ]


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the real CLI entry point in-process: (exit status, stdout, stderr)."""
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write_params(root: Path, tables: dict[str, dict[str, object]]) -> Path:
    """A params.yaml whose tables copy the repo's gemm_mma table with the given codegen sections.

    Their family is an ad-hoc one (no folder under kernels/families/), so they bring their own snippet;
    its one tunable, TILE, is what the fixture manifests set.
    """
    params = load_yaml_file(REPO / "params.yaml")
    template = {**params["tables"]["gemm_mma"], "family": "codegen_fixture", "kernel": "fixture.cu",
                "grid": {"groups": [{"TILE": [16, 32, 128]}]}}
    params["tables"] = {name: {**template, "codegen": section} for name, section in tables.items()}
    params.pop("dispatch", None)  # it names the repo's tables
    params.pop("builds", None)    # it renders into the repo's generated file
    params.pop("selector", None)  # so does the selector
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def declared_tables(root: Path) -> dict[str, dict[str, object]]:
    """Codegen sections for the fixture's two tables, sharing one target (relative paths)."""
    return {
        name: {
            "manifest": f"{name}.yaml",
            "snippet": "entry.snippet",
            "target": "tables.py",
            "begin_marker": f"BEGIN-TUNING-LIST-{name.upper()}",
            "end_marker": f"END-TUNING-LIST-{name.upper()}",
            "source_label": f"{name}.yaml",
            "variants": {"ranged": "ranged.snippet"},
        }
        for name in ("small", "large")
    }


def test_two_regions_via_python_dash_m(project: Path) -> None:
    for name in ("small", "large"):
        done = subprocess.run(
            [sys.executable, "-m", "tunetable", *table_args(project, name)], capture_output=True, text=True, cwd=REPO
        )
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert (project / "tables.py").read_text() == EXPECTED
    check = subprocess.run(
        [sys.executable, "-m", "tunetable", *table_args(project, "small", "--check")], capture_output=True, text=True
    )
    assert (check.returncode, check.stdout, check.stderr) == (0, "", "")


def test_check_prints_a_unified_diff_exits_1_and_writes_nothing(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = project / "tables.py"
    code, out, err = run_cli(table_args(project, "large", "--check"), capsys)
    assert code == 1
    assert out == ""
    label = str(target)
    assert err.startswith(
        f"--- {label}\n+++ {label} (generated)\n@@ -7,6 +7,8 @@\n"
        " \n"
        " LARGE = [\n"
        "     # BEGIN-TUNING-LIST-LARGE\n"
        "-    old_entry,\n"
        "+        # Automatically generated from [large.yaml]\n"
        "+        # index: [0]\n"
        "+        dict(m=128, m_end=2147483647, tile=128, ranged=True),\n"
        "     # END-TUNING-LIST-LARGE\n"
        " ]\n"
    )
    assert err.rstrip("\n").splitlines()[-1] == f"error: {label}: out of date; run the same command without --check"
    assert target.read_text() == TARGET


def test_without_check_the_target_is_always_rewritten(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = project / "tables.py"
    assert run_cli(table_args(project, "small"), capsys)[0] == 0
    first = target.read_text()
    os.utime(target, ns=(0, 0))
    assert run_cli(table_args(project, "small"), capsys) == (0, "", "")
    assert target.read_text() == first
    assert target.stat().st_mtime_ns != 0


def test_all_renders_shared_target_once_and_check_reports_every_stale_table(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    params = write_params(project, declared_tables(project))
    code, _, err = run_cli(["codegen", "--all", "--check", "--params", str(params)], capsys)
    assert code == 1
    assert err.rstrip("\n").splitlines()[-1] == (
        f"error: out of date: {project / 'tables.py'} (tables: small, large); run `tunetable codegen --all`"
    )
    assert (project / "tables.py").read_text() == TARGET
    assert run_cli(["codegen", "--all", "--params", str(params)], capsys) == (0, "", "")
    assert (project / "tables.py").read_text() == EXPECTED
    assert run_cli(["codegen", "--all", "--check", "--params", str(params)], capsys) == (0, "", "")
    assert run_cli(["codegen", "--table", "large", "--check", "--params", str(params)], capsys) == (0, "", "")


def test_all_touches_no_target_when_any_table_fails(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "large.yaml").write_text("params:\n  - {M: 1}\n  - {M: 1}\n")
    params = write_params(project, declared_tables(project))
    code, out, err = run_cli(["codegen", "--all", "--params", str(params)], capsys)
    assert (code, out) == (2, "")
    assert err == f"error: {project / 'large.yaml'}: duplicate params entry at index 1\n"
    assert (project / "tables.py").read_text() == TARGET


def test_unknown_declared_table(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = write_params(project, declared_tables(project))
    code, _, err = run_cli(["codegen", "--table", "nope", "--params", str(params)], capsys)
    assert code == 2
    assert err == f"error: {params}: tables: unknown table 'nope' (declared: large, small)\n"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda root: (root / "small.yaml").write_text("[1]\n"), "{root}/small.yaml: expected a YAML mapping"),
        (lambda root: (root / "small.yaml").write_text("params: x\n"),
         "{root}/small.yaml: expected 'params' to be a sequence"),
        (lambda root: (root / "small.yaml").write_text("params: [3]\n"),
         "{root}/small.yaml: params[0] must be a mapping"),
        (
            lambda root: (root / "small.yaml").write_text("params: [{M: 1, TILE: 2}]\n"),
            "{root}/small.yaml: params[0]: Missing snippet parameters: M_END",
        ),
        (
            lambda root: (root / "small.yaml").write_text("params: [{_template: 1}]\n"),
            "{root}/small.yaml: params[0]._template must be a string",
        ),
        (
            lambda root: (root / "small.yaml").write_text("params: [{_template: wide}]\n"),
            "{root}/small.yaml: params[0] references unknown template 'wide'",
        ),
        (
            lambda root: (root / "tables.py").write_text("# END-TUNING-LIST-SMALL\n# BEGIN-TUNING-LIST-SMALL\n"),
            "{root}/tables.py: The begin marker must precede the end marker",
        ),
        (
            lambda root: (root / "tables.py").write_text("# BEGIN-TUNING-LIST-SMALL\n"),
            "{root}/tables.py: Expected exactly one end marker: END-TUNING-LIST-SMALL",
        ),
        (lambda root: (root / "entry.snippet").unlink(), "{root}/entry.snippet: no such file"),
    ],
)
def test_errors_are_one_line_exit_2_and_leave_the_target_alone(
    project: Path, capsys: pytest.CaptureFixture[str], mutate, message: str
) -> None:
    mutate(project)
    before = (project / "tables.py").read_bytes()
    code, out, err = run_cli(table_args(project, "small"), capsys)
    assert (code, out, err) == (2, "", f"error: {message.format(root=project)}\n")
    assert (project / "tables.py").read_bytes() == before


@pytest.mark.parametrize(
    ("variant", "message"),
    [("ranged", "Invalid --snippet-variant 'ranged'; expected NAME=PATH"),
     ("ranged=x", "Duplicate snippet variant 'ranged'")],
)
def test_bad_snippet_variant_flags(
    project: Path, capsys: pytest.CaptureFixture[str], variant: str, message: str
) -> None:
    code, _, err = run_cli(table_args(project, "small", "--snippet-variant", variant), capsys)
    assert (code, err) == (2, f"error: {message}\n")


def test_missing_flags_and_mixed_modes_are_usage_errors(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["codegen", "--manifest", "m.yaml"], capsys)
    assert code == 2
    assert "missing --snippet, --target, --begin-marker, --end-marker, --source-label" in err
    code, _, err = run_cli(["codegen", "--all", "--manifest", "m.yaml"], capsys)
    assert code == 2
    assert "do not combine them with single-table flags" in err


def test_overlap_warns_by_default_and_fails_with_strict(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "small.yaml").write_text(SMALL_MANIFEST.replace("M: 64, M_END: 128", "M: 32, M_END: 128"))
    overlap = (
        f"{project / 'small.yaml'}: params[1] [M, M_END) = [32, 128) overlaps params[0] [1, 64) for N=8, K=8; "
        "with first-match lookup params[1] is shadowed for M in [32, 64)"
    )
    code, _, err = run_cli(table_args(project, "small"), capsys)
    assert (code, err) == (0, f"warning: {overlap}\n")
    written = (project / "tables.py").read_text()
    (project / "tables.py").write_text(TARGET)
    code, _, err = run_cli(table_args(project, "small", "--strict"), capsys)
    assert (code, err) == (2, f"error: {overlap}\n")
    assert (project / "tables.py").read_text() == TARGET
    assert "dict(m=32, m_end=128, tile=32)," in written


def test_help_documents_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["codegen", "--help"], capsys)
    assert code == 0
    flags = ["--manifest", "--snippet", "--target", "--begin-marker", "--end-marker", "--source-label",
             "--snippet-variant", "--check", "--strict", "--all", "--table", "--params"]
    assert [flag for flag in flags if f"  {flag} " not in out] == []


def test_modular_parity_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "tuning_configs.mojo"
    target.write_bytes((FIXTURES / "tuning_configs_before.mojo").read_bytes())
    runs = [
        ["--manifest", str(FIXTURES / "tuning_table_sm100_bf16.yaml"),
         "--snippet", str(FIXTURES / "tuning_sm100.mojo.snippet"),
         "--begin-marker", "BEGIN-TUNING-LIST-SM100-BF16", "--end-marker", "END-TUNING-LIST-SM100-BF16",
         "--source-label", "tuning_table_sm100_bf16.yaml"],
        ["--manifest", str(FIXTURES / "tuning_table_sm100_fp8.yaml"),
         "--snippet", str(FIXTURES / "tuning_fp8.mojo.snippet"),
         "--begin-marker", "BEGIN-TUNING-LIST-SM100-FP8", "--end-marker", "END-TUNING-LIST-SM100-FP8",
         "--source-label", "gpu/linalg/tuning_table_sm100_fp8.yaml",
         f"--snippet-variant=ranged={FIXTURES / 'tuning_fp8_ranged.mojo.snippet'}"],
    ]
    for flags in runs:
        assert run_cli(["codegen", "--target", str(target), *flags], capsys) == (0, "", "")
    assert target.read_bytes() == (FIXTURES / "tuning_configs_expected.mojo").read_bytes()
    for flags in runs:
        assert run_cli(["codegen", "--target", str(target), "--check", *flags], capsys) == (0, "", "")


KILLED_WRITER = """\
import os, sys, time
from pathlib import Path

ready = Path(sys.argv[1])
real_fsync = os.fsync

def fsync_then_hang(fd):
    # The new text is in the temp file but not yet renamed over the target: the kill window.
    real_fsync(fd)
    ready.write_text("in temp file")
    time.sleep(120)

os.fsync = fsync_then_hang
from tunetable.cli import main
main(sys.argv[2:])
"""


@pytest.mark.slow
def test_sigkill_during_the_write_leaves_the_target_intact(project: Path) -> None:
    script = project / "killed_writer.py"
    script.write_text(KILLED_WRITER)
    ready = project / "ready"
    target = project / "tables.py"
    before = target.read_bytes()
    writer = subprocess.Popen([sys.executable, str(script), str(ready), *table_args(project, "large")], cwd=REPO)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and writer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready.exists(), "the writer never reached the temp-file write"
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL
    assert target.read_bytes() == before
    leftovers = list(project.glob(".tables.py.*.tmp"))
    assert len(leftovers) == 1 and "ranged=True" in leftovers[0].read_text()


def test_unevaluable_m_end_is_noted_and_still_rendered(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "small.yaml").write_text("params:\n  - {M: 1, M_END: LIMIT + 1, N: 8, K: 8, TILE: 16}\n")
    code, _, err = run_cli(table_args(project, "small"), capsys)
    assert (code, err) == (
        0,
        f"note: {project / 'small.yaml'}: params[0]: M_END 'LIMIT + 1' is not an integer expression; "
        "skipped in the overlap check\n",
    )
    assert "dict(m=1, m_end=LIMIT + 1, tile=16)," in (project / "tables.py").read_text()


def test_tables_sharing_a_target_must_not_share_markers(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tables = declared_tables(project)
    tables["large"]["begin_marker"] = "BEGIN-TUNING-LIST-SMALL"
    params = write_params(project, tables)
    code, _, err = run_cli(["codegen", "--all", "--params", str(params)], capsys)
    assert (code, err) == (
        2, f"error: {project / 'tables.py'}: tables small and large both use the marker BEGIN-TUNING-LIST-SMALL\n"
    )
    assert (project / "tables.py").read_text() == TARGET
