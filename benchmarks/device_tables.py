"""What a device's own tables are worth against another device's, on the committed recordings (no GPU needed).

Per table and device with a recording (data/recordings/<device>_<table>.parquet, checked against its
sidecar): the speedup over cuBLAS (cuBLAS median / our median, both from the same shard of the same
recording) geomean over the table's default shapes, for

- **own**: the device's own selection, the pipeline's rule (`tunetable.select_winners.build_manifest`
  with params.yaml's tie tolerance) applied to that device's recording, scored on the same rows:
  *in-sample* (chosen and scored on the same measurements: the winner's curse flatters it);
- **other**: the other device's selection (the H200's is the committed manifests/<table>.yaml, which
  the script checks equals its own selection of the H200 recording) scored on this device's rows:
  *out-of-sample* for the H100 (those configurations were chosen on another GPU's measurements).

Then the dispatch list: per shape the family the pipeline's dispatch rule (`build_dispatch_manifest`,
params.yaml's dispatch list and tie tolerance) picks from that device's tables, against cuBLAS of that
family's shard (benchmarks/table_vs_cublas.py's scoring, imported). The held-out figure is the
validation shapes (data/validation_shapes.csv, never tuned on): the reach per shape (best configuration
of every family with a validation recording on that device) where recordings exist, with what is
missing named. Finally how the H100's winners differ from the H200's: per table, the share of shapes
whose winner differs and the cost on the H100 of the H200's choice, by M; and a PNG per shape (log2 M).

    python3 benchmarks/device_tables.py [--out benchmarks/results]
Writes device_tables.json, .md and .png under --out.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import polars as pl

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import table_vs_cublas as tvc  # noqa: E402

from tunetable import rank, resultset  # noqa: E402
from tunetable.atomic import atomic_write_bytes, atomic_write_text  # noqa: E402
from tunetable.errors import TuneTableError  # noqa: E402
from tunetable.inputs import load_checked_recording  # noqa: E402
from tunetable.keys import sha256_file  # noqa: E402
from tunetable.kernels.runtime import decide  # noqa: E402
from tunetable.kernels.runtime.layers import smallest_recorded_floor_s, torch_serves  # noqa: E402
from tunetable.kernels.families.devices import recording_path  # noqa: E402
from tunetable.manifest import ManifestEntry, lookup, parse_manifest_text, ranges_from_text  # noqa: E402
from tunetable.params import dispatch_spec, load_params, table_spec  # noqa: E402
from tunetable.select_winners import (  # noqa: E402
    DEFAULT_TIE_TOLERANCE,
    TableResults,
    build_dispatch_manifest,
    build_manifest,
)
from tunetable.stats import geomean  # noqa: E402

PARAMS = load_params(REPO / "params.yaml")
TABLES = tuple(PARAMS["tables"])
DISPATCH = "gemm_dispatch"
DEVICES = ("h200", "h100")          # the primary device first: its selection is the committed manifests
PRIMARY = DEVICES[0]
OTHER = {"h200": "h100", "h100": "h200"}
TARGETS = {"h100_dispatch_own": 1.03, "h200_dispatch_today": 1.041}
M_BANDS = ((1, 32, "M <= 32"), (33, 512, "M 33-512"), (513, 1 << 31, "M > 512"))
Shape = tuple[int, int, int]
Times = dict[Shape, dict[str, float]]


def recording(*, device: str, table: str, validation: bool = False) -> Path:
    """A device's recording of a table (its default shapes, or the validation shapes)."""
    return REPO / recording_path(device=device, table=("validation_" if validation else "") + table)


def checked_times(path: Path) -> Times:
    """(M, N, K) -> {config id: median ms} of a recording, checked whole against its sidecar first."""
    load_checked_recording(path, served=False)
    return tvc.shard_times(path)


def ranked_rows(*, path: Path, table: str) -> pl.DataFrame:
    """A recording ranked exactly as `tunetable rank` ranks a table's shards."""
    loaded = resultset.from_frame(frame=pl.read_parquet(path), path=str(path), name=table)
    return rank.rank_rows(rows=loaded.frame, parameters=tuple(loaded.parameters)).ranked


def own_selection(*, table: str, ranked: pl.DataFrame) -> str:
    """The manifest text the pipeline's select rule gives for these ranked rows."""
    tolerance = float((PARAMS.get("select") or {}).get("tie_tolerance", DEFAULT_TIE_TOLERANCE))
    return build_manifest(table=table, kernel=table_spec(PARAMS, table).family, ranked=ranked, tolerance=tolerance)


