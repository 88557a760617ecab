"""Bad params.yaml: one error line naming params.yaml and the place, exit 2, nothing written, nothing run.

Each case edits a copy of the project's params.yaml and runs ``tunetable grid --table gemm_mma
--dry-run`` (load, validate, expand: what every command does first); a few run codegen or compile.
"""

from __future__ import annotations

import pytest
from badinput_support import Case, Project, ids, make_project, run_cli

P = "params.yaml"
BOMB = "".join([f"l0: &l0 [{', '.join(['x'] * 9)}]\n"]
               + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9)])
MERGE_BOMB = "a0: &a0 {x: 1, y: 2}\n" + "".join(
    f"a{i}: &a{i} {{<<: [{', '.join([f'*a{i - 1}'] * 8)}]}}\n" for i in range(1, 8))


def append(text: str):
    """Append text to params.yaml."""
    return lambda p: p.write(P, p.text(P) + text)


def replace(old: str, new: str):
    """Replace the first ``old`` in params.yaml."""
    return lambda p: p.edit(P, old, new)


def write(data: str | bytes):
    """Replace params.yaml."""
    return lambda p: p.write(P, data)


def table_twice(p: Project) -> None:
    """The gemm_mma table pasted a second time under its own name (the second copy would win)."""
    text = p.text(P)
    start, end = text.index("  gemm_mma:\n"), text.index("  gemm_wgmma:\n")
    p.write(P, text[:end] + text[start:end] + text[end:])


def as_directory(p: Project) -> None:
    p.path(P).unlink()
    p.path(P).mkdir()


def remove(p: Project) -> None:
    p.path(P).unlink()


def payload_tag(p: Project) -> None:
    p.write(P, p.text(P) + f"evil: !!python/object/apply:os.system ['touch {p.marker}']\n")


def yte_template(p: Project) -> None:
    """Snakemake's configfile parser (YTE) would evaluate this; tunetable reads params.yaml itself."""
    p.write(P, "__use_yte__: true\n" + p.text(P) + f"evil: ?__import__('os').system('touch {p.marker}')\n")


def rule(text: str):
    """A grid rule of table gemm_mma (rules are expressions: ast whitelist, never eval)."""
    return replace("    grid:\n      # kbench-style", f"    grid:\n      rules: [{text!r}]\n      # kbench-style")


GRID_WHERE = r"tables\.gemm_mma\.grid\.rules\[0\]"

