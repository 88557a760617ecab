"""The content key of a table's shards: bench settings, grid, kernel source, toolchain, backend, device, search.

Light on purpose (no numpy): the Snakefile's parse computes every table's key
(``tunetable.smk_helpers.make_plan``). A budgeted search is part of the key; the search package is
imported only for a table that has one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tunetable.bench.plan import (
    device_name,
    recorded_nvcc,
    recording_path,
    recording_provenance,
    settings_from_params,
    toolchain_fingerprint,
)
from tunetable.errors import TuneTableError
from tunetable.grid import DeviceLimits, expand
from tunetable.keys import kernel_source_hash, results_key, sha256_file, sha256_text
from tunetable.params import TableSpec


def search_settings(*, table: TableSpec, path: str | Path = "params.yaml") -> Any:
    """The table's ``search:`` as a tunetable.search.SearchSettings; a bad value names its place."""
    # Lazy: the search package imports numpy and its strategies; the Snakefile's parse of a table
    # without a budgeted search (search_key_part's first test) must not pay for them.
    from tunetable.search import SearchSettings

    try:
        return SearchSettings.from_mapping(table.search)
    except TuneTableError:
        raise
    except ValueError as exc:
        raise TuneTableError(str(exc), path=path, where=f"tables.{table.name}.search") from None


def search_key_part(*, table: TableSpec, path: str | Path = "params.yaml") -> dict[str, Any] | None:
    """What a budgeted search adds to the content key; None for the default (measure everything)."""
    raw = dict(table.search or {})
    if raw.get("strategy", "exhaustive") == "exhaustive" and set(raw) <= {"strategy", "seed", "transfer"}:
        return None   # the default: every configuration measured, as without a search
    settings = search_settings(table=table, path=path)
    if settings.measures_everything:
        return None
    learn_hash = None
    if settings.learn_from is not None:
        if not Path(settings.learn_from).is_file():
            raise TuneTableError("no such recording to learn from", path=settings.learn_from,
                                 where=f"tables.{table.name}.search.learn_from")
        learn_hash = sha256_file(settings.learn_from)[:16]
    selector_hash = None
    if settings.seed_from_selector:   # the seeds come from the selector's tables' recordings
        from tunetable.selector_seeds import seed_recordings  # lazy: on the Snakefile's parse path, only when seeding
        selector_hash = sha256_text("".join(sha256_file(p) for p in seed_recordings(path=path)))[:16]
    return settings.fingerprint(learn_from_hash=learn_hash, selector_hash=selector_hash)


def grid_config_ids(*, params: Mapping[str, Any], table: TableSpec) -> list[str]:
    """Ids of the configurations the grid keeps (tunetable.grid.expand)."""
    return [config.id for config in expand(table, limits=DeviceLimits.from_params(params)).kept]


def shard_key(params: Mapping[str, Any], table: TableSpec, backend: str) -> str:
    """Content key of a table's shards for a concrete backend (cuda or replay); a budgeted search is part of it."""
    if backend not in ("cuda", "replay"):
        raise TuneTableError(f"shard_key needs a resolved backend, not '{backend}'")
    settings = settings_from_params(params=params).as_dict()
    search = search_key_part(table=table)
    if search is not None:
        settings["search"] = search
    recording_hash = nvcc = None
    if backend == "replay":
        # Replayed shards hold the recording's measurements: its device and nvcc, never this machine's,
        # so a fresh clone without nvcc (or with another one) gets the same key as the committed lock.
        recording = recording_path(table=table)
        provenance = recording_provenance(recording)
        device, nvcc = str(provenance.get("device")), recorded_nvcc(provenance)
        recording_hash = sha256_file(recording)[:16]
    else:
        device = device_name()
    return results_key(
        table=table.name,
        config_ids=grid_config_ids(params=params, table=table),
        bench_settings=settings,
        kernel_hash=kernel_source_hash(table.kernel),
        toolchain=toolchain_fingerprint(params=params, table=table, nvcc=nvcc),
        backend=backend,
        device=device,
        recording_hash=recording_hash,
    )