def entries_of(text: str, *, label: str) -> list[ManifestEntry]:
    """A manifest text's entries typed for the lookup."""
    return ranges_from_text(text, path=label)[1]


def dispatch_text(*, manifests: dict[str, str], ranked: dict[str, pl.DataFrame]) -> str:
    """The dispatch list the pipeline's rule builds from these tables' manifests and ranked rows."""
    spec = dispatch_spec(PARAMS, DISPATCH)
    tables = []
    for name in spec.tables:
        manifest = parse_manifest_text(manifests[name], path=f"{name} selection")
        tables.append(TableResults(name=name, entries=tuple(manifest.params),
                                   provenance=dict(manifest.provenance or {}), ranked=ranked[name]))
    return build_dispatch_manifest(name=DISPATCH, tables=tables, tolerance=spec.tie_tolerance)


def device_selections(device: str) -> dict[str, Any]:
    """A device's own selection per table and its dispatch list (manifest texts), from its recordings."""
    ranked = {t: ranked_rows(path=recording(device=device, table=t), table=t) for t in TABLES}
    manifests = {t: own_selection(table=t, ranked=ranked[t]) for t in TABLES}
    return {"tables": manifests, "dispatch": dispatch_text(manifests=manifests, ranked=ranked)}


def committed_selections() -> dict[str, Any]:
    """The primary device's committed manifests and dispatch list (what gemm() serves today)."""
    def text(name: str) -> str:
        return (REPO / f"manifests/{name}.yaml").read_text(encoding="utf-8")
    return {"tables": {t: text(t) for t in TABLES}, "dispatch": text(DISPATCH)}


def scored(*, times: dict[str, Times], selection: dict[str, Any], label: str) -> dict[str, dict[Shape, float]]:
    """Per table and for the dispatch list: shape -> cuBLAS / the selected configuration, same shard."""
    series = {t: tvc.table_ratios(times=times[t], entries=entries_of(selection["tables"][t], label=f"{label} {t}"))
              for t in TABLES}
    series[DISPATCH] = tvc.dispatch_ratios(series=series,
                                           entries=entries_of(selection["dispatch"], label=f"{label} {DISPATCH}"))
    return series


def operator_served(*, device: str, ratios: dict[Shape, float]) -> dict[str, Any]:
    """The PyTorch operator over the dispatch list's shapes: torch's matmul where its route (layers.torch_serves on
    the device's committed tables and its measured ceilings) sends a shape there, counted at 1.0 (the recording's
    cuBLAS), else ``ratios``."""
    dispatcher, selector = decide.dispatcher(device=device), decide.shape_selector(device=device)
    ceilings = decide.DEVICES[device].ceilings
    smallest = smallest_recorded_floor_s(ms=selector.starts, pairs=selector.pairs, ceilings=ceilings)
    to_torch = {shape for shape in ratios
                if torch_serves(dispatcher.decide(m=shape[0], n=shape[1], k=shape[2]), m=shape[0], n=shape[1],
                                k=shape[2], smallest_floor_s=smallest, ceilings=ceilings) is not None}
    served = {shape: 1.0 if shape in to_torch else ratio for shape, ratio in ratios.items()}
    return {**ratio_summary(served), "to_torch": len(to_torch),
            "below_0_9": sum(1 for value in served.values() if value < 0.9)}


def paired_ratio(*, own: dict[Shape, float], other: dict[Shape, float]) -> dict[str, Any]:
    """own / other, geomean over the shapes both score, and the shapes only own scores: where the other device's
    selection picks a configuration this device never measured (a grid group of the other device only, params.yaml
    ``devices:``), that shape is left out of both, so the ratio compares the same shapes."""
    shared = sorted(set(own) & set(other))
    return {"geomean": round(tvc.summary({s: own[s] / other[s] for s in shared})["geomean"], 4), "shapes": len(shared),
            "unscored": [f"{m}x{n}x{k}" for m, n, k in sorted(set(own) - set(other))]}


def ratio_summary(ratios: dict[Shape, float]) -> dict[str, Any]:
    """table_vs_cublas's summary, rounded for the report."""
    item = tvc.summary(ratios)
    return {key: round(value, 4) if isinstance(value, float) else value for key, value in item.items()}


def strict_best(row: dict[str, float]) -> str:
    """The fastest configuration of a shard (ties: config id), never the cuBLAS row."""
    return min((t, c) for c, t in row.items() if c != "cublas")[1]


