"""The codegen core: Modular tuning_codegen parity, manifest validation, provenance, overlaps."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tunetable import codegen
from tunetable.errors import TuneTableError

FIXTURES = Path(__file__).parent / "fixtures" / "codegen"


def write(path: Path, text: str) -> Path:
    """Write a test input file and return its path."""
    path.write_text(text)
    return path


# --- render_snippet -------------------------------------------------------------------------


def test_render_snippet_formats_values_and_indents_non_empty_lines() -> None:
    snippet = "Config(\n  m=[@M], on=[@ON], off=[@OFF], none=[@NONE],\n\n  expr=[@EXPR], [@1X]\n)  \n\n"
    params = {"M": 64, "ON": True, "OFF": False, "NONE": None, "EXPR": "7000 + 32", "EXTRA": 1}
    rendered = codegen.render_snippet(snippet, params, indent="  ")
    assert rendered == (
        "  Config(\n"
        "    m=64, on=True, off=False, none=None,\n"
        "\n"
        "    expr=7000 + 32, [@1X]\n"
        "  )"
    )


def test_render_snippet_passes_comment_lines_and_strs_other_values() -> None:
    snippet = "# tile [@TILE]\nx = [@RATIO]  # ratio\n"
    assert codegen.render_snippet(snippet, {"TILE": [128, 64], "RATIO": 0.5}) == "# tile [128, 64]\nx = 0.5  # ratio"


def test_render_snippet_lists_missing_parameters_sorted_once() -> None:
    with pytest.raises(TuneTableError) as excinfo:
        codegen.render_snippet("[@N] [@B] [@N] [@A] [@M]", {"M": 1})
    assert str(excinfo.value) == "Missing snippet parameters: A, B, N"


# --- render_region --------------------------------------------------------------------------


def test_render_region_selects_entry_template_exactly() -> None:
    params = [{"M": 1}, {"M": 2, "M_END": 9, "_template": "ranged"}, {"M": 3, "_template": None}]
    region = codegen.render_region(
        params, "E([@M])\n", source_label="t.yaml", snippet_variants={"ranged": "R([@M], [@M_END])\n"}, indent=""
    )
    assert region == (
        "# Automatically generated from [t.yaml]\n"
        "# index: [0]\n"
        "E(1),\n"
        "# Automatically generated from [t.yaml]\n"
        "# index: [1]\n"
        "R(2, 9),\n"
        "# Automatically generated from [t.yaml]\n"
        "# index: [2]\n"
        "E(3),"
    )


def test_render_region_default_indent_is_eight_spaces_and_empty_manifest_is_empty() -> None:
    assert codegen.render_region([{"M": 4}], "f([@M])", source_label="x") == (
        "        # Automatically generated from [x]\n        # index: [0]\n        f(4),"
    )
    assert codegen.render_region([], "f([@M])", source_label="x") == ""


def test_render_region_rejects_unknown_template() -> None:
    with pytest.raises(TuneTableError) as excinfo:
        codegen.render_region([{"M": 1}, {"_template": "missing"}], "E", source_label="t", snippet_variants={})
    assert str(excinfo.value) == "params[1] references unknown template 'missing'"


def test_render_region_rejects_non_string_template() -> None:
    with pytest.raises(TuneTableError) as excinfo:
        codegen.render_region([{"_template": 3}], "E", source_label="t", manifest_path="m.yaml")
    assert str(excinfo.value) == "m.yaml: params[0]._template must be a string"


def test_render_region_names_manifest_and_index_for_missing_parameters() -> None:
    with pytest.raises(TuneTableError) as excinfo:
        codegen.render_region([{"M": 1, "N": 2}, {"M": 1}], "[@M] [@N]", source_label="t", manifest_path="m.yaml")
    assert str(excinfo.value) == "m.yaml: params[1]: Missing snippet parameters: N"


# --- replace_generated_region ---------------------------------------------------------------

SOURCE = "head\n    # ---BEGIN-X---\n    old 1\n    old 2\n    # ---END-X---\ntail\n"


def test_replace_keeps_everything_outside_the_region() -> None:
    out = codegen.replace_generated_region(SOURCE, begin_marker="BEGIN-X", end_marker="END-X", generated="  new")
    assert out == "head\n    # ---BEGIN-X---\n  new\n    # ---END-X---\ntail\n"


def test_replace_keeps_crlf_and_missing_final_newline() -> None:
    source = "a\r\n# BEGIN\r\nold\r\n# END\r\nz"
    out = codegen.replace_generated_region(source, begin_marker="BEGIN", end_marker="END", generated="new\nline")
    assert out == "a\r\n# BEGIN\r\nnew\r\nline\r\n# END\r\nz"


def test_replace_with_empty_region_leaves_one_empty_line() -> None:
    out = codegen.replace_generated_region("# B\n# E\n", begin_marker="B", end_marker="E", generated="")
    assert out == "# B\n\n# E\n"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("x\n# END-X\n", "Expected exactly one begin marker: BEGIN-X"),
        ("# BEGIN-X\n# BEGIN-X again\n# END-X\n", "Expected exactly one begin marker: BEGIN-X"),
        ("# BEGIN-X\nx\n", "Expected exactly one end marker: END-X"),
        ("# BEGIN-X\n# END-X\n# END-X\n", "Expected exactly one end marker: END-X"),
        ("# END-X\n# BEGIN-X\n", "The begin marker must precede the end marker"),
    ],
)
def test_replace_marker_errors(source: str, message: str) -> None:
    with pytest.raises(TuneTableError) as excinfo:
        codegen.replace_generated_region(source, begin_marker="BEGIN-X", end_marker="END-X", generated="g")
    assert str(excinfo.value) == message


def test_replace_marker_errors_name_the_target() -> None:
    with pytest.raises(TuneTableError) as excinfo:
        codegen.replace_generated_region("", begin_marker="B", end_marker="E", generated="", path="t.py")
    assert str(excinfo.value) == "t.py: Expected exactly one begin marker: B"


def test_replace_begin_and_end_on_one_line_is_an_order_error() -> None:
    with pytest.raises(TuneTableError, match="The begin marker must precede the end marker"):
        codegen.replace_generated_region("# B E\n", begin_marker="B", end_marker="E", generated="")


# --- load_manifest --------------------------------------------------------------------------


def test_load_manifest_preserves_order_merges_defaults_and_stringifies_keys(tmp_path: Path) -> None:
    path = write(
        tmp_path / "m.yaml",
        "defaults: &defaults\n  A: 1\n  B: 2\nparams:\n"
        "  - <<: *defaults\n    M: 64\n    B: 3\n  - M: 1\n  - {7: x}\n",
    )
    assert codegen.load_manifest(path) == [{"A": 1, "B": 3, "M": 64}, {"M": 1}, {"7": "x"}]


def test_load_manifest_merges_a_kprofile_common_list() -> None:
    params = codegen.load_manifest(FIXTURES / "tuning_table_sm100_fp8.yaml")
    assert params[1]["AUTOTUNING_MODE"] is True
    assert params[1]["name"] == "bench_matmul_fp8"
    assert params[1]["M_END"] == "7000 + 32"


def test_load_manifest_rejects_duplicate_after_merge(tmp_path: Path) -> None:
    path = write(tmp_path / "m.yaml", "d: &d {M: 64}\nparams:\n  - {M: 1}\n  - {M: 64}\n  - {<<: *d}\n")
    with pytest.raises(TuneTableError) as excinfo:
        codegen.load_manifest(path)
    assert str(excinfo.value) == f"{path}: duplicate params entry at index 2"


def test_load_manifest_duplicates_are_key_order_insensitive_and_type_sensitive(tmp_path: Path) -> None:
    kept = write(tmp_path / "a.yaml", "params:\n  - {M: 64}\n  - {M: '64'}\n  - {M: 64.0}\n")
    assert len(codegen.load_manifest(kept)) == 3
    dup = write(tmp_path / "b.yaml", "params:\n  - {M: 1, N: 2}\n  - {N: 2, M: 1}\n")
    with pytest.raises(TuneTableError, match="duplicate params entry at index 1"):
        codegen.load_manifest(dup)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- 1\n- 2\n", "expected a YAML mapping"),
        ("just text\n", "expected a YAML mapping"),
        ("", "expected a YAML mapping"),
        ("name: x\n", "expected 'params' to be a sequence"),
        ("params: abc\n", "expected 'params' to be a sequence"),
        ("params: {M: 1}\n", "expected 'params' to be a sequence"),
        ("params:\n  - {M: 1}\n  - 5\n", "params[1] must be a mapping"),
        ("params: []\nprovenance: [1]\n", "expected 'provenance' to be a mapping"),
    ],
)
def test_load_manifest_shape_errors(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "m.yaml", text)
    with pytest.raises(TuneTableError) as excinfo:
        codegen.load_manifest(path)
    assert str(excinfo.value) == f"{path}: {message}"


def test_load_manifest_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path / "m.yaml", "params:\n  - {M: 1\n  - x: [\n")
    with pytest.raises(TuneTableError, match=rf"^{path}: line \d+: malformed YAML"):
        codegen.load_manifest(path)


def test_load_manifest_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TuneTableError) as excinfo:
        codegen.load_manifest(tmp_path / "nope.yaml")
    assert str(excinfo.value) == f"{tmp_path / 'nope.yaml'}: no such file"


def test_load_manifest_never_constructs_python_objects(tmp_path: Path) -> None:
    path = write(tmp_path / "m.yaml", "params:\n  - !!python/object/apply:os.system ['true']\n")
    with pytest.raises(TuneTableError, match="malformed YAML"):
        codegen.load_manifest(path)


# --- snippet variants -----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["ranged", "=x.snippet", "ranged=", "="])
def test_parse_snippet_variants_rejects_malformed(value: str) -> None:
    with pytest.raises(TuneTableError) as excinfo:
        codegen.parse_snippet_variants([value])
    assert str(excinfo.value) == f"Invalid --snippet-variant '{value}'; expected NAME=PATH"


def test_parse_snippet_variants_splits_at_first_equals_and_rejects_duplicates() -> None:
    assert codegen.parse_snippet_variants(["a=x=y", "b=z"]) == {"a": "x=y", "b": "z"}
    with pytest.raises(TuneTableError) as excinfo:
        codegen.parse_snippet_variants(["a=1", "a=2"])
    assert str(excinfo.value) == "Duplicate snippet variant 'a'"


# --- generate_target and Modular parity -----------------------------------------------------


def test_generate_target_renders_manifest_entries(tmp_path: Path) -> None:
    manifest = write(tmp_path / "m.yaml", "params:\n  - {M: 64, FLAG: true}\n  - {M: 128, FLAG: false}\n")
    snippet = write(tmp_path / "s.snippet", "Cfg([@M], [@FLAG])\n\n")
    target = write(tmp_path / "t.py", "x = [\n    # BEGIN\n    stale,\n    # END\n]\n")
    text = codegen.generate_target(
        manifest_path=manifest, snippet_path=snippet, target_path=target,
        begin_marker="BEGIN", end_marker="END", source_label="m.yaml",
    )
    assert text == (
        "x = [\n    # BEGIN\n"
        "        # Automatically generated from [m.yaml]\n"
        "        # index: [0]\n"
        "        Cfg(64, True),\n"
        "        # Automatically generated from [m.yaml]\n"
        "        # index: [1]\n"
        "        Cfg(128, False),\n"
        "    # END\n]\n"
    )
    assert target.read_text() == "x = [\n    # BEGIN\n    stale,\n    # END\n]\n"  # generate writes nothing


def test_modular_parity_two_regions_in_one_target(tmp_path: Path) -> None:
    """Manifests and snippets written for Modular; the expected file was written by hand from its spec."""
    target = tmp_path / "tuning_configs.mojo"
    shutil.copyfile(FIXTURES / "tuning_configs_before.mojo", target)
    target.write_text(
        codegen.generate_target(
            manifest_path=FIXTURES / "tuning_table_sm100_bf16.yaml",
            snippet_path=FIXTURES / "tuning_sm100.mojo.snippet",
            target_path=target,
            begin_marker="BEGIN-TUNING-LIST-SM100-BF16",
            end_marker="END-TUNING-LIST-SM100-BF16",
            source_label="tuning_table_sm100_bf16.yaml",
        )
    )
    target.write_text(
        codegen.generate_target(
            manifest_path=FIXTURES / "tuning_table_sm100_fp8.yaml",
            snippet_path=FIXTURES / "tuning_fp8.mojo.snippet",
            target_path=target,
            begin_marker="BEGIN-TUNING-LIST-SM100-FP8",
            end_marker="END-TUNING-LIST-SM100-FP8",
            source_label="gpu/linalg/tuning_table_sm100_fp8.yaml",
            snippet_variant_paths={"ranged": FIXTURES / "tuning_fp8_ranged.mojo.snippet"},
        )
    )
    assert target.read_bytes() == (FIXTURES / "tuning_configs_expected.mojo").read_bytes()


# --- provenance -----------------------------------------------------------------------------

PROVENANCE_MANIFEST = """\
provenance:
  results_key: 0123456789abcdef
  device: NVIDIA H200
  driver: "580.95"
  date: 2026-11-29
  git_revision: abc1234
