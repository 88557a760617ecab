"""Settings fingerprints: what each rule depends on besides its files, as a shell comment Snakemake's code
trigger compares per rule, or (a table's metrics, per table) a ``params:`` value its params trigger compares per
job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tunetable.device_tables import base_tables, split_device_table
from tunetable.keys import canonical_json, sha256_text


def fingerprint(value: Any) -> str:
    """Short stable hash of settings: a Snakemake ``params:`` value that changes only when they do."""
    return sha256_text(canonical_json(value))[:16]


def settings_tag(value: Any) -> str:
    """A shell comment carrying a settings fingerprint: Snakemake's code trigger (which compares the
    command template) then re-runs the rule when the settings change, with no ``params:`` block."""
    return f"  # settings {fingerprint(value)}"


def select_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """What manifests depend on besides the ranked tables: select settings and each table's family (a device
    table's are its base table's: adding one re-selects nothing else)."""
    return {"select": config.get("select"), "families": {n: config["tables"][n]["family"] for n in base_tables(config)}}


def metrics_settings(config: Mapping[str, Any], *, tables: Sequence[str]) -> dict[str, Any]:
    """What the metrics of ``tables`` (one table, or a dispatch list's) depend on besides their inputs: those
    tables' declared shapes (a device table's are its base table's; a shape the run leaves out, or one reverted,
    changes the metrics while the shard list may stay the same) and each device's ceilings (the plots' roofline)."""
    bases = dict.fromkeys(split_device_table(name)[0] for name in tables)
    settings: dict[str, Any] = {name: config["tables"][name].get("shapes") for name in bases}
    settings["devices.ceilings"] = {key: (spec or {}).get("ceilings")
                                    for key, spec in (config.get("devices") or {}).items()}
    return settings


def codegen_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """Every table's and dispatch list's codegen settings, and what the builds region renders."""
    settings = {name: spec["codegen"] for name, spec in config["tables"].items()}
    settings.update({name: spec["codegen"] for name, spec in (config.get("dispatch") or {}).items()})
    tables = {name: [spec["family"], spec.get("arch")] for name, spec in config["tables"].items()}
    settings["builds"] = {"region": config.get("builds"), "flags": (config.get("compile") or {}).get("nvcc_flags"),
                          "tables": tables}
    settings.update({name: spec["codegen"] for name, spec in (config.get("selector") or {}).items()})
    return settings


def dispatch_settings(config: Mapping[str, Any], *, name: str) -> dict[str, Any]:
    """What a dispatch manifest depends on besides its inputs: the list's tables and tie tolerance."""
    spec = dict((config.get("dispatch") or {})[name])
    return {"tables": spec.get("tables"), "tie_tolerance": spec.get("tie_tolerance", 0.0)}


def selector_settings(config: Mapping[str, Any], *, name: str) -> dict[str, Any]:
    """What a selector manifest depends on besides the recordings: its tables, their shapes and families, its size."""
    spec = dict((config.get("selector") or {})[name])
    tables = {t: {"family": config["tables"][t]["family"], "shapes": config["tables"][t]["shapes"]}
              for t in spec.get("tables") or ()}
    return {"tables": tables, "candidates": spec.get("candidates")}
