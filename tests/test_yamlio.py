"""The one YAML loader (tunetable.yamlio): safe, duplicate keys and alias bombs refused, UTF-8 only, a leaf module."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tunetable import yamlio
from tunetable.errors import TuneTableError

REPO = Path(__file__).resolve().parents[1]
PURE = yamlio.strict_loader(yaml.SafeLoader)   # the fallback used where PyYAML lacks libyaml
LOADERS = [pytest.param(yamlio.StrictSafeLoader, id="default"), pytest.param(PURE, id="pure-python")]

BOMB = "".join(
    [f"l0: &l0 [{', '.join(['lol'] * 9)}]\n"]
    + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9)]
)
MERGE_BOMB = "a0: &a0 {x: 1, y: 2}\n" + "".join(
    f"a{i}: &a{i} {{<<: [{', '.join([f'*a{i - 1}'] * 8)}]}}\n" for i in range(1, 8)
)


def refused(text: str, loader: type) -> str:
    """The error line of a document the loader refuses."""
    with pytest.raises(TuneTableError) as caught:
        yamlio.load_yaml(text, path="doc.yaml", loader=loader)
    return str(caught.value)


@pytest.mark.parametrize("loader", LOADERS)
def test_same_data_as_safe_load_on_every_checked_in_yaml(loader):
    files = [REPO / "params.yaml", *sorted((REPO / "manifests").glob("*.yaml")),
             *sorted((REPO / "tests" / "fixtures" / "codegen").glob("*.yaml"))]
    for path in files:
        text = path.read_text()
        assert yamlio.load_yaml(text, loader=loader) == yaml.safe_load(text), path


# Plain scalars whose YAML 1.1 type is easy to get wrong, each used as a key and as a value, twice
# (the loader memoises a plain scalar's tag by its text), next to their quoted spellings.
TRICKY = ["012", "0x1F", "1_000", "0b101", "190:20:30", "yes", "No", "off", "null", "~", "1e3", "1.5e3", ".inf",
          ".NaN", "-0", "+12", "2026-12-01", "2026-12-01 10:00:00", "gemm_mma", "y", "n", "12.",
          "1" * 40]


@pytest.mark.parametrize("loader", LOADERS)
def test_tricky_plain_scalars_resolve_as_pyyaml_does(loader):
    lines = [f"k{i}: [{value}, {value}, '{value}']" for i, value in enumerate(TRICKY)]
    lines += [f"m{i}: {{{value}: 1}}" for i, value in enumerate(TRICKY) if value not in ("~", "null")]
    text = "\n".join(lines) + "\n"
    assert yamlio.load_yaml(text, loader=loader) == yaml.safe_load(text)


@pytest.mark.parametrize("loader", LOADERS)
def test_duplicate_key_names_both_lines(loader):
    text = "select:\n  tie_tolerance: 0.01\nbench:\n  rounds: 3\nselect:\n  tie_tolerance: 0.5\n"
    assert refused(text, loader) == (
        "doc.yaml: line 5: duplicate key 'select' (first at line 1); YAML would keep only the last")


@pytest.mark.parametrize("loader", LOADERS)
def test_nested_duplicate_and_keys_python_would_merge(loader):
    message = refused("t:\n  a: 1\n  b: 2\n  a: 3\n", loader)
    assert message.startswith("doc.yaml: line 4: duplicate key 'a' (first at line 2)")
    # 1 and true are one dict key in Python: a silent merge all the same
    assert refused("1: x\ntrue: y\n", loader).startswith("doc.yaml: line 2: duplicate key 'true' (first at line 1)")
    assert "duplicate key '<<'" in refused("d: &d {x: 1}\ne: {<<: *d, <<: *d}\n", loader)


@pytest.mark.parametrize("loader", LOADERS)
def test_merge_keys_still_override(loader):
    data = yamlio.load_yaml("defaults: &defaults {KERNEL: a, X: 1}\nparams:\n  - <<: *defaults\n    X: 2\n",
                            loader=loader)
    assert data["params"] == [{"KERNEL": "a", "X": 2}]


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("text", [BOMB, MERGE_BOMB], ids=["sequence-bomb", "merge-bomb"])
def test_alias_bombs_are_refused_quickly(loader, text):
    started = time.monotonic()
    message = refused(text, loader)
    assert time.monotonic() - started < 5
    assert message.startswith("doc.yaml: aliases expand the document to ") and "an alias bomb?" in message


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("text", ["a: &a [*a]\n", "a: &a {b: [c, {d: *a}]}\n"])
def test_recursive_documents_are_refused(loader, text):
    assert refused(text, loader) == ("doc.yaml: line 1: an alias refers to a node that contains it "
                                     "(a recursive document)")


def test_alias_limit_leaves_room_for_large_manifests():
    entries = "".join(f"  - <<: *defaults\n    M: {i}\n    M_END: {i + 1}\n" for i in range(20000))
    data = yamlio.load_yaml("defaults: &defaults {KERNEL: k, N: 1, K: 2}\nparams:\n" + entries)
    assert len(data["params"]) == 20000 and data["params"][-1] == {"KERNEL": "k", "N": 1, "K": 2, "M": 19999,
                                                                  "M_END": 20000}


@pytest.mark.parametrize("loader", LOADERS)
def test_python_tags_never_construct_anything(loader, tmp_path):
    marker = tmp_path / "ran"
    text = f"a: !!python/object/apply:os.system ['touch {marker}']\n"
    assert "could not determine a constructor" in refused(text, loader)
    assert not marker.exists()


def test_malformed_yaml_names_the_line():
    assert refused("a: [1, 2\nb: 3\n", yamlio.StrictSafeLoader).startswith("doc.yaml: line 2: malformed YAML: ")
    assert refused("a: \x07\n", yamlio.StrictSafeLoader).startswith("doc.yaml: malformed YAML: unacceptable character")


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("text", ["[" * 20000 + "]" * 20000, "".join(" " * i + "b:\n" for i in range(3000))],
                         ids=["flow", "block"])
def test_nesting_is_bounded(loader, text):
    assert "malformed YAML" in refused(text, loader)


def test_files_not_utf8_missing_or_folders(tmp_path):
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"a: 1\nname: caf\xe9\n")
    with pytest.raises(TuneTableError, match=r"latin.yaml: line 2: not UTF-8 text \(byte 14\)$"):
        yamlio.load_yaml_file(latin)
    with pytest.raises(TuneTableError, match=r"nope.yaml: no such file$"):
        yamlio.load_yaml_file(tmp_path / "nope.yaml")
    with pytest.raises(TuneTableError, match=r"is a directory, expected a file$"):
        yamlio.load_yaml_file(tmp_path)


def test_crlf_text_reads_as_text(tmp_path):
    path = tmp_path / "crlf.yaml"
    path.write_bytes(b"a: 1\r\nb: [x, y]\r\n")
    assert yamlio.load_yaml_file(path) == {"a": 1, "b": ["x", "y"]}


def test_libyaml_is_used_when_present():
    assert yamlio.HAS_LIBYAML == hasattr(yaml, "CSafeLoader")
    if yamlio.HAS_LIBYAML:
        assert issubclass(yamlio.StrictSafeLoader, yaml.CSafeLoader)


def test_a_leaf_module():
    """Importing the loader imports nothing else of tunetable (the runtime may use it without the build)."""
    code = ("import sys, tunetable.yamlio; "
            "print(sorted(m for m in sys.modules if m.startswith('tunetable')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['tunetable', 'tunetable.errors', 'tunetable.yamlio']"
