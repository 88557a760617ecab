"""Bad manifests: codegen types every value by the table's declared fields, renders literals only.

Each case edits a copy of a checked-in manifest and runs ``tunetable codegen --all``: one error line
naming the manifest and the entry (``params[i]``) or the line, exit 2, kernels/tuning_configs.py
byte-identical, and nothing from the manifest ran (an injected string would touch ``MARKER`` if the
generated module were imported).
"""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest
from badinput_support import Case, Project, ids, make_project, run_cli

MMA = "manifests/gemm_mma.yaml"
WGMMA = "manifests/gemm_wgmma.yaml"
SWAP = "manifests/gemm_wgmma_swap.yaml"
DISPATCH = "manifests/gemm_dispatch.yaml"
DISPATCH_H100 = "manifests/gemm_dispatch.h100.yaml"
TARGET = "kernels/tuning_configs.py"
FIRST = r"params\[0\]"
BOMB = "".join([f"l0: &l0 [{', '.join(['x'] * 9)}]\n"]
               + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9)])


def edit(manifest: str, old: str, new: str):
    """Replace the first ``old`` of a manifest."""
    return lambda p: p.edit(manifest, old, new)


def first_entry(manifest: str, old: str, new: str):
    """Replace ``old`` inside the first entry of a manifest (after ``params:``, before the second entry)."""
    def mutate(p: Project) -> None:
        head, body = p.text(manifest).split("params:\n", 1)
        first, separator, rest = body.partition("\n  - ")
        assert old in first + "\n", old
        p.write(manifest, head + "params:\n" + (first + "\n").replace(old, new, 1)[:-1] + separator + rest)
    return mutate


def first_value(manifest: str, **values: object):
    """Set keys of the first entry of a manifest to these values, whatever they were."""
    def mutate(p: Project) -> None:
        head, body = p.text(manifest).split("params:\n", 1)
        for key, value in values.items():
            body, count = re.subn(rf"^    {key}: .*$", lambda _: f"    {key}: {value}", body, count=1, flags=re.M)
            assert count == 1, key
        p.write(manifest, head + "params:\n" + body)
    return mutate


def drop_key(manifest: str, key: str):
    """Delete the first entry's ``key`` line, whatever it holds (a manifest written before the key existed)."""
    def mutate(p: Project) -> None:
        head, body = p.text(manifest).split("params:\n", 1)
        body, count = re.subn(rf"^    {key}: .*\n", "", body, count=1, flags=re.M)
        assert count == 1, key
        p.write(manifest, head + "params:\n" + body)
    return mutate


def provenance_date(manifest: str, new: str):
    """Replace the provenance date line, whatever date it holds."""
    def mutate(p: Project) -> None:
        text, count = re.subn(r'^  date: ".*"$', lambda _: f'  date: "{new}"', p.text(manifest), count=1, flags=re.M)
        assert count == 1
        p.write(manifest, text)
    return mutate


def injection(field: str):
    """A string that, pasted into the generated module, would run code when it is imported."""
    def mutate(p: Project) -> None:
        payload = f'gemm_mma", x=__import__("os").system("touch {p.marker}"), y="'
        text = p.text(MMA)
        if field == "KERNEL":
            text = text.replace("  KERNEL: gemm_mma\n", f"  KERNEL: '{payload}'\n", 1)
        else:
            text = re.sub(r"^    CONFIG_ID: c[0-9a-f]{10}$", lambda _: f"    CONFIG_ID: '{payload}'", text, count=1,
                          flags=re.M)
        p.write(MMA, text)
    return mutate


def drop_line(manifest: str, line: str):
    """Delete the first line equal to ``line`` (after ``params:``)."""
    return first_entry(manifest, line + "\n", "")


def as_directory(p: Project) -> None:
    p.path(MMA).unlink()
    p.path(MMA).mkdir()


def remove(p: Project) -> None:
    p.path(MMA).unlink()


def payload_tag(p: Project) -> None:
    p.write(MMA, p.text(MMA) + f"evil: !!python/object/apply:os.system ['touch {p.marker}']\n")


def duplicate_entry(p: Project) -> None:
    head, body = p.text(MMA).split("params:\n", 1)
    entries = body.split("  - <<: *defaults\n")
    p.write(MMA, head + "params:\n" + "  - <<: *defaults\n".join([entries[0], entries[1], entries[1], *entries[2:]]))


