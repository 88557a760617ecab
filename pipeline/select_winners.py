"""Select per-shape winners from a ranked table into a manifest (deterministic YAML).

Per (N, K): the winner at each measured M among ``ok`` rows; a near-tie (within the tie
tolerance or the winner's measured IQR) goes to the candidate that wins more neighbouring M
values, so tables stay short and stable across reruns; adjacent M values with the same winner
merge into [M, M_END) ranges. The manifest's provenance names the measurement only, so that
selecting from replayed rows gives the same bytes as selecting from the live ones.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import polars as pl

from tunetable.baseline import pooled_baselines
from tunetable.errors import TuneTableError
from tunetable.kernels.families.common import cublas_measured_faster
from tunetable.manifest import UNKNOWN, Manifest, lookup, manifest_ranges
from tunetable.rank import ranked_parameters, valid_time
from tunetable.results import BASELINE_ID
from tunetable.yamlio import load_yaml

INT32_MAX = 2147483647
FIRST_M = 1
DEFAULT_TIE_TOLERANCE = 0.01
# Row values that describe the measurement itself: hashed into the manifest's data hash.
MEASUREMENT_COLUMNS = ("M", "N", "K", "config_id", "median_ms", "iqr_ms", "status")
# A replayed row is a cuda measurement served again: its measurement backend is cuda.
MEASUREMENT_BACKEND = {"replay": "cuda"}
PLAIN_STRING = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True)
class Choice:
    """The configuration chosen at one measured M of an (N, K)."""

    m: int
    config_id: str
    strict_winner: str


@dataclass(frozen=True)
class Selection:
    """One manifest entry: a config for M in [m, m_end) at (n, k)."""

    m: int
    m_end: int
    n: int
    k: int
    config_id: str
    values: tuple[tuple[str, Any], ...]


def near_ties_by_shape(*, rows: pl.DataFrame, tolerance: float) -> pl.DataFrame:
    """near_ties for every shape at once: columns N, K, M, ties (fastest first), sorted by N, K, M."""
    shape = ["N", "K", "M"]
    iqr = pl.col("iqr_ms").fill_null(0.0)
    best = pl.col("median_ms").min().over(shape)
    # A cheap superset first (any row's IQR as noise), so the exact rule only sorts a few rows.
    loose = rows.filter(pl.col("median_ms") <= best + pl.max_horizontal(best * tolerance, iqr.max().over(shape)))
    ordered = loose.sort([*shape, "median_ms", "config_id"])
    first = pl.col("median_ms").first().over(shape)
    noise = pl.max_horizontal(first * tolerance, iqr.first().over(shape))
    return (ordered.filter(pl.col("median_ms") <= first + noise)
            .group_by(shape, maintain_order=True).agg(pl.col("config_id").alias("ties")))


def choose_winners(*, ties_by_m: list[tuple[int, list[str]]]) -> list[Choice]:
    """At each M pick, among its near-ties, the config that strictly wins more adjacent M values.

    Ties in that count go to the faster config (the candidates' own order); the choice depends
    only on strict winners, so it is the same whatever order the shapes were measured in.
    """
    winners = [ties[0] for _, ties in ties_by_m]
    choices = []
    for index, (m, ties) in enumerate(ties_by_m):
        neighbours = winners[max(index - 1, 0):index] + winners[index + 1:index + 2]
        scored = sorted(enumerate(ties), key=lambda item: (-neighbours.count(item[1]), item[0]))
        choices.append(Choice(m=m, config_id=scored[0][1], strict_winner=winners[index]))
    return choices


def merge_ranges(*, choices: list[Choice]) -> list[tuple[int, int, str]]:
    """Adjacent Ms with the same config as [M, M_END); the first starts at 1, the last ends at INT32_MAX."""
    ranges: list[list[Any]] = []
    for choice in choices:
        if ranges and ranges[-1][2] == choice.config_id:
            continue
        if ranges:
            ranges[-1][1] = choice.m
        ranges.append([choice.m, None, choice.config_id])
    if ranges:
        ranges[0][0] = FIRST_M
        ranges[-1][1] = INT32_MAX
    return [(start, end, config) for start, end, config in ranges]


def eligible_rows(*, ranked: pl.DataFrame) -> pl.DataFrame:
    """Only verified (``ok``) kernel rows may be selected."""
    return ranked.filter((pl.col("status") == "ok") & (pl.col("config_id") != BASELINE_ID)
                         & valid_time("median_ms"))


def select_entries(*, ranked: pl.DataFrame, tolerance: float = DEFAULT_TIE_TOLERANCE) -> list[Selection]:
    """Manifest entries in lookup order: (N, K) ascending, then M ascending."""
    rows = eligible_rows(ranked=ranked)
    parameters = ranked_parameters(frame=ranked)
    configs = {row["config_id"]: tuple((p, row[p]) for p in parameters)
               for row in rows.unique("config_id", keep="first").iter_rows(named=True)}
    ties = near_ties_by_shape(rows=rows, tolerance=tolerance)
    entries: list[Selection] = []
    for (n, k), group in ties.group_by(["N", "K"], maintain_order=True):
        ties_by_m = list(zip(group["M"].to_list(), group["ties"].to_list()))
        for start, end, config in merge_ranges(choices=choose_winners(ties_by_m=ties_by_m)):
            entries.append(Selection(m=start, m_end=end, n=int(n), k=int(k), config_id=config,
                                     values=configs[config]))
    return entries


def _distinct(values: pl.Series) -> str:
    """The sorted distinct non-null values joined by commas ('unknown' when there are none)."""
    present = sorted({str(v) for v in values.drop_nulls().unique().to_list()})
    return ",".join(present) if present else UNKNOWN


def data_hash(*, ranked: pl.DataFrame) -> str:
    """Hash of the measurement values of the ranked rows (backend and content keys left out)."""
    columns = [c for c in (*MEASUREMENT_COLUMNS, *ranked_parameters(frame=ranked)) if c in ranked.columns]
    # Fixed-width binary of each sorted column: exact, and fast on a million rows.
    digest = hashlib.sha256()
    for series in ranked.select(columns).sort(["M", "N", "K", "config_id"]).iter_columns():
        digest.update(series.name.encode() + b"\0")
        if series.dtype.is_numeric():
            digest.update(series.cast(pl.Float64).fill_null(float("nan")).to_numpy().tobytes())
        else:
            digest.update(series.cast(pl.Utf8).fill_null("\x00null").str.join("\x1f").item().encode())
    return digest.hexdigest()[:16]


def provenance(*, table: str, ranked: pl.DataFrame) -> dict[str, str]:
    """The measurement behind the table: never the time, commit or backend of this selection step."""
    rows = eligible_rows(ranked=ranked)

    def column(name: str) -> pl.Series:
        return rows[name] if name in rows.columns else pl.Series(name, [], dtype=pl.Utf8)

    backends = column("backend").unique().replace(MEASUREMENT_BACKEND)
    latest = column("time").drop_nulls().cast(pl.Utf8).max()
    return {
        "table": table,
        "results_key": _distinct(column("measured_key")),
        "data_hash": data_hash(ranked=ranked),
        "kernel_hash": _distinct(column("kernel_hash")),
        "device": _distinct(column("device")),
        "driver": _distinct(column("driver")),
        "backend": _distinct(backends),
        "date": latest[:10] if latest else UNKNOWN,
        "git_rev": _distinct(column("git_rev")),
    }


def entry_mapping(*, selection: Selection, kernel: str) -> dict[str, Any]:
    """An entry's keys in manifest order: M, M_END, N, K, tunables (grid order), KERNEL, CONFIG_ID."""
    return {"M": selection.m, "M_END": selection.m_end, "N": selection.n, "K": selection.k,
            **{name.upper(): _plain(value) for name, value in selection.values},
            "KERNEL": kernel, "CONFIG_ID": selection.config_id}


def _plain(value: Any) -> Any:
    """numpy / polars scalars as plain Python values."""
    return value.item() if hasattr(value, "item") else value


SHAPE_KEYS = ("M", "M_END", "N", "K", "CONFIG_ID")


def split_defaults(*, entries: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Values shared by every entry (never shape keys or CONFIG_ID) and each entry's own values."""
    if not entries:
        return {}, []
    keys = [k for k in entries[0] if k not in SHAPE_KEYS]
    common = {k: entries[0][k] for k in keys
              if all(k in e and type(e[k]) is type(entries[0][k]) and e[k] == entries[0][k] for e in entries)}
    own = [{k: v for k, v in e.items() if k not in common} for e in entries]
    return common, own


def yaml_scalar(value: Any) -> str:
    """One YAML scalar that the YAML loader (tunetable.yamlio) reads back as exactly ``value``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        # YAML 1.1 reads an exponent without a '.' (1e-05) as a string: write 1.0e-05.
        return text.replace("e", ".0e", 1) if "e" in text and "." not in text else text
    return _string_scalar(str(value))


@lru_cache(maxsize=4096)
def _string_scalar(text: str) -> str:
    """A string plain when YAML reads it back as the same string (not a number, date, bool), else quoted."""
    if PLAIN_STRING.match(text) and load_yaml(text) == text:
        return text
    return json.dumps(text)


def yaml_mapping_lines(*, mapping: dict[str, Any], indent: str) -> list[str]:
    """``key: value`` lines of a flat mapping; a list value (of scalars' lists) as one ``- [a, b]`` line per item."""
    lines = []
    for key, value in mapping.items():
        if isinstance(value, (list, tuple)):
            lines.append(f"{indent}{yaml_scalar(key)}:" + ("" if value else " []"))
            lines.extend(f"{indent}  - [{', '.join(yaml_scalar(item) for item in row)}]" for row in value)
        else:
            lines.append(f"{indent}{yaml_scalar(key)}: {yaml_scalar(value)}")
    return lines


def manifest_text(*, header: list[str], top: dict[str, Any], defaults: dict[str, Any], anchor: str,
                  list_key: str, entries: list[dict[str, Any]], defaults_as_list: bool = False) -> str:
    """Deterministic YAML: header comments, flat top mappings, an anchored defaults, merged entries."""
    lines = [f"# {line}" if line else "#" for line in header]
    for key, value in top.items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            lines.extend(yaml_mapping_lines(mapping=value, indent="  "))
        else:
            lines.append(f"{key}: {yaml_scalar(value)}")
    if defaults:
        lines.append(f"{anchor}: &{anchor}")
        body = yaml_mapping_lines(mapping=defaults, indent="  ")
        if defaults_as_list:  # kprofile's `common: &common` is a list holding one mapping
            body = ["- " + body[0].strip(), *body[1:]]
        lines.extend(body)
    else:
        lines.append(f"{anchor}: &{anchor} " + ("[{}]" if defaults_as_list else "{}"))
    lines.append(f"{list_key}:")
    for entry in entries:
        lines.append(f"  - <<: *{anchor}")
        lines.extend(yaml_mapping_lines(mapping=entry, indent="    "))
    return "\n".join(lines) + "\n"


def build_manifest(*, table: str, kernel: str, ranked: pl.DataFrame,
                   tolerance: float = DEFAULT_TIE_TOLERANCE) -> str:
    """The manifest text of a table, byte-identical for the same ranked measurements."""
    selections = select_entries(ranked=ranked, tolerance=tolerance)
    entries = [entry_mapping(selection=s, kernel=kernel) for s in selections]
    defaults, own = split_defaults(entries=entries)
    header = [f"tunetable manifest for table {table}: generated by `tunetable select`; do not edit by hand.",
              f"Per (N, K), the fastest verified config per M range [M, M_END); near-ties within "
              f"{tolerance:g} (relative) or the measured IQR go to the config winning more neighbours."]
    return manifest_text(header=header, top={"provenance": provenance(table=table, ranked=ranked)},
                         defaults=defaults, anchor="defaults", list_key="params", entries=own)


# --- cross-family dispatch lists ---------------------------------------------------------------
#
# Per measured shape, each table's *selected* winner (the manifest entry covering the shape, i.e.
# what the runtime runs) is judged by its speedup over the shape's cuBLAS yardstick: yardstick /
# winner median. Two tables are usually measured in separate sessions; the yardstick pools every
# table's cuBLAS row of the shape, in each recording's session scale (tunetable.baseline), so that
# a session's clocks and thermals are corrected and one shard's cuBLAS mode (bimodal at some small
# shapes) is not. The table with the highest speedup serves the shape; a tie (within the list's tie
# tolerance, exact by default) goes to the table listed first. Each entry carries that speedup at its first
# M (SPEEDUP_VS_CUBLAS, rounded so that output stays deterministic): the PyTorch operator routes a shape whose
# entry measured cuBLAS faster to torch's matmul, so an M where cuBLAS ran faster never shares an entry with
# one where it did not.

DISPATCH_KEYS = ("M", "M_END", "N", "K", "KERNEL", "TABLE", "CONFIG_ID", "SPEEDUP_VS_CUBLAS")
SPEEDUP_DIGITS = 4


@dataclass(frozen=True)
class TableResults:
    """One table as a dispatch list sees it: its manifest (entries, provenance) and ranked rows."""

    name: str
    entries: tuple[dict[str, Any], ...]
    provenance: dict[str, Any]
    ranked: pl.DataFrame


@dataclass(frozen=True)
class Candidate:
    """A table's selected winner at one measured shape, with the shape's cuBLAS yardstick for its table."""

    table: str
    kernel: str
    config_id: str
    median_ms: float
    cublas_ms: float

    @property
    def speedup(self) -> float:
        """cuBLAS median / winner median: above 1 beats cuBLAS."""
        return self.cublas_ms / self.median_ms

    @property
    def entry_speedup(self) -> float:
        """The speedup as a dispatch entry holds it (``entry_speedup``)."""
        return entry_speedup(speedup=self.speedup)


def entry_speedup(*, speedup: float) -> float:
    """A speedup as a dispatch entry's SPEEDUP_VS_CUBLAS holds it: rounded to SPEEDUP_DIGITS decimals."""
    return round(speedup, SPEEDUP_DIGITS)


def table_candidates(*, results: TableResults) -> dict[tuple[int, int, int], Candidate]:
    """(M, N, K) -> the table's selected winner there, for every shape with a verified winner and cuBLAS row."""
    rows = eligible_rows(ranked=results.ranked).filter(pl.col("cublas_ms").is_not_null())
    timing = {(int(r["M"]), int(r["N"]), int(r["K"]), str(r["config_id"])):
              (float(r["median_ms"]), float(r["cublas_ms"]))
              for r in rows.select("M", "N", "K", "config_id", "median_ms", "cublas_ms").iter_rows(named=True)}
    shapes = sorted({(m, n, k) for (m, n, k, _) in timing})
    ranges = manifest_ranges(Manifest(params=list(results.entries)), path=f"manifests/{results.name}.yaml")
    candidates = {}
    for m, n, k in shapes:
        entry = lookup(ranges, m=m, n=n, k=k)
        measured = timing.get((m, n, k, entry.config_id)) if entry is not None else None
        if entry is not None and measured is not None:
            candidates[(m, n, k)] = Candidate(table=results.name, kernel=str(entry.values["KERNEL"]),
                                              config_id=entry.config_id, median_ms=measured[0], cublas_ms=measured[1])
    return candidates


def table_baselines(*, ranked: pl.DataFrame) -> dict[tuple[int, int, int], float]:
    """(M, N, K) -> a table's cuBLAS median there (its shard's row), from its ranked rows."""
    rows = eligible_rows(ranked=ranked).filter(pl.col("cublas_ms").is_not_null())
    return {(int(m), int(n), int(k)): float(ms) for m, n, k, ms in rows.select("M", "N", "K", "cublas_ms").iter_rows()}


def against_yardstick(*, candidates: dict[str, dict[tuple[int, int, int], Candidate]],
                      baselines: dict[str, dict[tuple[int, int, int], float]]
                      ) -> dict[str, dict[tuple[int, int, int], Candidate]]:
    """The candidates with each cuBLAS median replaced by the yardstick the tables share (tunetable.baseline)."""
    pooled = pooled_baselines(baselines=baselines)
    return {name: {shape: replace(c, cublas_ms=pooled[name][shape]) for shape, c in per_table.items()}
            for name, per_table in candidates.items()}


def choose_tables(*, candidates: dict[str, dict[tuple[int, int, int], Candidate]], order: tuple[str, ...],
                  tolerance: float = 0.0) -> dict[tuple[int, int, int], Candidate]:
    """Per shape (sorted by N, K, M), the candidate with the highest speedup; near-ties go to ``order``'s first."""
    shapes = sorted({shape for per_table in candidates.values() for shape in per_table},
                    key=lambda s: (s[1], s[2], s[0]))
    chosen = {}
    for shape in shapes:
        present = [candidates[name][shape] for name in order if shape in candidates.get(name, {})]
        best = max(candidate.speedup for candidate in present)
        chosen[shape] = next(c for c in present if c.speedup * (1.0 + tolerance) >= best)
    return chosen


def merge_key(*, candidate: Candidate) -> tuple[str, str, bool]:
    """What adjacent Ms must share to merge into one dispatch entry: table, config, and whether cuBLAS ran faster."""
    return candidate.table, candidate.config_id, cublas_measured_faster(speedup=candidate.entry_speedup)


def dispatch_entries(*, chosen: dict[tuple[int, int, int], Candidate]) -> list[dict[str, Any]]:
    """Dispatch entries in lookup order: per (N, K), adjacent Ms with the same ``merge_key`` merged; each entry
    holds its first M's speedup."""
    entries: list[dict[str, Any]] = []
    by_nk: dict[tuple[int, int], list[tuple[int, Candidate]]] = {}
    for (m, n, k), candidate in sorted(chosen.items(), key=lambda item: (item[0][1], item[0][2], item[0][0])):
        by_nk.setdefault((n, k), []).append((m, candidate))
    for (n, k), picks in by_nk.items():
        ranges: list[list[Any]] = []
        for m, candidate in picks:
            if ranges and merge_key(candidate=ranges[-1][2]) == merge_key(candidate=candidate):
                continue
            if ranges:
                ranges[-1][1] = m
            ranges.append([m, None, candidate])
        ranges[0][0] = FIRST_M
        ranges[-1][1] = INT32_MAX
        entries.extend({"M": start, "M_END": end, "N": n, "K": k, "KERNEL": c.kernel, "TABLE": c.table,
                        "CONFIG_ID": c.config_id, "SPEEDUP_VS_CUBLAS": c.entry_speedup} for start, end, c in ranges)
    return entries


def check_manifest_matches(*, results: TableResults) -> None:
    """The manifest must come from these ranked rows (same data hash), or the comparison is meaningless."""

    recorded = results.provenance.get("data_hash")
    current = data_hash(ranked=results.ranked)
    if recorded != current:
        raise TuneTableError(f"manifest of table {results.name} was selected from other measurements (data hash "
                             f"{recorded}, ranked rows {current}): run `tunetable select --table {results.name}` first")


def dispatch_provenance(*, name: str, tables: list[TableResults],
                        chosen: dict[tuple[int, int, int], Candidate]) -> dict[str, Any]:
    """Every table's measurement (content key, data hash, kernel, device, date, git revision) and its wins."""
    def union(field_name: str) -> str:
        """The sorted union of a provenance field's comma-separated values over every table."""
        values = sorted({str(v) for t in tables for v in str(t.provenance.get(field_name, UNKNOWN)).split(",")})
        return ",".join(values)

    dates = [str(t.provenance.get("date", UNKNOWN)) for t in tables]
    known = [d for d in dates if d != UNKNOWN]
    wins = {t.name: sum(1 for c in chosen.values() if c.table == t.name) for t in tables}
    provenance: dict[str, Any] = {
        "table": name,
        "tables": ",".join(t.name for t in tables),
        "basis": "cuBLAS yardstick (every table's row of the shape pooled, in each recording's session scale) / "
                 "selected winner median",
        "device": union("device"),
        "driver": union("driver"),
        "date": max(known) if known else UNKNOWN,
        "shapes": len(chosen),
    }
    for t in tables:
        for key in ("results_key", "data_hash", "kernel_hash", "backend", "date", "git_rev"):
            provenance[f"{t.name}_{key}"] = str(t.provenance.get(key, UNKNOWN))
        provenance[f"{t.name}_shapes_won"] = wins[t.name]
    return provenance


def build_dispatch_manifest(*, name: str, tables: list[TableResults], tolerance: float = 0.0) -> str:
    """The dispatch manifest text, byte-identical for the same manifests and ranked measurements."""
    for results in tables:
        check_manifest_matches(results=results)
    order = tuple(t.name for t in tables)
    candidates = against_yardstick(candidates={t.name: table_candidates(results=t) for t in tables},
                                   baselines={t.name: table_baselines(ranked=t.ranked) for t in tables})
    chosen = choose_tables(candidates=candidates, order=order, tolerance=tolerance)
    entries = dispatch_entries(chosen=chosen)
    defaults, own = split_defaults(entries=entries)
    tie = f"within {tolerance:g} (relative)" if tolerance else "exact ties"
    header = [f"tunetable dispatch manifest {name}: generated by `tunetable select --dispatch`; do not edit by hand.",
              (f"Per shape, the table ({', '.join(order)}) whose selected winner has the highest speedup over the "
               f"shape's cuBLAS yardstick (every table's row pooled, in each recording's session scale); {tie} go to "
               f"the table listed first."),
              (f"SPEEDUP_VS_CUBLAS: that speedup at the entry's first M ({SPEEDUP_DIGITS} decimals); an M where it "
               f"is below 1 (cuBLAS ran faster) never shares an entry with one where it is not.")]
    return manifest_text(header=header,
                         top={"provenance": dispatch_provenance(name=name, tables=tables, chosen=chosen)},
                         defaults=defaults, anchor="defaults", list_key="params", entries=own)