def band(m: int) -> str:
    """The M band a shape belongs to."""
    return next(label for low, high, label in M_BANDS if low <= m <= high)


def cost_summary(costs: dict[Shape, float]) -> dict[str, Any]:
    """Distribution of relative costs (time of the other choice / time of the own one - 1)."""
    values = sorted(costs.values())
    if not values:
        return {"shapes": 0}
    worst = sorted(costs.items(), key=lambda item: (-item[1], item[0]))[:5]
    return {"shapes": len(values), "nonzero": sum(v > 0 for v in values),
            "geomean": round(geomean([1 + v for v in values]) - 1, 4),
            "median": round(statistics.median(values), 4), "max": round(values[-1], 4),
            "over_2pct": sum(v > 0.02 for v in values),
            "worst": [{"shape": f"{m}x{n}x{k}", "cost": round(v, 4)} for (m, n, k), v in worst]}


def winner_differences(*, table: str, times: dict[str, dict[str, Times]],
                       selections: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """How the H100's winners differ from the H200's on one table, and what the H200's choice costs on the H100."""
    h100, h200 = times["h100"][table], times["h200"][table]
    shapes = sorted(set(h100) & set(h200), key=lambda s: (s[1], s[2], s[0]))
    own = entries_of(selections["h100"]["tables"][table], label=f"h100 {table}")
    other = entries_of(selections["h200"]["tables"][table], label=f"h200 {table}")
    strict_cost, selected_cost, strict_differs, selected_differs = {}, {}, [], []
    for shape in shapes:
        best_here, best_there = strict_best(h100[shape]), strict_best(h200[shape])
        strict_cost[shape] = h100[shape][best_there] / h100[shape][best_here] - 1
        if best_here != best_there:
            strict_differs.append(shape)
        mine, theirs = (lookup(entries, m=shape[0], n=shape[1], k=shape[2]).config_id for entries in (own, other))
        selected_cost[shape] = h100[shape][theirs] / h100[shape][mine] - 1
        if mine != theirs:
            selected_differs.append(shape)
    by_band = {}
    for _, _, label in M_BANDS:
        inside = [s for s in shapes if band(s[0]) == label]
        by_band[label] = {"shapes": len(inside), "strict_winner_differs": sum(s in strict_differs for s in inside),
                          "selected_differs": sum(s in selected_differs for s in inside),
                          "selected_cost": cost_summary({s: selected_cost[s] for s in inside})}
    return {"shapes": len(shapes), "strict_winner_differs": len(strict_differs),
            "share_strict_winner_differs": round(len(strict_differs) / len(shapes), 4),
            "selected_differs": len(selected_differs),
            "share_selected_differs": round(len(selected_differs) / len(shapes), 4),
            "strict_cost": cost_summary(strict_cost), "selected_cost": cost_summary(selected_cost),
            "by_m": by_band}


def validation_figures(times: dict[str, dict[str, Times]]) -> dict[str, Any]:
    """Per device: the reach on the validation shapes over the families it has validation recordings of."""
    out: dict[str, Any] = {}
    for device in DEVICES:
        present = {t: checked_times(recording(device=device, table=t, validation=True)) for t in TABLES
                   if recording(device=device, table=t, validation=True).is_file()}
        missing = [str(recording(device=device, table=t, validation=True).relative_to(REPO)) for t in TABLES
                   if t not in present]
        entry: dict[str, Any] = {"recordings": sorted(str(recording(device=device, table=t, validation=True)
                                                          .relative_to(REPO)) for t in present),
                                 "missing": missing}
        if len(present) > 1:
            entry["reach_available_families"] = tvc.reach_summary(tvc.reach(present))
        if "gemm_mma" in present:   # like for like across devices: the one family both have recorded
            entry["reach_gemm_mma_only"] = tvc.reach_summary(tvc.reach({"gemm_mma": present["gemm_mma"]}))
        out[device] = entry
    return out


def unseen_shapes_result(device: str) -> Path:
    """benchmarks/unseen_shapes.py's result file for a device (the primary's keeps its old name)."""
    suffix = "" if device == PRIMARY else f".{device}"
    return REPO / f"benchmarks/results/unseen_shapes{suffix}.json"


def selector_on_validation() -> dict[str, Any]:
    """Per device: the selector's choice on its validation recordings, quoted from unseen_shapes.py's result."""
    out: dict[str, Any] = {}
    for device in DEVICES:
        path = unseen_shapes_result(device)
        validation = json.loads(path.read_text(encoding="utf-8")).get("validation") if path.is_file() else None
        gemm = (validation or {}).get("gemm")
        if not gemm:
            out[device] = None
            continue
        picks = {(row["M"], row["N"], row["K"]): row["gemm"]["speedup_vs_cublas"] for row in validation["rows"]}
        operator = operator_served(device=device, ratios=picks)
        out[device] = {"source": f"{path.relative_to(REPO)} (benchmarks/unseen_shapes.py --device {device})",
                       "speedup_vs_cublas": gemm.get("speedup_vs_cublas"),
                       "of_exhaustive_best": gemm.get("of_exhaustive_best"),
                       "min": min(picks.values()), "below_0_9": sum(1 for value in picks.values() if value < 0.9),
                       "shapes": len(picks),
                       "operator": operator}
    return out


def figures() -> dict[str, Any]:
    """Every figure of the report, from the recordings and the committed manifests."""
    times = {d: {t: checked_times(recording(device=d, table=t)) for t in TABLES} for d in DEVICES}
    selections = {d: device_selections(d) for d in DEVICES}
    committed = committed_selections()
    same = {name: selections[PRIMARY]["tables"][name] == committed["tables"][name] for name in TABLES}
    same[DISPATCH] = selections[PRIMARY]["dispatch"] == committed["dispatch"]
    chosen = {PRIMARY: committed, "h100": selections["h100"]}   # the H200's selection is what is committed
    series = {d: {"own": scored(times=times[d], selection=chosen[d], label=f"{d} own"),
                  "other": scored(times=times[d], selection=chosen[OTHER[d]], label=f"{OTHER[d]} on {d}")}
              for d in DEVICES}
    summaries = {d: {which: {name: ratio_summary(r) for name, r in per.items()} for which, per in series[d].items()}
                 for d in DEVICES}
    return {
        "recordings": {d: {t: str(recording(device=d, table=t).relative_to(REPO)) for t in TABLES} for d in DEVICES},
        "recording_sha256": {d: {t: sha256_file(recording(device=d, table=t)) for t in TABLES} for d in DEVICES},
        "h200_selection_equals_committed": same,
        "speedup_vs_cublas": summaries,
        "own_over_other": {d: {name: paired_ratio(own=own, other=series[d]["other"][name])
                               for name, own in series[d]["own"].items()} for d in DEVICES},
        "differences": {t: winner_differences(table=t, times=times, selections=chosen) for t in TABLES},
        "dispatch_on_gemm_mma_shapes": {d: {which: ratio_summary({s: v for s, v in series[d][which][DISPATCH].items()
                                                                  if s in times[d]["gemm_mma"]})
                                            for which in ("own", "other")} for d in DEVICES},
        "reach_default": {d: tvc.reach_summary(tvc.reach(times[d])) for d in DEVICES},
        "operator_served": {d: operator_served(device=d, ratios=series[d]["own"][DISPATCH]) for d in DEVICES},
        "validation": validation_figures(times),
        "selector_on_validation": selector_on_validation(),
        "per_shape": {d: {which: {name: {f"{m}x{n}x{k}": round(v, 4) for (m, n, k), v in sorted(r.items())}
                                  for name, r in per.items()} for which, per in series[d].items()} for d in DEVICES},
        "_series": series,
    }


def speedup_rows(result: dict[str, Any]) -> list[list[str]]:
    """Rows of the main table: device, table, own (in-sample), other device's tables (out-of-sample)."""
    rows = []
    for device in DEVICES:
        for name in (*TABLES, DISPATCH):
            own = result["speedup_vs_cublas"][device]["own"][name]
            other = result["speedup_vs_cublas"][device]["other"][name]
            paired = result["own_over_other"][device][name]
            over = "" if paired["shapes"] == own["shapes"] else f" (over {paired['shapes']})"
            rows.append([device, name, str(own["shapes"]), f"{own['geomean']:.3f}",
                         f"{own['at_or_above_1']} / {own['shapes']}", f"{own['min']:.3f}",
                         f"{other['geomean']:.3f}", f"{other['at_or_above_1']} / {other['shapes']}",
                         f"{other['min']:.3f}", f"{paired['geomean']:.3f}{over}"])
    return rows


SPEEDUP_COLUMNS = ("device", "table", "shapes", "own x cuBLAS", "own >= 1.0x", "own min",
                   "other device's x cuBLAS", "other >= 1.0x", "other min", "own / other")


def difference_rows(result: dict[str, Any]) -> list[list[str]]:
    """Rows of the winner-difference table, per table and M band."""
    rows = []
    for name, item in result["differences"].items():
        for label, part in (("all", item), *item["by_m"].items()):
            cost = part["selected_cost"]
            worst = cost["worst"][0] if cost.get("shapes") and cost["max"] > 0 else {}
            rows.append([name, label, str(part["shapes"]), str(part["strict_winner_differs"]),
                         str(part["selected_differs"]), f"{100 * cost.get('geomean', 0.0):.2f} %",
                         f"{100 * cost.get('max', 0.0):.2f} %", str(cost.get("over_2pct", 0)),
                         f"{worst.get('shape', '-')}"])
    return rows


DIFFERENCE_COLUMNS = ("table", "M", "shapes", "best differs", "selection differs", "H200 choice's cost (geomean)",
                      "max", "> 2 %", "worst shape")


def validation_rows(result: dict[str, Any]) -> list[list[str]]:
    """Rows of the validation (held-out) table."""
    rows = []
    for device, item in result["validation"].items():
        for key, label in (("reach_available_families", "every family recorded"),
                           ("reach_gemm_mma_only", "gemm_mma only")):
            if key in item:
                part = item[key]
                used = [Path(p).stem for p in item["recordings"] if key != "reach_gemm_mma_only" or "gemm_mma" in p]
                rows.append([device, label, str(part["shapes"]), f"{part['geomean']:.3f}", f"{part['min']:.3f}",
                             str(part["below_0_9"]), ", ".join(used)])
    return rows


VALIDATION_COLUMNS = ("device", "families", "shapes", "reach x cuBLAS", "min", "< 0.9x", "recordings")


def verdicts(result: dict[str, Any]) -> list[str]:
    """The issue's targets, judged."""
    h100 = result["speedup_vs_cublas"]["h100"]
    h200 = result["speedup_vs_cublas"]["h200"]["own"][DISPATCH]
    own, other = h100["own"][DISPATCH], h100["other"][DISPATCH]
    missing = result["validation"]["h100"]["missing"]
    return [
        "H100 with its own tables (in-sample): dispatch "
        f"{tvc.against(value=own['geomean'], target=TARGETS['h100_dispatch_own'], target_text='1.03')} "
        f"over {own['shapes']} shapes; the H200's tables on the H100 (out-of-sample): {other['geomean']:.3f}",
        "the same over gemm_mma's 55 shapes: " + "; ".join(
            f"{d} own {result['dispatch_on_gemm_mma_shapes'][d]['own']['geomean']:.3f}, {OTHER[d]}'s tables "
            f"{result['dispatch_on_gemm_mma_shapes'][d]['other']['geomean']:.3f}" for d in DEVICES),
        f"H200 (committed tables): dispatch {h200['geomean']:.3f} over {h200['shapes']} shapes "
        f"(today 1.041: {'no worse' if round(h200['geomean'], 3) >= TARGETS['h200_dispatch_today'] else 'WORSE'})",
        "the H200's selection from its recordings equals the committed manifests: "
        + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in result["h200_selection_equals_committed"].items()),
        "the PyTorch operator over the same shapes (tunetable's kernel, or torch's matmul where the dispatch entry "
        "measured cuBLAS faster, counted at 1.0x: torch.mm's time taken as the recording's cuBLAS; in-sample, the "
        "routes read the recordings that score them): " + ", ".join(
            f"{d} {result['operator_served'][d]['geomean']:.3f} over {result['operator_served'][d]['shapes']}, "
            f"{result['operator_served'][d]['to_torch']} to torch" for d in DEVICES),
        "ceiling (best configuration per shape over every family, in hindsight, same shard) on every table's "
        "shapes: " + ", ".join(f"{d} {result['reach_default'][d]['geomean']:.3f} over "
                               f"{result['reach_default'][d]['shapes']}" for d in DEVICES),
        "missing for the held-out figure: " + (", ".join(missing) if missing else "nothing"),
    ]


