"""The `dvc plots` page, offline: vega, vega-lite and vega-embed inlined instead of loaded from a CDN.

`dvc plots show` writes an HTML page whose charts load their scripts from cdn.jsdelivr.net, so
they are blank without a network. Snakemake ships the same libraries (for its self-contained
report: vega 5, vega-lite 5, vega-embed 6, the versions DVC asks for); the template built here
inlines them, and DVC fills in the charts (``--html-template``: DVC substitutes ``{plot_divs}``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from tunetable.errors import TuneTableError

SCRIPTS = ("vega/vega.js", "vega-lite/vega-lite.js", "vega-embed/vega-embed.js")
PAGE = """<!DOCTYPE html>
<html>
<head>
    <meta charset="utf-8">
    <title>tunetable plots (offline)</title>
{scripts}
    <style>
        table {{ border-spacing: 15px; }}
    </style>
</head>
<body>
    {{plot_divs}}
</body>
</html>
"""


def bundled_script(name: str) -> str:
    """One of Snakemake's bundled JavaScript libraries (snakemake/assets/data/<name>)."""
    path = Path(str(resources.files("snakemake"))) / "assets" / "data" / name
    if not path.is_file():
        raise TuneTableError("Snakemake's bundled copy is missing (reinstall snakemake)", path=path)
    return path.read_text(encoding="utf-8")


def offline_template() -> str:
    """An HTML template for `dvc plots --html-template` with every script inlined (no network needed)."""
    scripts = []
    for name in SCRIPTS:
        text = bundled_script(name)
        if "</script" in text.lower():  # it would end the inline tag early
            raise TuneTableError("cannot be inlined: it contains '</script'", path=name)
        scripts.append(f"    <script>{text}</script>")
    return PAGE.format(scripts="\n".join(scripts))