E_MMA = r"error: manifests/gemm_mma\.yaml"
E_SPEEDUP = rf"error: manifests/gemm_dispatch\.yaml: {FIRST}: SPEEDUP_VS_CUBLAS: expected a finite positive number, got"
CASES = [
    Case("kernel-string-injection", injection("KERNEL"),
         rf"{E_MMA}: {FIRST}: KERNEL: 'gemm_mma\", x=__import__.*' is not one of gemm_mma"),
    Case("config-id-string-injection", injection("CONFIG_ID"),
         rf"{E_MMA}: {FIRST}: CONFIG_ID: 'gemm_mma\", .*' is not a configuration id \(c \+ 10 hex digits\)"),
    Case("m-not-a-number", first_entry(MMA, "    M: 1\n", "    M: abc\n"),
         rf"{E_MMA}: {FIRST}: M: expected an integer, got 'abc'"),
    Case("m-a-float", first_entry(MMA, "    M: 1\n", "    M: 1.5\n"),
         rf"{E_MMA}: {FIRST}: M: expected an integer, got 1\.5"),
    Case("m-a-quoted-number", first_entry(MMA, "    M: 1\n", '    M: "1"\n'),
         rf"{E_MMA}: {FIRST}: M: expected an integer, got '1'"),
    Case("m-a-boolean", first_entry(MMA, "    M: 1\n", "    M: true\n"),
         rf"{E_MMA}: {FIRST}: M: expected an integer, got True"),
    Case("m-end-below-m", first_value(MMA, M_END=1),
         rf"{E_MMA}: {FIRST}: M_END: 1 is outside \[2, 2147483647\]"),
    Case("empty-range", first_value(MMA, M=64, M_END=64),
         rf"{E_MMA}: {FIRST}: \[M, M_END\) = \[64, 64\) is empty: M must be below M_END"),
    Case("m-end-beyond-int32", first_value(MMA, M_END=4294967296),
         rf"{E_MMA}: {FIRST}: M_END: 4294967296 is outside \[2, 2147483647\]"),
    Case("m-zero", first_entry(MMA, "    M: 1\n", "    M: 0\n"),
         rf"{E_MMA}: {FIRST}: M: 0 is outside \[1, 2147483646\]"),
    Case("m-negative", first_entry(MMA, "    M: 1\n", "    M: -5\n"), rf"{E_MMA}: {FIRST}: M: -5 is outside .*"),
    Case("n-a-boolean", first_entry(MMA, "    N: 4096\n", "    N: yes\n"),
         rf"{E_MMA}: {FIRST}: N: expected an integer, got True"),
    Case("m-infinite", first_entry(MMA, "    M: 1\n", "    M: .inf\n"),
         rf"{E_MMA}: {FIRST}: M: expected an integer, got inf"),
    Case("m-nan", first_entry(MMA, "    M: 1\n", "    M: .nan\n"),
         rf"{E_MMA}: {FIRST}: M: expected an integer, got nan"),
    Case("tunable-changed-under-its-config-id", first_entry(MMA, "    BLOCK_M: 16\n", "    BLOCK_M: 32\n"),
         rf"{E_MMA}: {FIRST}: CONFIG_ID c[0-9a-f]{{10}} is not the id of the entry's tunables \(c[0-9a-f]{{10}}\)"),
    Case("tunable-null", first_value(MMA, STAGES="null"),
         rf"{E_MMA}: {FIRST}: STAGES: expected an integer, got None"),
    Case("tunable-beyond-int32", first_value(MMA, STAGES=99999999999),
         rf"{E_MMA}: {FIRST}: STAGES: 99999999999 is outside \[0, 2147483647\]"),
    Case("unknown-key", first_entry(MMA, "    M: 1\n", "    M: 1\n    EXTRA: 1\n"),
         rf"{E_MMA}: {FIRST}: EXTRA: not a field of table gemm_mma \(fields: M, M_END, N, K, KERNEL, .*\)"),
    Case("missing-key", drop_line(MMA, "    GROUP_M: 1"),
         rf"{E_MMA}: {FIRST}: lacks GROUP_M \(fields of table gemm_mma: .*\)"),
    Case("wrong-family", edit(MMA, "  KERNEL: gemm_mma\n", "  KERNEL: gemm_wgmma\n"),
         rf"{E_MMA}: {FIRST}: KERNEL: 'gemm_wgmma' is not one of gemm_mma"),
    Case("wgmma-tunable-a-string", first_entry(WGMMA, "    RASTER: 0\n", "    RASTER: row\n"),
         rf"error: manifests/gemm_wgmma\.yaml: {FIRST}: RASTER: expected an integer, got 'row'"),
    Case("dispatch-unknown-table", first_entry(DISPATCH, "    TABLE: gemm_mma\n", "    TABLE: gemm_nope\n"),
         r"error: manifests/gemm_dispatch\.yaml: params\[\d+\]: TABLE: 'gemm_nope' is not one of gemm_mma, "
         r"gemm_wgmma.*"),
    Case("dispatch-kernel-of-another-table", first_entry(DISPATCH, "    TABLE: gemm_mma\n", "    TABLE: gemm_wgmma\n"),
         r"error: manifests/gemm_dispatch\.yaml: params\[\d+\]: KERNEL gemm_mma is not the family of table "
         r"gemm_wgmma \(gemm_wgmma\)"),
    Case("dispatch-config-id-not-an-id", first_entry(DISPATCH, "    CONFIG_ID: c", "    CONFIG_ID: xc"),
         r"error: manifests/gemm_dispatch\.yaml: params\[\d+\]: CONFIG_ID: 'xc[0-9a-f]+' is not a configuration id .*"),
    Case("dispatch-speedup-missing", drop_key(DISPATCH, "SPEEDUP_VS_CUBLAS"),
         rf"error: manifests/gemm_dispatch\.yaml: {FIRST}: lacks SPEEDUP_VS_CUBLAS \(fields of dispatch list "
         r"gemm_dispatch: M, M_END, N, K, KERNEL, TABLE, CONFIG_ID, SPEEDUP_VS_CUBLAS\): a dispatch manifest from "
         r"before SPEEDUP_VS_CUBLAS: select it again \(`snakemake --cores 2 --forcerun select_gemm_dispatch`\)"),
    Case("device-dispatch-speedup-missing", drop_key(DISPATCH_H100, "SPEEDUP_VS_CUBLAS"),
         rf"error: manifests/gemm_dispatch\.h100\.yaml: {FIRST}: lacks SPEEDUP_VS_CUBLAS \(fields of dispatch list "
         r"gemm_dispatch\.h100: .*\): .* \(`snakemake --cores 2 --forcerun select_gemm_dispatch\.h100`\)"),
    Case("dispatch-speedup-a-word", first_value(DISPATCH, SPEEDUP_VS_CUBLAS="fast"), rf"{E_SPEEDUP} 'fast'"),
    Case("dispatch-speedup-a-quoted-number", first_value(DISPATCH, SPEEDUP_VS_CUBLAS='"1.05"'),
         rf"{E_SPEEDUP} '1\.05'"),
    Case("dispatch-speedup-negative", first_value(DISPATCH, SPEEDUP_VS_CUBLAS=-0.97), rf"{E_SPEEDUP} -0\.97"),
    Case("dispatch-speedup-zero", first_value(DISPATCH, SPEEDUP_VS_CUBLAS=0), rf"{E_SPEEDUP} 0"),
    Case("dispatch-speedup-nan", first_value(DISPATCH, SPEEDUP_VS_CUBLAS=".nan"), rf"{E_SPEEDUP} nan"),
    Case("dispatch-speedup-infinite", first_value(DISPATCH, SPEEDUP_VS_CUBLAS=".inf"), rf"{E_SPEEDUP} inf"),
    Case("dispatch-speedup-a-boolean", first_value(DISPATCH, SPEEDUP_VS_CUBLAS="true"), rf"{E_SPEEDUP} True"),
    Case("dispatch-speedup-null", first_value(DISPATCH, SPEEDUP_VS_CUBLAS="null"), rf"{E_SPEEDUP} None"),
    Case("duplicate-key-in-an-entry", first_entry(MMA, "    M: 1\n", "    M: 1\n    STAGES: 4\n"),
         rf"{E_MMA}: line \d+: duplicate key 'STAGES' \(first at line \d+\); YAML would keep only the last"),
    Case("duplicate-provenance", edit(MMA, "provenance:\n", "provenance: {}\nprovenance:\n"),
         rf"{E_MMA}: line 4: duplicate key 'provenance' \(first at line 3\).*"),
    Case("alias-bomb", lambda p: p.write(MMA, p.text(MMA) + BOMB),
         rf"{E_MMA}: aliases expand the document to .*"),
    Case("recursive-alias", lambda p: p.write(MMA, p.text(MMA) + "loop: &loop [*loop]\n"),
         rf"{E_MMA}: line \d+: an alias refers to a node that contains it \(a recursive document\)"),
    Case("not-utf8", lambda p: p.write(MMA, p.text(MMA).encode() + b"# \xff\n"),
         rf"{E_MMA}: line \d+: not UTF-8 text .*"),
    Case("a-folder", as_directory, rf"{E_MMA}: is a directory, expected a file"),
    Case("missing", remove, rf"{E_MMA}: no such file"),
    Case("python-tag-payload", payload_tag,
         rf"{E_MMA}: line \d+: malformed YAML: could not determine a constructor .*"),
    Case("provenance-device-with-an-escape-code", edit(MMA, '  device: "NVIDIA H200"', '  device: "H200\\e[2J"'),
         rf"{E_MMA}: provenance\.device 'H200\\x1b\[2J' holds characters that cannot go into a comment line .*"),
    Case("provenance-date-with-nul", provenance_date(MMA, "2026\\0-11-30"),
         rf"{E_MMA}: provenance\.date '2026\\x00-11-30' holds characters that cannot go into a comment line .*"),
    Case("params-not-a-list", lambda p: p.write(MMA, "params: 3\n"), rf"{E_MMA}: expected 'params' to be a sequence"),
    Case("entry-not-a-mapping", lambda p: p.write(MMA, "params: [3]\n"), rf"{E_MMA}: params\[0\] must be a mapping"),
    Case("entry-twice", duplicate_entry, rf"{E_MMA}: duplicate params entry at index 1"),
    Case("unknown-template", first_entry(MMA, "    M: 1\n", "    M: 1\n    _template: wide\n"),
         rf"{E_MMA}: {FIRST} references unknown template 'wide'"),
    Case("malformed-yaml", lambda p: p.write(MMA, "params: [\n"), rf"{E_MMA}: line \d+: malformed YAML: .*"),
    Case("empty-file", lambda p: p.write(MMA, ""), rf"{E_MMA}: expected a YAML mapping"),
    Case("five-thousand-digit-integer", first_entry(MMA, "    M: 1\n", "    M: " + "9" * 5000 + "\n"),
         rf"{E_MMA}: line \d+: malformed YAML: Exceeds the limit \(4300 digits\).*"),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_bad_manifest(tmp_path, case):
    project = make_project(tmp_path)
    case.mutate(project)
    project.freeze()
    run_cli(project, "codegen", "--all").expect_error(case.error)


def test_the_six_flags_on_a_declared_target_are_typed_too(tmp_path):
    """The README's Modular-style command names kernels/tuning_configs.py's markers: typed like --all."""
    project = make_project(tmp_path)
    injection("KERNEL")(project)
    project.freeze()
    run_cli(project, "codegen", "--manifest", MMA, "--snippet", str(_family_snippet("gemm_mma")), "--target", TARGET,
            "--begin-marker", "BEGIN-TUNING-LIST-GEMM_MMA", "--end-marker", "END-TUNING-LIST-GEMM_MMA",
            "--source-label", MMA).expect_error(rf"{E_MMA}: {FIRST}: KERNEL: .* is not one of gemm_mma")


def test_what_codegen_writes_imports_without_running_anything(tmp_path):
    """A clean regeneration is byte-identical, and the module it writes imports (its values are literals)."""
    project = make_project(tmp_path)
    project.freeze()
    run_cli(project, "codegen", "--all").expect_ok()
    module = _import_generated(project)
    assert len(module.GEMM_MMA_CONFIGS) > 10 and not project.marker.exists()


def _import_generated(project: Project):
    """The module codegen wrote into a project, imported."""
    spec = importlib.util.spec_from_file_location("generated_tables", project.path(TARGET))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_a_line_break_in_provenance_is_folded_into_the_comment(tmp_path):
    """Provenance text is collapsed onto the comment line, and the GPU it names (``PRIMARY_MEASURED_ON``) is a
    string literal: a line break cannot start a line of code."""
    project = make_project(tmp_path)
    payload = f"H200\\nimport os; os.system('touch {project.marker}')"
    for manifest in (MMA, WGMMA, SWAP):     # a device's tables name one GPU (two stop codegen)
        edit(manifest, '  device: "NVIDIA H200"', f'  device: "{payload}"')(project)
    project.freeze()
    run_cli(project, "codegen", "--all").expect_ok(changed=[TARGET])
    lines = [line.lstrip() for line in project.text(TARGET).splitlines() if "import os" in line]
    # Folded into a comment line (the provenance line, or its continuation where the text is long), one per table.
    comments = [line for line in lines if line.startswith("#")]
    assert len(comments) == 3 and all(line.startswith(("# Provenance: [manifests/gemm_", "# device: H200 import os"))
                                      for line in comments)
    assert [line for line in lines if not line.startswith("#")] == [
        f"PRIMARY_MEASURED_ON: str | None = \"{payload}\""]
    module = _import_generated(project)
    assert module.DEVICE_TABLES["h200"].measured_on == payload.replace("\\n", "\n") and not project.marker.exists()


def _family_snippet(family: str):
    """The snippet of a registered family (its folder holds it)."""
    from tunetable.kernels.families import FAMILIES

    return FAMILIES[family].snippet