def selector_line(quoted: dict[str, Any] | None) -> str:
    """The quoted selector figure in words (or why it is absent)."""
    if not quoted:
        return "not available (run benchmarks/unseen_shapes.py --device for it)"
    operator = quoted["operator"]
    return (f"{quoted['speedup_vs_cublas']:.3f}x cuBLAS geomean, min {quoted['min']:.3f}, {quoted['below_0_9']} of "
            f"{quoted['shapes']} below 0.9x; {quoted['of_exhaustive_best']:.3f}x the exhaustive best "
            f"(quoted from {quoted['source']}); through the PyTorch operator, which routes {operator['to_torch']} of "
            f"them to torch's matmul (counted at 1.0x), {operator['geomean']:.3f}x, min {operator['min']:.3f}, "
            f"{operator['below_0_9']} below 0.9x")


def markdown(result: dict[str, Any]) -> str:
    """The report as Markdown."""
    def table(columns: tuple[str, ...], rows: list[list[str]]) -> list[str]:
        return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
                *("| " + " | ".join(row) + " |" for row in rows)]

    recordings = ", ".join(sorted({p for per in result["recordings"].values() for p in per.values()}))
    lines = ["# A device's own tables against another device's (committed recordings)", "",
             f"Recordings: {recordings}. Every speedup is cuBLAS median / our median of the same shard of the "
             "device's own recording. **own** is in-sample (chosen and scored on the same rows: the winner's curse "
             "flatters it); **other** is the other device's selection scored on this device's rows (out-of-sample "
             "for the H100; for the H200 the H100's selection, out-of-sample too). The H200's selection is the "
             "committed manifests. A shape where the other device's selection names a configuration this device "
             "never measured (a grid group of that device only, params.yaml `devices:`) is not scored for *other* "
             "(its count shows it); own / other is over the shapes both score.", "",
             *table(SPEEDUP_COLUMNS, speedup_rows(result)), "",
             "## How the H100's winners differ from the H200's (cost on the H100 of the H200's choice)", "",
             "best: the fastest configuration of the shard; selection: the manifest entry covering the shape; "
             "cost: H100 time of the H200's choice / H100 time of the H100's own choice - 1.", "",
             *table(DIFFERENCE_COLUMNS, difference_rows(result)), "",
             "## Held out: the validation shapes (never tuned on), reach = best configuration per shape", "",
             *table(VALIDATION_COLUMNS, validation_rows(result)), "",
             *(f"- selector's choice on the {device.upper()}: {selector_line(result['selector_on_validation'][device])}"
               for device in DEVICES),
             "", *(f"- {line}" for line in verdicts(result)), "", "![per shape](device_tables.png)"]
    return "\n".join(lines) + "\n"