defaults: &defaults
  KERNEL: gemm_mma
params:
  - <<: *defaults
    M: 1
    M_END: 64
"""


def independent_params_hash(entries: list[dict]) -> str:
    """The documented rule, re-derived here: sha256 of sorted-key compact JSON of the entries, 12 hex."""
    text = json.dumps(entries, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def test_provenance_is_the_first_line_of_the_region(tmp_path: Path) -> None:
    manifest = codegen.load_manifest_document(write(tmp_path / "m.yaml", PROVENANCE_MANIFEST))
    region = codegen.render_region(
        manifest.params, "C([@M])", source_label="manifests/g.yaml", provenance=manifest.provenance
    )
    digest = independent_params_hash([{"KERNEL": "gemm_mma", "M": 1, "M_END": 64}])
    assert region.split("\n") == [
        f"        # Provenance: [manifests/g.yaml] params sha256:{digest}, device: NVIDIA H200, date: 2026-11-29",
        "        # Automatically generated from [manifests/g.yaml]",
        "        # index: [0]",
        "        C(1),",
    ]


def test_provenance_hash_ignores_layout_but_not_values(tmp_path: Path) -> None:
    base = codegen.load_manifest_document(write(tmp_path / "a.yaml", PROVENANCE_MANIFEST))
    relaid = codegen.load_manifest_document(
        write(tmp_path / "b.yaml", "# comment\n" + PROVENANCE_MANIFEST.replace("    M: 1\n", "    M:    1   # one\n"))
    )
    changed = codegen.load_manifest_document(
        write(tmp_path / "c.yaml", PROVENANCE_MANIFEST.replace("M: 1\n", "M: 2\n"))
    )
    assert codegen.params_hash(base.params) == codegen.params_hash(relaid.params)
    assert codegen.params_hash(base.params) != codegen.params_hash(changed.params)


def test_provenance_without_device_or_date_says_unknown_and_stays_one_line() -> None:
    line = codegen.provenance_comment(
        provenance={"device": "H200\nfake line"}, parameters=[], source_label="x", indent=""
    )
    assert line == (f"# Provenance: [x] params sha256:{independent_params_hash([])}, "
                    "device: H200 fake line, date: unknown")


def test_without_provenance_output_has_no_extra_line(tmp_path: Path) -> None:
    text = PROVENANCE_MANIFEST.split("defaults:")[1]
    manifest = codegen.load_manifest_document(write(tmp_path / "m.yaml", "defaults:" + text))
    assert manifest.provenance is None
    region = codegen.render_region(manifest.params, "C([@M])", source_label="g", provenance=manifest.provenance)
    assert region.startswith("        # Automatically generated from [g]\n")


# --- overlap check --------------------------------------------------------------------------


def test_adjacent_ranges_and_other_shapes_do_not_overlap() -> None:
    params = [
        {"M": 1, "M_END": 64, "N": 4096, "K": 4096},
        {"M": 64, "M_END": 128, "N": 4096, "K": 4096},
        {"M": 1, "M_END": 128, "N": 8192, "K": 4096},
        {"M": 1, "M_END": 128, "N": 4096, "K": 8192},
    ]
    assert codegen.find_overlaps(params) == codegen.OverlapReport()


def test_overlapping_ranges_are_reported_with_the_shadowed_interval() -> None:
    params = [
        {"M": 1, "M_END": 100, "N": 4096, "K": 4096},
        {"M": 64, "M_END": "7000 + 32", "N": 4096, "K": 4096},
    ]
    report = codegen.find_overlaps(params)
    assert [o.message() for o in report.overlaps] == [
        "params[1] [M, M_END) = [64, 7032) overlaps params[0] [1, 100) for N=4096, K=4096; "
        "with first-match lookup params[1] is shadowed for M in [64, 100)"
    ]


def test_entries_without_m_end_cover_exactly_one_m() -> None:
    params = [{"M": 64, "N": 1, "K": 1}, {"M": 65, "N": 1, "K": 1}, {"M": 64, "M_END": 66, "N": 1, "K": 1}]
    report = codegen.find_overlaps(params)
    assert [(o.first, o.second) for o in report.overlaps] == [(0, 2), (1, 2)]


def test_unevaluable_m_end_is_skipped_with_a_note() -> None:
    params = [{"M": 1, "M_END": "BIG", "N": 1, "K": 1}, {"M": 1, "M_END": 5, "N": 1, "K": 1}]
    report = codegen.find_overlaps(params)
    assert report.overlaps == ()
    assert report.notes == ("params[0]: M_END 'BIG' is not an integer expression; skipped in the overlap check",)


@pytest.mark.parametrize(
    ("text", "value"),
    [("7000 + 32", 7032), ("(7000 + 32) // 2 - 3 * 4", 3504), ("-1 + 2", 1), (" 2147483647 ", 2147483647), (5, 5)],
)
def test_int_value_accepts_integer_arithmetic(text: object, value: int) -> None:
    assert codegen.int_value(text) == value


@pytest.mark.parametrize(
    "text",
    ["__import__('os').system('true')", "2 ** 10", "1.5", "True", "1 / 2", "x + 1", "1 // 0", True, 3.0, None,
     "1+" * 200],
)
def test_int_value_rejects_everything_else(text: object) -> None:
    assert codegen.int_value(text) is None


def test_generate_target_writes_the_provenance_line_first(tmp_path: Path) -> None:
    manifest = write(tmp_path / "m.yaml", PROVENANCE_MANIFEST)
    snippet = write(tmp_path / "s.snippet", "C([@M])")
    target = write(tmp_path / "t.py", "# BEGIN\n# END\n")
    text = codegen.generate_target(
        manifest_path=manifest, snippet_path=snippet, target_path=target,
        begin_marker="BEGIN", end_marker="END", source_label="m.yaml",
    )
    digest = independent_params_hash([{"KERNEL": "gemm_mma", "M": 1, "M_END": 64}])
    assert text.split("\n")[:3] == [
        "# BEGIN",
        f"        # Provenance: [m.yaml] params sha256:{digest}, device: NVIDIA H200, date: 2026-11-29",
        "        # Automatically generated from [m.yaml]",
    ]


def test_crlf_snippet_renders_like_an_lf_snippet(tmp_path: Path) -> None:
    manifest = write(tmp_path / "m.yaml", "params:\n  - {M: 2}\n")
    snippet = tmp_path / "s.snippet"
    snippet.write_bytes(b"C(\r\n    [@M]\r\n)\r\n")
    target = write(tmp_path / "t.py", "# BEGIN\n# END\n")
    text = codegen.generate_target(
        manifest_path=manifest, snippet_path=snippet, target_path=target,
        begin_marker="BEGIN", end_marker="END", source_label="m",
    )
    assert text == ("# BEGIN\n        # Automatically generated from [m]\n        # index: [0]\n"
                    "        C(\n            2\n        ),\n# END\n")


def test_crlf_target_keeps_its_line_endings_everywhere(tmp_path: Path) -> None:
    manifest = write(tmp_path / "m.yaml", "params:\n  - {M: 2}\n")
    snippet = write(tmp_path / "s.snippet", "C([@M])\n")
    target = tmp_path / "t.py"
    target.write_bytes(b"head\r\n# BEGIN\r\nold\r\n# END\r\ntail\r\n")
    text = codegen.generate_target(
        manifest_path=manifest, snippet_path=snippet, target_path=target,
        begin_marker="BEGIN", end_marker="END", source_label="m",
    )
    assert text == ("head\r\n# BEGIN\r\n        # Automatically generated from [m]\r\n        # index: [0]\r\n"
                    "        C(2),\r\n# END\r\ntail\r\n")
    assert "\n" not in text.replace("\r\n", "")
