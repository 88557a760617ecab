"""Write a probe variant of a kernel: apply a one-file unified diff (benchmarks/versions/*.patch) to its base.

    python3 scripts/apply_patch.py benchmarks/versions/x.patch   # writes benchmarks/versions/x.cu
    python3 scripts/apply_patch.py benchmarks/versions/y.diff    # writes benchmarks/versions/y.cu

The patch's `---` line names the base file (relative to the repository root). A prepared adoption
(benchmarks/versions/*.diff, `git diff` of kernel, family and tests) gives its kernel's section: the one file
section of a family kernel (kernels/families/<family>/<family>.cu), so that its probe runs the very kernel
`git apply` would adopt. Every context and removed line must match the base exactly; a patch that does not apply
gets one line naming it and the place, writes nothing, and makes the exit status 1 (the other patches are still
written). Probe variants live as patches so that the tree holds one copy of each kernel (scripts/device_probe.sh).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.atomic import atomic_write_text  # noqa: E402

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
FAMILY_KERNEL = re.compile(r"^kernels/families/(\w+)/\1\.cu$")


class PatchError(Exception):
    """A patch that does not apply; the message names the patch and the line."""


def apply_unified(*, base: list[str], patch: list[str], name: str) -> list[str]:
    """The base's lines with every hunk of a one-file unified diff applied."""
    out: list[str] = []
    position = 0  # next base line (0-based) not yet copied
    index = 2     # past the --- / +++ header
    while index < len(patch):
        match = HUNK.match(patch[index])
        if not match:
            raise PatchError(f"{name}:{index + 1}: expected a hunk header '@@ -a,b +c,d @@'")
        start = int(match.group(1)) - 1 if match.group(2) != "0" else int(match.group(1))
        if start < position:
            raise PatchError(f"{name}:{index + 1}: hunks out of order")
        out.extend(base[position:start])
        position = start
        index += 1
        while index < len(patch) and not patch[index].startswith("@@"):
            line = patch[index]
            kind, text = line[:1], line[1:]
            if kind in (" ", "-"):
                if position >= len(base) or base[position] != text:
                    raise PatchError(f"{name}:{index + 1}: the base differs here (line {position + 1} of the base)")
                if kind == " ":
                    out.append(text)
                position += 1
            elif kind == "+":
                out.append(text)
            elif line.startswith("\\"):
                pass  # "\ No newline at end of file"
            else:
                raise PatchError(f"{name}:{index + 1}: not a diff line")
            index += 1
    out.extend(base[position:])
    return out


def kernel_section(*, lines: list[str], name: str) -> list[str]:
    """The one-file patch of a `git diff`'s family kernel section (its `---`/`+++` paths without a/ and b/)."""
    starts = [index for index, line in enumerate(lines) if line.startswith("diff --git ")] + [len(lines)]
    sections = []
    for start, end in zip(starts, starts[1:]):
        header = next((index for index in range(start, end) if lines[index].startswith("--- ")), None)
        if header is None or header + 1 >= end:
            continue
        base = lines[header][4:].split("\t")[0].strip().removeprefix("a/")
        if FAMILY_KERNEL.match(base):
            sections.append([f"--- {base}", f"+++ {lines[header + 1][4:].strip().removeprefix('b/')}",
                             *lines[header + 2:end]])
    if len(sections) != 1:
        raise PatchError(f"{name}:1: expected one family kernel section (kernels/families/F/F.cu), found "
                         f"{len(sections)}")
    return sections[0]


def variant(*, patch_path: Path) -> tuple[Path, list[str]]:
    """The base a patch (or a prepared adoption's kernel section) names, and its lines with the patch applied."""
    lines = patch_path.read_text().splitlines()
    if lines and lines[0].startswith("diff --git "):
        lines = kernel_section(lines=lines, name=str(patch_path))
    if len(lines) < 2 or not lines[0].startswith("--- ") or not lines[1].startswith("+++ "):
        raise PatchError(f"{patch_path}:1: expected '--- BASE' and '+++ TARGET' header lines")
    base_path = REPO / lines[0][4:].split("\t")[0].strip()
    return base_path, apply_unified(base=base_path.read_text().splitlines(), patch=lines, name=str(patch_path))


def main(argv: list[str]) -> int:
    """Apply each named patch to its base and write the result beside it (.cu); 1 if any did not apply."""
    if not argv:
        print("usage: apply_patch.py PATCH...", file=sys.stderr)
        return 2
    status = 0
    for arg in argv:
        patch_path = Path(arg)
        try:
            base_path, result = variant(patch_path=patch_path)
        except (PatchError, OSError) as error:
            print(f"apply_patch: {error}", file=sys.stderr)
            status = 1
            continue
        target = patch_path.with_suffix(".cu")
        atomic_write_text(target, "\n".join(result) + "\n")
        print(f"wrote {target} from {base_path.name}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
