"""``tunetable record``: export cuda-backend shards to data/recordings/NAME.parquet (+ NAME.json)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from tunetable.bench.record import (
    record_command,
    recording_frame,
    recording_provenance,
    shard_provenance,
    write_recording,
)
from tunetable.device_tables import split_device_table
from tunetable.measurement_plan import measured_git_revision


@click.command("record")
@click.option("--table", "table_name", required=True, help="The table the shards belong to.")
@click.option("--name", required=True, help="Recording name: data/recordings/NAME.parquet.")
@click.option("--out-dir", type=click.Path(path_type=Path), default=Path("data/recordings"), show_default=True)
@click.argument("shards", nargs=-1, required=True, type=click.Path(path_type=Path))
def command(table_name: str, name: str, out_dir: Path, shards: tuple[Path, ...]) -> None:
    """Write the rows of SHARDS (cuda backend only) and their provenance.

    A device table's shards (``--table gemm_mma.h100``) are recorded under the base table's name
    (``gemm_mma``), as every recording is: the device is in the recording's name and sidecar.
    """
    recorded_as = split_device_table(table_name)[0]
    frame = recording_frame(table=recorded_as, shard_paths=list(shards))
    provenance = recording_provenance(frame=frame, table=recorded_as,
                                      command=record_command(table=table_name, name=name, shards=list(shards)),
                                      git_rev=measured_git_revision(),
                                      settings=shard_provenance(list(shards), "settings"),
                                      bench_commands=shard_provenance(list(shards), "command"))
    parquet, sidecar = write_recording(frame=frame, provenance=provenance, out_dir=out_dir, name=name)
    Console(stderr=True).print(f"recorded {len(frame)} rows ({provenance['shapes']} shapes, {provenance['device']}, "
                               f"{provenance['date']}) -> {parquet} + {sidecar.name}")
