"""``tunetable plots [REV...]``: `dvc plots show` (or `dvc plots diff REV...`) as a page that works offline."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import click
from rich.console import Console

from tunetable import paths, plots
from tunetable.errors import TuneTableError
from tunetable.params import device_specs, load_params, primary_device
from tunetable.plots_page import offline_template

EPILOG = """\b
Examples:
  tunetable plots                  the plots of the working tree -> dvc_plots/index.html
  tunetable plots HEAD~1           dvc plots diff HEAD~1: that revision against the working tree
"""


@click.command("plots", epilog=EPILOG)
@click.argument("revisions", nargs=-1)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("dvc_plots"),
              show_default=True, help="Folder for index.html (git-ignored by default).")
def command(revisions: tuple[str, ...], out: Path) -> None:
    """Render dvc.yaml's plots (TFLOP/s and speedup_vs_cublas per shape, the PNGs) into one offline HTML page.

    Runs `dvc plots show` (with REVISIONS: `dvc plots diff REVISIONS`) with a template that inlines
    vega, vega-lite and vega-embed from Snakemake's bundled copies, so the charts draw without a
    network (plain `dvc plots show` loads them from a CDN). Without REVISIONS, the PNGs of results/plots/ are
    first redrawn from their CSVs (per (N, K): speedup over cuBLAS against M, TFLOP/s under the roofline).
    """

    console = Console(soft_wrap=True)
    if not revisions:   # the working tree's PNGs, redrawn from their plot CSVs (byte-identical when current)
        params = load_params()   # each table's roofline is its device's (params.yaml devices: ceilings)
        specs, primary = device_specs(params), primary_device(params)
        roofline_of = lambda name: plots.table_roofline(name=name, devices=specs, primary=primary)  # noqa: E731
        for png in plots.redraw_from_csv(folder=paths.RESULTS / "plots", roofline_of=roofline_of):
            console.print(f"redrew {png} from its plot data", markup=False, highlight=False)
    with tempfile.TemporaryDirectory(prefix="tunetable-plots-") as folder:
        template = Path(folder) / "offline.html"
        template.write_text(offline_template(), encoding="utf-8")
        verb = ["diff", *revisions] if revisions else ["show"]
        done = subprocess.run([sys.executable, "-m", "dvc", "plots", *verb, "--html-template", str(template),
                               "-o", str(out)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}").splitlines()[-1]
        raise TuneTableError(f"dvc plots failed: {last}", where="plots")
    console.print(f"wrote {out / 'index.html'} (works offline: the chart scripts are inlined)",
                                  markup=False, highlight=False)
