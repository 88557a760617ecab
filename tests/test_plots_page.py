"""`tunetable plots`: dvc.yaml's plots as one page that draws without a network (scripts inlined)."""

from __future__ import annotations

import re
from pathlib import Path

from pipeline_repo import make_project, tunetable

from tunetable.plots_page import offline_template


def test_the_template_inlines_every_chart_script_and_loads_nothing() -> None:
    page = offline_template()
    assert "{plot_divs}" in page and "{scripts}" not in page  # DVC fills the charts and adds no CDN tags
    assert not re.search(r"<script[^>]*\bsrc=", page)
    assert page.count("<script>") == 3 and "vegaEmbed" in page


def test_tunetable_plots_writes_an_offline_page(tmp_path: Path) -> None:
    root = make_project(tmp_path / "repo", remote=tmp_path / "remote")
    done = tunetable("plots", cwd=root)
    assert done.output.strip().splitlines()[-1] == (
        "wrote dvc_plots/index.html (works offline: the chart scripts are inlined)")
    page = (root / "dvc_plots" / "index.html").read_text()
    assert "cdn.jsdelivr.net" not in page and "Speedup over cuBLAS per shape" in page
    images = re.findall(r'<img[^>]*src="([^"]+)"', page)
    pngs = sorted(f"workspace_results_plots_{png.name}" for png in (root / "results" / "plots").glob("*.png"))
    assert len(pngs) >= 3 and sorted(Path(i).name for i in images) == pngs  # each PNG once
    assert tunetable("plots", "--out", "x", "nope-rev", cwd=root, check=False).returncode == 2