def plot(*, series: dict[str, Any], path: Path) -> None:
    """Per shape on the H100: its own tables vs the H200's tables, speedup vs cuBLAS over log2 M, one panel each."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = (*TABLES, DISPATCH)
    fig, axes = plt.subplots(1, len(names), figsize=(18, 4.5), sharey=True)
    for ax, name in zip(axes, names):
        for which, label, marker, offset in (("own", "H100's own tables (in-sample)", "o", -0.08),
                                             ("other", "H200's tables on the H100", "x", 0.08)):
            points = sorted(series["h100"][which][name].items())
            ax.scatter([math.log2(s[0]) + offset for s, _ in points], [v for _, v in points], s=12, marker=marker,
                       label=label)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_title(f"{name} ({len(series['h100']['own'][name])} shapes)", fontsize=9)
        ax.set_xlabel("log2 M")
    axes[0].set_ylabel("cuBLAS time / our time (same shard, H100 recordings)")
    axes[0].legend(fontsize=7)
    fig.suptitle("H100: own tables vs the H200's tables (data/recordings/h100_*.parquet)")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, metadata={"Software": None})
    atomic_write_bytes(path, buffer.getvalue())


def main() -> None:
    """Compute, print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    from rich.console import Console

    from tunetable.console_table import ConsoleTable, print_table

    result = figures()
    series = result.pop("_series")
    console = Console()
    for title, columns, rows in (("Speedup vs cuBLAS (same shard), geomean over each table's default shapes",
                                  SPEEDUP_COLUMNS, speedup_rows(result)),
                                 ("H100 vs H200 winners: cost on the H100 of the H200's choice", DIFFERENCE_COLUMNS,
                                  difference_rows(result)),
                                 ("Held out: validation shapes, reach", VALIDATION_COLUMNS, validation_rows(result))):
        shown = ConsoleTable(title=title)
        for column in columns:
            shown.add_column(column)
        for row in rows:
            shown.add_row(*row)
        print_table(console, shown)
    for line in verdicts(result):
        console.print(line, soft_wrap=True, markup=False)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "device_tables.json", json.dumps(result, indent=1, sort_keys=True) + "\n")
    atomic_write_text(args.out / "device_tables.md", markdown(result))
    plot(series=series, path=args.out / "device_tables.png")


if __name__ == "__main__":
    try:
        main()
    except TuneTableError as exc:   # an unreadable or unverifiable recording or manifest: one line, exit 2
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
