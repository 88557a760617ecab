"""Modular's public tuning_codegen assertions, ported: each case against our module and our CLI.

Source of the facts (read, not copied): modularml/mojo @ 5d09008, max/kernels/benchmarks/autotune/
tests/test_tuning_codegen.py (six tests) and BUILD.bazel (one ``modular_run_binary_test`` per table:
``tuning_codegen --check --manifest=... --snippet=... [--snippet-variant=NAME=PATH] --target=...
--begin-marker=... --end-marker=... --source-label=...`` run from the repository root, several tables
sharing one target file with distinct markers). Their code imports ``tuning_codegen``; ours is
``tunetable.codegen`` (same function names and keyword arguments) and ``tunetable codegen`` (same flags).
Where we differ on purpose (CRLF targets stay CRLF, errors also name the file), the test says so.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tunetable import codegen
from tunetable.cli import main
from tunetable.errors import TuneTableError

FIXTURES = Path(__file__).parent / "fixtures" / "codegen"


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """The real CLI entry point in-process: (exit status, stdout, stderr)."""
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def single_table(tmp_path: Path, *, manifest: str, snippet: str, target: str = "# BEGIN\nstale\n# END\n",
                 variants: dict[str, str] | None = None) -> list[str]:
    """Write one table's files under ``tmp_path``; the ``codegen`` flags that render it (Modular's `=` form)."""
    (tmp_path / "tuning.yaml").write_text(manifest)
    (tmp_path / "tuning.mojo.snippet").write_text(snippet)
    (tmp_path / "tuning_configs.mojo").write_text(target)
    flags = ["codegen", f"--manifest={tmp_path / 'tuning.yaml'}", f"--snippet={tmp_path / 'tuning.mojo.snippet'}",
             f"--target={tmp_path / 'tuning_configs.mojo'}", "--begin-marker=# BEGIN", "--end-marker=# END",
             "--source-label=tuning.yaml"]
    for name, text in (variants or {}).items():
        (tmp_path / f"{name}.snippet").write_text(text)
        flags.append(f"--snippet-variant={name}={tmp_path / f'{name}.snippet'}")
    return flags


# -- test_render_snippet_formats_mojo_values ------------------------------------------------------------

def test_render_snippet_formats_mojo_values_module() -> None:
    assert codegen.render_snippet("Config(M=[@M], enabled=[@ENABLED])", {"M": 64, "ENABLED": True},
                                  indent="  ") == "  Config(M=64, enabled=True)"


def test_render_snippet_formats_mojo_values_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = single_table(tmp_path, manifest="params:\n- M: 64\n  ENABLED: true\n",
                         snippet="Config(M=[@M], enabled=[@ENABLED])\n")
    assert run_cli(flags, capsys) == (0, "", "")
    lines = (tmp_path / "tuning_configs.mojo").read_text().splitlines()
    assert "        Config(M=64, enabled=True)," in lines   # the CLI has no --indent: Modular's 8 spaces


# -- test_render_snippet_rejects_missing_parameters -----------------------------------------------------

def test_render_snippet_rejects_missing_parameters_module() -> None:
    with pytest.raises(ValueError, match="Missing snippet parameters: N"):
        codegen.render_snippet("Config(M=[@M], N=[@N])", {"M": 64})


def test_render_snippet_rejects_missing_parameters_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = single_table(tmp_path, manifest="params:\n- M: 64\n", snippet="Config(M=[@M], N=[@N])\n")
    code, out, err = run_cli(flags, capsys)
    assert code == 2 and out == ""
    assert err == f"error: {tmp_path / 'tuning.yaml'}: params[0]: Missing snippet parameters: N\n"
    assert (tmp_path / "tuning_configs.mojo").read_text() == "# BEGIN\nstale\n# END\n"


# -- test_load_manifest_preserves_order_and_rejects_duplicates ------------------------------------------

ORDERED = "\nparams:\n- M: 64\n  N: 128\n- M: 32\n  N: 256\n"
DUPLICATED = "\nparams:\n- M: 64\n- M: 64\n"


def test_load_manifest_preserves_order_and_rejects_duplicates_module(tmp_path: Path) -> None:
    manifest = tmp_path / "tuning.yaml"
    manifest.write_text(ORDERED)
    assert codegen.load_manifest(manifest) == [{"M": 64, "N": 128}, {"M": 32, "N": 256}]
    manifest.write_text(DUPLICATED)
    with pytest.raises(ValueError, match="duplicate params entry at index 1"):
        codegen.load_manifest(manifest)


def test_load_manifest_preserves_order_and_rejects_duplicates_cli(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    flags = single_table(tmp_path, manifest=ORDERED, snippet="Config(M=[@M], N=[@N])\n")
    assert run_cli(flags, capsys)[0] == 0
    generated = [line.strip() for line in (tmp_path / "tuning_configs.mojo").read_text().splitlines()]
    assert [line for line in generated if line.startswith("Config(")] == ["Config(M=64, N=128),",
                                                                           "Config(M=32, N=256),"]
    (tmp_path / "tuning.yaml").write_text(DUPLICATED)
    code, _, err = run_cli(flags, capsys)
    assert code == 2 and "duplicate params entry at index 1" in err and len(err.splitlines()) == 1


# -- test_replace_generated_region_requires_unique_markers ----------------------------------------------

SOURCE = "before\n# BEGIN\nstale\n# END\nafter\n"


def test_replace_generated_region_requires_unique_markers_module() -> None:
    assert codegen.replace_generated_region(SOURCE, begin_marker="# BEGIN", end_marker="# END",
                                            generated="fresh") == "before\n# BEGIN\nfresh\n# END\nafter\n"
    with pytest.raises(ValueError, match="exactly one begin marker"):
        codegen.replace_generated_region(SOURCE + "# BEGIN\n", begin_marker="# BEGIN", end_marker="# END",
                                         generated="fresh")


def test_replace_generated_region_requires_unique_markers_cli(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    flags = single_table(tmp_path, manifest="params:\n- M: 64\n", snippet="Config(M=[@M])\n", target=SOURCE)
    assert run_cli(flags, capsys)[0] == 0
    text = (tmp_path / "tuning_configs.mojo").read_text()
    assert text.startswith("before\n# BEGIN\n") and text.endswith("\n# END\nafter\n") and "stale" not in text
    (tmp_path / "tuning_configs.mojo").write_text(SOURCE + "# BEGIN\n")
    code, _, err = run_cli(flags, capsys)
    assert code == 2 and "Expected exactly one begin marker: # BEGIN" in err
    assert (tmp_path / "tuning_configs.mojo").read_text() == SOURCE + "# BEGIN\n"   # untouched


# -- test_render_region_selects_entry_template ----------------------------------------------------------

TEMPLATED_REGION = ("# Automatically generated from [tuning.yaml]\n# index: [0]\nConfig(M=64),\n"
                    "# Automatically generated from [tuning.yaml]\n# index: [1]\nConfig(M=128, M_end=160),")


def test_render_region_selects_entry_template_module() -> None:
    assert codegen.render_region([{"M": 64}, {"M": 128, "M_END": 160, "_template": "ranged"}], "Config(M=[@M])",
                                 source_label="tuning.yaml",
                                 snippet_variants={"ranged": "Config(M=[@M], M_end=[@M_END])"},
                                 indent="") == TEMPLATED_REGION
    with pytest.raises(ValueError, match="unknown template 'missing'"):
        codegen.render_region([{"M": 64, "_template": "missing"}], "Config(M=[@M])", source_label="tuning.yaml")


def test_render_region_selects_entry_template_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = single_table(tmp_path, manifest="params:\n- M: 64\n- M: 128\n  M_END: 160\n  _template: ranged\n",
                         snippet="Config(M=[@M])\n", variants={"ranged": "Config(M=[@M], M_end=[@M_END])\n"})
    assert run_cli(flags, capsys)[0] == 0
    indented = "\n".join(f"        {line}" for line in TEMPLATED_REGION.splitlines())
    assert (tmp_path / "tuning_configs.mojo").read_text() == f"# BEGIN\n{indented}\n# END\n"
    (tmp_path / "tuning.yaml").write_text("params:\n- M: 64\n  _template: missing\n")
    code, _, err = run_cli(flags, capsys)
    assert code == 2 and "params[0] references unknown template 'missing'" in err


# -- test_generate_target_renders_manifest_entries ------------------------------------------------------

GENERATED_TARGET = ("# BEGIN\n"
                    "        # Automatically generated from [tuning.yaml]\n"
                    "        # index: [0]\n"
                    "        Config(M=64),\n"
                    "        # Automatically generated from [tuning.yaml]\n"
                    "        # index: [1]\n"
                    "        Config(M=128),\n"
                    "# END\n")


def test_generate_target_renders_manifest_entries_module(tmp_path: Path) -> None:
    single_table(tmp_path, manifest="params:\n- M: 64\n- M: 128\n", snippet="Config(M=[@M])\n")
    assert codegen.generate_target(manifest_path=tmp_path / "tuning.yaml",
                                   snippet_path=tmp_path / "tuning.mojo.snippet",
                                   target_path=tmp_path / "tuning_configs.mojo", begin_marker="# BEGIN",
                                   end_marker="# END", source_label="tuning.yaml") == GENERATED_TARGET
    assert (tmp_path / "tuning_configs.mojo").read_text() == "# BEGIN\nstale\n# END\n"   # generate writes nothing


def test_generate_target_renders_manifest_entries_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = single_table(tmp_path, manifest="params:\n- M: 64\n- M: 128\n", snippet="Config(M=[@M])\n")
    assert run_cli([*flags, "--check"], capsys)[0] == 1                 # stale before the first run
    assert run_cli(flags, capsys) == (0, "", "")
    assert (tmp_path / "tuning_configs.mojo").read_text() == GENERATED_TARGET
    assert run_cli([*flags, "--check"], capsys) == (0, "", "")          # fresh: silent, exit 0


def test_every_module_error_is_a_value_error() -> None:
    """Users' ``except ValueError`` around Modular's functions keeps working around ours."""
    assert issubclass(TuneTableError, ValueError)
    with pytest.raises(ValueError, match="Invalid --snippet-variant 'x'; expected NAME=PATH"):
        codegen.parse_snippet_variants(["x"])
    with pytest.raises(ValueError, match="Duplicate snippet variant 'a'"):
        codegen.parse_snippet_variants(["a=1", "a=2"])
    with pytest.raises(ValueError, match="The begin marker must precede the end marker"):
        codegen.replace_generated_region("# END\n# BEGIN\n", begin_marker="BEGIN", end_marker="END", generated="")
    with pytest.raises(ValueError, match=r"params\[0\]\._template must be a string"):
        codegen.render_region([{"M": 1, "_template": 3}], "C([@M])", source_label="x")


# -- BUILD.bazel: one --check freshness test per table, several tables in one target --------------------

SM100 = "max/kernels/src/linalg/matmul/gpu/sm100_structured/default"
FRESHNESS = {   # table -> (manifest, snippet, variants, markers, source label), as the BUILD file wires them
    "bf16": ("tuning_table_sm100_bf16.yaml", "tuning_sm100.mojo.snippet", {}, "SM100-BF16",
             "tuning_table_sm100_bf16.yaml"),
    "fp8": ("tuning_table_sm100_fp8.yaml", "tuning_fp8.mojo.snippet", {"ranged": "tuning_fp8_ranged.mojo.snippet"},
            "SM100-FP8", "gpu/linalg/tuning_table_sm100_fp8.yaml"),
}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A Modular-shaped workspace: the sm100 manifests, snippets and their (fresh) shared target."""
    folder = tmp_path / SM100
    folder.mkdir(parents=True)
    for manifest, snippet, variants, _, _ in FRESHNESS.values():
        for name in (manifest, snippet, *variants.values()):
            shutil.copy(FIXTURES / name, folder / name)
    shutil.copy(FIXTURES / "tuning_configs_expected.mojo", folder / "tuning_configs.mojo")
    return tmp_path


