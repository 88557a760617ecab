"""How many lines a re-record changes in each reviewed file, before and after the selector became data (issue 48).

For each commit that re-recorded a table (it changed manifests/gemm_selector.yaml, before the data file), the
diff (changed lines: added + removed) against its parent of

- each table's and the dispatch list's manifest (reviewed; unchanged by issue 48);
- kernels/tuning_configs.py as it was (the selector's 22k-line region included), without that region, and its
  tables' regions as today's compact snippets render the same manifests (an entry in 2-4 lines, not 14-19);
- the selector as it was (manifests/gemm_selector.yaml, one YAML entry per candidate) and as the data file
  holds the same candidates now (kernels/data/gemm_selector.json, one line per candidate, written here with
  the project's own writer).

Run from the repository root: ``python benchmarks/rerecord_diff.py``; it prints a table and writes
benchmarks/results/rerecord_diff.json.
"""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.atomic import atomic_write_text  # noqa: E402
from tunetable.codegen_render import render_region  # noqa: E402
from tunetable.manifest import parse_manifest_text  # noqa: E402
from tunetable.kernels.families.selector_data import SelectorData, selector_file_text  # noqa: E402
from tunetable.selector_review import side_from_manifest  # noqa: E402

REVIEWED = ("manifests/gemm_mma.yaml", "manifests/gemm_wgmma.yaml", "manifests/gemm_wgmma_swap.yaml",
            "manifests/gemm_dispatch.yaml")
SELECTOR_MANIFEST = "manifests/gemm_selector.yaml"
GENERATED = "kernels/tuning_configs.py"
REGION = ("BEGIN-TUNING-LIST-GEMM_SELECTOR", "END-TUNING-LIST-GEMM_SELECTOR")
LAST = 4   # the re-records measured: the last four before the data file
# Today's snippets (one entry in 2-4 lines): the tables' regions as the same manifests render now.
SNIPPETS = {"manifests/gemm_mma.yaml": "kernels/families/gemm_mma/gemm_mma.snippet",
            "manifests/gemm_wgmma.yaml": "kernels/families/gemm_wgmma/gemm_wgmma.snippet",
            "manifests/gemm_wgmma_swap.yaml": "kernels/families/gemm_wgmma_swap/gemm_wgmma_swap.snippet",
            "manifests/gemm_dispatch.yaml": "kernels/snippets/gemm_dispatch.snippet"}


def show(rev: str, path: str) -> str:
    """A file's text at a revision ('' when absent)."""
    done = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=REPO, capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else ""


def changed(before: str, after: str) -> int:
    """Lines added plus lines removed between two texts."""
    return sum(1 for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---")))


def without_selector(text: str) -> str:
    """The generated file without its selector region's lines (what the file holds once the selector is data)."""
    lines = text.splitlines()
    begin = next((i for i, line in enumerate(lines) if REGION[0] in line), None)
    end = next((i for i, line in enumerate(lines) if REGION[1] in line), None)
    return text if begin is None or end is None else "\n".join(lines[:begin + 1] + lines[end:])


def as_data_file(manifest_text: str) -> str:
    """The candidates of an old selector manifest as the data file holds them."""
    side = side_from_manifest(manifest_text, label="rev", path=SELECTOR_MANIFEST)
    provenance = tuple((key, value) for key, value in (side.provenance or {}).items())
    tables = tuple(dict.fromkeys((c.table, c.kernel) for c in side.candidates))
    return selector_file_text(SelectorData(name="gemm_selector", tables=tables, provenance=provenance,
                                           candidates=side.candidates))


def regions_now(rev: str) -> str:
    """The tables' and dispatch list's regions as today's snippets render that revision's manifests."""
    pieces = []
    for manifest, snippet in SNIPPETS.items():
        text = show(rev, manifest)
        if text:
            params = parse_manifest_text(text, path=manifest).params
            pieces.append(render_region(params, (REPO / snippet).read_text(), source_label=manifest))
    return "\n".join(pieces)


def rerecords() -> list[str]:
    """The last LAST commits that changed the selector manifest while it held the candidates."""
    log = subprocess.run(["git", "log", "--format=%h", "--", SELECTOR_MANIFEST], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.split()
    return [rev for rev in log if "params:" in show(rev, SELECTOR_MANIFEST)][:LAST]


def measure(rev: str) -> dict[str, int | str]:
    """The changed lines of each file at one re-record."""
    parent = f"{rev}~1"
    row: dict[str, int | str] = {"commit": rev}
    for path in REVIEWED:
        row[Path(path).stem] = changed(show(parent, path), show(rev, path))
    row["tuning_configs.py before"] = changed(show(parent, GENERATED), show(rev, GENERATED))
    row["tuning_configs.py now"] = changed(without_selector(show(parent, GENERATED)),
                                           without_selector(show(rev, GENERATED)))
    row["tuning_configs.py, today's snippets"] = changed(regions_now(parent), regions_now(rev))
    row["selector manifest before"] = changed(show(parent, SELECTOR_MANIFEST), show(rev, SELECTOR_MANIFEST))
    row["selector data file now"] = changed(as_data_file(show(parent, SELECTOR_MANIFEST)),
                                            as_data_file(show(rev, SELECTOR_MANIFEST)))
    return row


def main() -> None:
    """Print one row per re-record and write the JSON."""
    rows = [measure(rev) for rev in rerecords()]
    columns = list(rows[0]) if rows else []
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(str(row[column]) for column in columns))
    # Reviewed now: the manifests and the generated regions as today's snippets render them (the columns
    # "before" and "now" render with the snippets of their time; the selector's data file is reviewed by audit).
    past = ("commit", "tuning_configs.py before", "tuning_configs.py now", "selector manifest before",
            "selector data file now")
    reviewed_now = max((int(row[c]) for row in rows for c in columns if c not in past), default=0)
    print(f"largest reviewed-file diff of a re-record now: {reviewed_now} lines")
    out = REPO / "benchmarks" / "results" / "rerecord_diff.json"
    atomic_write_text(out, json.dumps({"command": "python benchmarks/rerecord_diff.py", "rows": rows,
                                       "largest_reviewed_diff_now": reviewed_now}, indent=1) + "\n")


if __name__ == "__main__":
    main()
