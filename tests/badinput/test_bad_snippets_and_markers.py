"""Bad snippets, targets and markers: one error line naming the file, exit 2, no target touched.

The dispatch list's snippet (kernels/snippets/gemm_dispatch.snippet) and the generated file are
edited in a copy of the project; ``tunetable codegen --all`` must refuse before writing anything.
A Modular manifest and snippet (tests/fixtures/codegen) still render verbatim, byte for byte.
"""

from __future__ import annotations

import shutil

import pytest
from badinput_support import REPO, Case, Project, ids, make_project, run_cli

SNIPPET = "kernels/snippets/gemm_dispatch.snippet"
TARGET = "kernels/tuning_configs.py"
E_TARGET = r"error: kernels/tuning_configs\.py"
E_SNIPPET = r"error: kernels/snippets/gemm_dispatch\.snippet"


def edit(path: str, old: str, new: str):
    """Replace the first ``old`` of a file."""
    return lambda p: p.edit(path, old, new)


def target_to_directory(p: Project) -> None:
    p.path(TARGET).unlink()
    p.path(TARGET).mkdir()


def marker_twice(p: Project) -> None:
    p.write(TARGET, p.text(TARGET) + "# BEGIN-TUNING-LIST-GEMM_MMA (a second copy)\n")


def end_before_begin(p: Project) -> None:
    text = p.text(TARGET)
    text = text.replace("    # BEGIN-TUNING-LIST-GEMM_DISPATCH\n", "    # (moved)\n", 1)
    p.write(TARGET, text + "# BEGIN-TUNING-LIST-GEMM_DISPATCH\n")


CASES = [
    Case("begin-marker-missing", edit(TARGET, "# BEGIN-TUNING-LIST-GEMM_MMA", "# BEGIN-TUNING-LIST-GEMM_MMX"),
         rf"{E_TARGET}: Expected exactly one begin marker: BEGIN-TUNING-LIST-GEMM_MMA"),
    Case("begin-marker-twice", marker_twice,
         rf"{E_TARGET}: Expected exactly one begin marker: BEGIN-TUNING-LIST-GEMM_MMA"),
    Case("end-marker-missing", edit(TARGET, "# END-TUNING-LIST-GEMM_WGMMA", "# END-OF-IT"),
         rf"{E_TARGET}: Expected exactly one end marker: END-TUNING-LIST-GEMM_WGMMA"),
    Case("end-before-begin", end_before_begin, rf"{E_TARGET}: The begin marker must precede the end marker"),
    Case("target-not-utf8", lambda p: p.write(TARGET, p.path(TARGET).read_bytes() + b"# \xc3\x28\n"),
         rf"{E_TARGET}: line \d+: not UTF-8 text \(byte \d+\)"),
    Case("target-a-folder", target_to_directory, rf"{E_TARGET}: (is a directory, expected a file|cannot write: .*)"),
    Case("target-missing", lambda p: p.path(TARGET).unlink(), rf"{E_TARGET}: no such file"),
    Case("snippet-not-utf8", lambda p: p.write(SNIPPET, p.path(SNIPPET).read_bytes() + b"\xfe\n"),
         rf"{E_SNIPPET}: line \d+: not UTF-8 text \(byte \d+\)"),
    Case("snippet-missing", lambda p: p.path(SNIPPET).unlink(), rf"{E_SNIPPET}: no such file"),
    Case("snippet-string-field-unquoted", edit(SNIPPET, 'table="[@TABLE]"',
         "table=[@TABLE]"),
         rf"{E_SNIPPET}: \[@TABLE\] is a string field: write it between quotes, so that it renders a"
         rf"s a string literal"),
    Case("snippet-string-field-half-quoted", edit(SNIPPET, 'kernel="[@KERNEL]"', 'kernel="[@KERNEL]'),
         rf"{E_SNIPPET}: \[@KERNEL\] is a string field: .*"),
    Case("snippet-number-field-quoted", edit(SNIPPET, "speedup_vs_cublas=[@SPEEDUP_VS_CUBLAS]",
                                             'speedup_vs_cublas="[@SPEEDUP_VS_CUBLAS]"'),
         rf"{E_SNIPPET}: \[@SPEEDUP_VS_CUBLAS\] is not a string field: write it without quotes, so that it renders "
         r"as the literal of its type"),
    Case("snippet-unknown-placeholder", edit(SNIPPET, "m=[@M],", "m=[@M], evil=[@EVIL],"),
         rf"{E_SNIPPET}: \[@EVIL\] is not a field of dispatch list gemm_dispatch \(fields: M, M_END, N, K, KERNEL, "
         r"TABLE, CONFIG_ID, SPEEDUP_VS_CUBLAS\)"),
    Case("tables-sharing-a-marker", edit("params.yaml", 'end_marker: "END-TUNING-LIST-GEMM_WGMMA"',
                                         'end_marker: "END-TUNING-LIST-GEMM_MMA"'),
         rf"{E_TARGET}: tables gemm_mma and gemm_wgmma both use the marker END-TUNING-LIST-GEMM_MMA"),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_bad_snippet_or_marker(tmp_path, case):
    project = make_project(tmp_path)
    case.mutate(project)
    project.freeze()
    run_cli(project, "codegen", "--all").expect_error(case.error)


def test_a_modular_manifest_still_renders_verbatim(tmp_path):
    """Modular's sm100 fixtures (strings such as `DType.float8_e4m3fn` and `7000 + 32` are Mojo code there)
    render byte-identically through the CLI's six flags: only tunetable's own declared tables are typed."""
    fixtures = REPO / "tests" / "fixtures" / "codegen"
    project = make_project(tmp_path, files=())
    project.root.mkdir(parents=True)
    for name in ("tuning_table_sm100_bf16.yaml", "tuning_table_sm100_fp8.yaml", "tuning_sm100.mojo.snippet",
                 "tuning_fp8.mojo.snippet", "tuning_fp8_ranged.mojo.snippet"):
        shutil.copyfile(fixtures / name, project.path(name))
    shutil.copyfile(fixtures / "tuning_configs_before.mojo", project.path("tuning_configs.mojo"))
    project.freeze()
    for manifest, snippet, marker, label, extra in (
            ("tuning_table_sm100_bf16.yaml", "tuning_sm100.mojo.snippet", "SM100-BF16", "tuning_table_sm100_bf16.yaml",
             ()),
            ("tuning_table_sm100_fp8.yaml", "tuning_fp8.mojo.snippet", "SM100-FP8",
             "gpu/linalg/tuning_table_sm100_fp8.yaml", ("--snippet-variant", "ranged=tuning_fp8_ranged.mojo.snippet"))):
        run_cli(project, "codegen", "--manifest", manifest, "--snippet", snippet, "--target", "tuning_configs.mojo",
                "--begin-marker", f"BEGIN-TUNING-LIST-{marker}", "--end-marker", f"END-TUNING-LIST-{marker}",
                "--source-label", label, *extra).expect_ok(changed=["tuning_configs.mojo"])
    assert project.path("tuning_configs.mojo").read_bytes() == (fixtures / "tuning_configs_expected.mojo").read_bytes()
