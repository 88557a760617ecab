"""``tunetable gc [--dry-run] [--yes]``: delete raw-result key folders that nothing names any more."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from tunetable.console_table import ConsoleTable, print_table
from tunetable.gc import delete_folders, plan_gc
from tunetable.device_tables import with_present_device_tables
from tunetable.params import load_params

EPILOG = """\b
Examples:
  tunetable gc --dry-run     list every key folder with keep/delete and why (the default)
  tunetable gc --yes         delete the folders marked delete
  then: dvc gc -w --all-commits -c   (drops unused cache and remote objects; run it yourself)
"""

DVC_HINT = "dvc gc -w --all-commits -c"


def _size(size: int) -> str:
    """A byte count in B, KiB, MiB or GiB (one decimal above bytes)."""
    if size < 1024:
        return f"{size} B"
    scaled = float(size)
    for unit in ("KiB", "MiB", "GiB"):
        scaled /= 1024
        if scaled < 1024 or unit == "GiB":
            break
    return f"{scaled:.1f} {unit}"


@click.command("gc", epilog=EPILOG)
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted (also the default without --yes).")
@click.option("--yes", is_flag=True, help="Delete the folders marked delete.")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True,
              help="Repository root.")
def command(dry_run: bool, yes: bool, root: Path) -> None:
    """Keep results/raw/<table>/<key> when params.yaml resolves to KEY now or a metrics file names it at a git ref."""

    root = root.resolve()
    params = load_params(root / "params.yaml")
    # The other devices' tables are tables too (docs/devices.md): their shards are kept as the primary's are.
    plan = plan_gc(root=root, params=with_present_device_tables(params, root=root))
    console = Console()
    table = ConsoleTable(title=f"results/raw and results/parked: {len(plan.decisions)} folders, refs read: "
                               f"{', '.join(plan.refs) or '-'}")
    for column, justify in (("table", "left"), ("key", "left"), ("action", "left"), ("reason", "left"),
                            ("size", "right")):
        table.add_column(column, justify=justify)
    for decision in plan.decisions:
        table.add_row(decision.folder.table, decision.folder.key or "(all)", "keep" if decision.keep else "delete",
                      "; ".join(decision.reasons), _size(decision.folder.size_bytes),
                      style=None if decision.keep else "red")
    print_table(console, table)
    for note in plan.notes:
        console.print(f"[yellow]note[/yellow]: {note}")
    doomed = plan.to_delete
    if not doomed:
        console.print("nothing to delete")
        return
    summary = f"{len(doomed)} folder(s), {_size(plan.bytes_to_delete)}"
    if dry_run or not yes:
        console.print(f"dry run: --yes would delete {summary}:")
        for decision in doomed:
            console.print(f"  {decision.folder.path.relative_to(root).as_posix()}")
        return
    deleted = delete_folders(plan=plan, root=root)
    console.print(f"deleted {summary}")
    raw = (root / "results" / "raw").resolve()
    if any(raw in path.resolve().parents for path in deleted):
        console.print("next: `dvc commit results/raw` (dvc.lock then records the pruned folder), commit, and "
                      f"`{DVC_HINT}` to drop cache and remote objects no commit uses")
    else:
        console.print(f"next: `{DVC_HINT}` to drop cache and remote objects no commit uses")