CASES = [
    Case("duplicate-top-level-key", append("select:\n  tie_tolerance: 0.5\n"),
         r"error: params\.yaml: line \d+: duplicate key 'select' \(first at line \d+\); YAML would keep only the last"),
    Case("duplicate-nested-key", replace("  rounds: 10 ", "  rounds: 10\n  rounds: 3 "),
         r"error: params\.yaml: line \d+: duplicate key 'rounds' \(first at line \d+\).*"),
    Case("table-pasted-twice", table_twice,
         r"error: params\.yaml: line 137: duplicate key 'gemm_mma' \(first at line 25\).*"),
    Case("alias-bomb", append("\n" + BOMB),
         r"error: params\.yaml: aliases expand the document to \d+ nodes \(limit \d+: .*\); an alias bomb\?"),
    Case("merge-key-bomb", append("\n" + MERGE_BOMB), r"error: params\.yaml: aliases expand the document to .*"),
    Case("recursive-alias", append("loop: &loop [1, *loop]\n"),
         r"error: params\.yaml: line \d+: an alias refers to a node that contains it \(a recursive document\)"),
    Case("not-utf8", lambda p: p.write(P, p.text(P).encode() + b"# caf\xe9\n"),
         r"error: params\.yaml: line \d+: not UTF-8 text \(byte \d+\)"),
    Case("utf16", lambda p: p.write(P, p.text(P).encode("utf-16")), r"error: params\.yaml: line 1: not UTF-8 text .*"),
    Case("a-folder", as_directory, r"error: Invalid value for '--params': File 'params\.yaml' is a directory\. "
                                    r"\(see `tunetable grid --help`\)"),
    Case("missing", remove, r"error: params\.yaml: no such file"),
    Case("control-character", append("extra: \"\x07\"\n"), r"error: params\.yaml: malformed YAML: unacceptable .*"),
    Case("nul-escape-in-a-marker", replace('begin_marker: "BEGIN-TUNING-LIST-GEMM_MMA"',
                                           'begin_marker: "BEGIN-TUNING-LIST-GEMM_MMA\\0"'),
         r"error: params\.yaml: tables\.gemm_mma\.codegen\.begin_marker: .* does not match .*"),
    Case("newline-in-a-source-label", replace("source_label: manifests/gemm_mma.yaml",
                                              'source_label: "x\\nimport os"'),
         r"error: params\.yaml: tables\.gemm_mma\.codegen\.source_label: .* does not match .*"),
    Case("python-tag-payload", payload_tag,
         r"error: params\.yaml: line \d+: malformed YAML: could not determine a constructor for the tag "
         r"'tag:yaml\.org,2002:python/object/apply:os\.system'"),
    Case("yte-template-payload", yte_template,
         r"error: params\.yaml: \(top level\): Additional properties are not allowed \('__use_yte__', 'evil' .*"),
    Case("typo-under-compile-limits", replace("  cache_dir: .cache/cubins\n",
                                              "  cache_dir: .cache/cubins\n  limits:\n    max_shared_byte: 1000\n"),
         r"error: params\.yaml: compile\.limits: Additional properties are not allowed \('max_shared_byte' .*"),
    Case("typo-top-level", append("selectt:\n  tie_tolerance: 0.5\n"),
         r"error: params\.yaml: \(top level\): Additional properties are not allowed \('selectt' was unexpected\)"),
    Case("typo-in-a-table", replace("    dtype: bf16\n", "    dtype: bf16\n    dtpye: bf16\n"),
         r"error: params\.yaml: tables\.gemm_mma: Additional properties are not allowed \('dtpye' .*"),
    Case("unknown-backend", replace("  backend: auto ", "  backend: magic "),
         r"error: params\.yaml: bench\.backend: 'magic' is not one of \['cuda', 'replay', 'auto'\]"),
    Case("grid-product-40-to-the-9", replace(
        "        - name: large            # compute-bound",
        "        - name: huge\n" + "".join(f"          P{i}: [{', '.join(str(v) for v in range(40))}]\n"
                                           for i in range(9))
        + "        - name: large            # compute-bound"),
        r"error: params\.yaml: tables\.gemm_mma\.grid: the groups expand to 262144000000\d+ configurations before "
        r"any rule \(huge: 262144000000000, .*\), more than max_configs = 1000000: .*"),
    Case("grid-cap-setting", replace("    grid:\n      # kbench-style", "    grid:\n      max_configs: 5\n      # kb"),
         r"error: params\.yaml: tables\.gemm_mma\.grid: the groups expand to \d+ configurations .* m"
         r"ax_configs = 5: .*"),
    Case("rule-tower-of-powers", rule("((BLOCK_M ** 64) ** 64) ** 64 > 0"),
         rf"error: params\.yaml: {GRID_WHERE}: cannot evaluate rule .* (exponent|bits).*"),
    Case("rule-string-times-10-to-the-15", rule('"x" * 10 ** 15 == "x"'),
         rf"error: params\.yaml: {GRID_WHERE}: cannot evaluate rule .*: a string of 1 x 1000000000000000 "
         r"characters \(at most 4096\)"),
    Case("rule-string-formatting", rule('"%999999999d" % BLOCK_M == ""'),
         rf"error: params\.yaml: {GRID_WHERE}: cannot evaluate rule .*: '%' on a string .*"),
    Case("rule-calls-a-function", lambda p: rule(f"__import__('os').system('touch {p.marker}') == 0")(p),
         rf"error: params\.yaml: {GRID_WHERE}: call not allowed in rule .*"),
    Case("rule-attribute-access", rule("BLOCK_M.__class__ == 1"),
         rf"error: params\.yaml: {GRID_WHERE}: attribute access not allowed in rule .*"),
    Case("rule-of-100k-characters", rule("1 + " * 25000 + "1 > 0"),
         r"error: params\.yaml: tables\.gemm_mma\.grid\.rules\[0\]: '1 \+ 1 .{40,70}\.\.\. \(100007 characters\) "
         r"is too long"),
    Case("rule-nested-parentheses", rule("(" * 300 + "1" + ")" * 300 + " > 0"),
         rf"error: params\.yaml: {GRID_WHERE}: (syntax error in|nested too deeply).*"),
    Case("grid-string-with-a-quote", replace("          BLOCK_M: [128, 256]\n", "          BLOCK_M: [128, 'a\"b']\n"),
         r"error: params\.yaml: tables\.gemm_mma\.grid\.groups\[0\]\.BLOCK_M\[1\]: 'a\"b' is not valid under any "
         r"of the given schemas"),
    Case("grid-huge-hex-integer", replace("          BLOCK_M: [128, 256]\n",
                                          "          BLOCK_M: [128, 0x" + "f" * 5000 + "]\n"),
         r"error: params\.yaml: tables\.gemm_mma\.grid\.groups\[0\]\.BLOCK_M\[1\]: an integer of 20000 bits "
         r"\(at most 64\)"),
    Case("grid-parameter-name-with-a-space", replace("          BLOCK_M: [128, 256]\n", "          'BLOCK M': [128]\n"),
         r"error: params\.yaml: tables\.gemm_mma\.grid\.groups\[0\]: 'BLOCK M' does not match .*"),
    Case("shape-not-an-integer", replace("      M: [1, 8, 32,", "      M: [1, 8.5, 32,"),
         r"error: params\.yaml: tables\.gemm_mma\.shapes\.M\[1\]: 8\.5 is not of type 'integer'"),
    Case("shape-zero", replace("      M: [1, 8, 32,", "      M: [0, 8, 32,"),
         r"error: params\.yaml: tables\.gemm_mma\.shapes\.M\[0\]: 0 is less than the minimum of 1"),
    Case("shape-beyond-int32", replace("      M: [1, 8, 32,", "      M: [1, 8, 4294967296,"),
         r"error: params\.yaml: tables\.gemm_mma\.shapes\.M\[2\]: 4294967296 is greater than the maximum of .*"),
    Case("dispatch-names-an-unknown-table", replace("    tables: [gemm_mma, ", "    tables: [nope, gemm_mma, "),
         r"error: params\.yaml: dispatch\.gemm_dispatch\.tables\[0\]: unknown table 'nope' \(declared: .*\)"),
    Case("five-thousand-digit-integer", replace("  rounds: 10 ", "  rounds: " + "9" * 5000 + " "),
         r"error: params\.yaml: line \d+: malformed YAML: Exceeds the limit \(4300 digits\).*"),
    Case("impossible-date", append("when: 2024-13-45\n"),
         r"error: params\.yaml: line \d+: malformed YAML: month must be in 1\.\.12"),
    Case("nested-1500-levels", append("deep: " + "[" * 1500 + "]" * 1500 + "\n"),
         r"error: params\.yaml: line \d+: malformed YAML: .*nesting depth.*|error: params\.yaml: .*nested too deeply"),
    Case("tab-indentation", replace("  rounds: 10 ", "\trounds: 10 "),
         r"error: params\.yaml: line \d+: malformed YAML: .*"),
    Case("empty-file", write(""), r"error: params\.yaml: expected a YAML mapping at the top level"),
    Case("a-list-not-a-mapping", write("- tables\n- compile\n"),
         r"error: params\.yaml: expected a YAML mapping at the top level"),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_bad_params(tmp_path, case):
    project = make_project(tmp_path)
    case.mutate(project)
    project.freeze()
    run_cli(project, "grid", "--table", "gemm_mma", "--dry-run").expect_error(case.error)


@pytest.mark.parametrize("argv", [("codegen", "--all"), ("compile", "--table", "gemm_mma"),
                                  ("bench", "--table", "gemm_mma", "--backend", "replay", "--all-shapes")],
                         ids=["codegen", "compile", "bench"])
def test_every_command_reads_params_through_the_same_loader(tmp_path, argv):
    project = make_project(tmp_path)
    append("select:\n  tie_tolerance: 0.5\n")(project)
    project.freeze()
    run_cli(project, *argv).expect_error(r"error: params\.yaml: line \d+: duplicate key 'select' .*")
