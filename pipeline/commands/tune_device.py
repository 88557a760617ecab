"""``tunetable tune-device``: plan a new device's measurements, seeded from a tuned device's recordings."""

from __future__ import annotations

from pathlib import Path

import click
import yaml
from rich.console import Console

from tunetable.atomic import atomic_write_text
from tunetable.console_table import ConsoleTable, print_table
from tunetable.device_tuning import device_tuning
from tunetable.params import load_params

EPILOG = """\b
Examples:
  tunetable tune-device --device h100 --seed-from h200 --budget 0.15
Then, on the new device (docs/devices.md): for each table,
  tunetable bench --params results/tune_device/h100.params.yaml --table T.h100 --backend cuda --all-shapes
and `tunetable record --table T.h100 --name h100_T SHARDS...` (scripts/device_record_h100.sh records exhaustively).
"""


@click.command("tune-device", epilog=EPILOG)
@click.option("--device", required=True, help="The device to tune (params.yaml devices:).")
@click.option("--seed-from", "seed_from", required=True, help="A tuned device whose recordings seed the search.")
@click.option("--budget", type=float, default=0.15, show_default=True,
              help="Measurements per shape as a share of the grid.")
@click.option("--params", "params_path", type=click.Path(dir_okay=False, path_type=Path), default=Path("params.yaml"),
              show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The seeded settings to write [default: results/tune_device/<device>.params.yaml].")
def command(device: str, seed_from: str, budget: float, params_path: Path, out: Path | None) -> None:
    """Write params for DEVICE's measurement with every table's search seeded from SEED_FROM's recordings."""
    params = load_params(params_path)
    tuned, plans = device_tuning(params, device=device, seed_from=seed_from, budget=budget, path=params_path,
                                 root=params_path.resolve().parent)
    target = out or Path("results/tune_device") / f"{device}.params.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, f"# tunetable tune-device --device {device} --seed-from {seed_from} --budget {budget}\n"
                      + yaml.safe_dump(tuned, sort_keys=False))
    table = ConsoleTable(title=f"{device}'s measurements seeded from {seed_from}'s recordings "
                               f"(model search + learned prior + transfer)")
    for column in ("table", "bench as", "grid", "shapes", "per shape", "measurements", "share of exhaustive",
                   "learns from"):
        table.add_column(column, justify="left" if column in ("table", "bench as", "learns from") else "right")
    for plan in plans:
        table.add_row(plan.table, plan.measured, str(plan.grid), str(plan.shapes), str(plan.per_shape),
                      str(plan.measurements), f"{plan.measurements / plan.exhaustive:.3f}", plan.learn_from)
    console = Console()
    print_table(console, table)
    console.print(f"wrote {target}; on the {device}: tunetable bench --params {target} --table TABLE --backend cuda "
                  "--all-shapes, TABLE each of 'bench as' (docs/devices.md)", markup=False)