def build_args(table: str) -> list[str]:
    """The args of ``sm100_<table>_tuning_codegen_test``: repository-relative paths, ``--flag=value``."""
    manifest, snippet, variants, markers, label = FRESHNESS[table]
    return ["codegen", "--check", f"--manifest={SM100}/{manifest}", f"--snippet={SM100}/{snippet}",
            *[f"--snippet-variant={name}={SM100}/{path}" for name, path in variants.items()],
            f"--target={SM100}/tuning_configs.mojo", f"--begin-marker=BEGIN-TUNING-LIST-{markers}",
            f"--end-marker=END-TUNING-LIST-{markers}", f"--source-label={label}"]


@pytest.mark.parametrize("table", sorted(FRESHNESS))
def test_freshness_check_per_table_from_the_workspace_root(workspace: Path, table: str,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(workspace)
    assert run_cli(build_args(table), capsys) == (0, "", "")


@pytest.mark.parametrize("table", sorted(FRESHNESS))
def test_freshness_check_under_bazel_run(workspace: Path, table: str, tmp_path_factory: pytest.TempPathFactory,
                                         monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``bazel run`` starts the tool in its runfiles folder and names the caller's folder in the environment."""
    monkeypatch.chdir(tmp_path_factory.mktemp("runfiles"))
    monkeypatch.setenv("BUILD_WORKING_DIRECTORY", str(workspace))
    assert run_cli(build_args(table), capsys) == (0, "", "")


def test_bad_build_working_directory_is_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BUILD_WORKING_DIRECTORY", str(tmp_path / "gone"))
    code, _, err = run_cli(build_args("bf16"), capsys)
    assert code == 2 and err.startswith(f"error: {tmp_path / 'gone'}: BUILD_WORKING_DIRECTORY: cannot change")


def test_freshness_stale_table_fails_with_modulars_diff_and_writes_nothing(
        workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(workspace)
    manifest = workspace / SM100 / "tuning_table_sm100_fp8.yaml"
    manifest.write_text(manifest.read_text().replace("TUNE_BN: 128", "TUNE_BN: 64"))
    before = (workspace / SM100 / "tuning_configs.mojo").read_bytes()
    code, out, err = run_cli(build_args("fp8"), capsys)
    assert code == 1 and out == ""
    target = f"{SM100}/tuning_configs.mojo"
    assert f"--- {target}\n+++ {target} (generated)\n" in err
    assert "\n-            mma_shape=Index(64 * 2, 128 * 2, mma_k),\n" in err
    assert "\n+            mma_shape=Index(64 * 2, 64 * 2, mma_k),\n" in err
    assert (workspace / SM100 / "tuning_configs.mojo").read_bytes() == before
    assert run_cli(build_args("bf16"), capsys) == (0, "", "")   # the other table in the same file is still fresh


# -- where we differ on purpose: a CRLF target stays CRLF (Modular's read_text/write_text make it LF) ---

def test_crlf_target_keeps_crlf_and_checks_fresh(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = single_table(tmp_path, manifest="params:\n- M: 64\n- M: 128\n", snippet="Config(M=[@M])\n")
    target = tmp_path / "tuning_configs.mojo"
    target.write_bytes(b"head\r\n# BEGIN\r\nstale\r\n# END\r\ntail\r\n")
    assert run_cli(flags, capsys) == (0, "", "")
    data = target.read_bytes()
    assert data == ("head\r\n" + GENERATED_TARGET.replace("\n", "\r\n") + "tail\r\n").encode()
    assert run_cli([*flags, "--check"], capsys) == (0, "", "")
