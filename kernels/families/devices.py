"""The devices tables are tuned for: how each is recognised, where its recordings live, which serves which.

Pure Python (no pycuda, no build module), so that the build (params.yaml ``devices:``, pipeline/params.py)
and the runtime (which identifies the GPU the operands live on) share ONE matching rule:

- ``gpu_info`` is the one reader of what the driver reports of a GPU (``GpuInfo``: name, SM count, memory,
  compute capability), for the runtime and the bench alike (handed pycuda's driver module: none imported here);
- ``recognise`` names the declared device whose ``match`` holds for what the driver reports (a name
  fragment, the SM count, a memory range in GiB), or None (``recognise_gpu``: for a ``GpuInfo``);
- ``recording_path`` is where a device's recording of a table lives (``data/recordings/<device>_<table>.parquet``,
  its sidecar beside it as ``.json``): derived, never written twice; ``coverage_recording_path`` is where its
  coverage recording lives (``<device>_coverage_<table>``: extra (N, K) pairs for the shape selector's fit only);
- ``serving_device`` is the fallback rule as data: a device with tables of its own serves itself; another
  serves the first recorded device its ``fallback`` list names, else the first recorded device of its
  architecture in declaration order; a GPU no declared device matches is served the recorded device of its
  architecture nearest what its driver reports (``nearest_device``: the SM count first, then the memory size),
  and a GPU of no declared architecture none (None).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GIB = 1 << 30
RECORDINGS_DIR = "data/recordings"
COVERAGE_SET = "coverage"     # the recorded set (data/coverage_shapes.csv) whose rows feed the selector's fit only


@dataclass(frozen=True)
class DeviceMatch:
    """What the driver must report for a GPU to be this device (None: not checked)."""

    name: str                              # a substring of the driver's device name
    sm_count: int | None = None
    min_memory_gib: float | None = None    # total memory at least this (GiB)
    max_memory_gib: float | None = None    # total memory below this (GiB)

    def holds(self, *, name: str, sm_count: int, memory_bytes: int) -> bool:
        """Whether a GPU reporting ``name``, ``sm_count`` SMs and ``memory_bytes`` of memory is this device."""
        gib = memory_bytes / GIB
        return (self.name in name
                and (self.sm_count is None or self.sm_count == sm_count)
                and (self.min_memory_gib is None or gib >= self.min_memory_gib)
                and (self.max_memory_gib is None or gib < self.max_memory_gib))


@dataclass(frozen=True)
class Ceilings:
    """A device's measured ceilings (benchmarks/device_ceilings.py): device-to-device copy, bytes read + written
    per second, in TB/s; cuBLAS's bf16 rate in TFLOP/s. The roofline floor of a GEMM on it divides by these."""

    copy_tb_s: float
    tflops: float


@dataclass(frozen=True)
class DeviceSpec:
    """One device params.yaml tunes for: its key (``h200``), architecture, how it is recognised, its fallbacks and
    its measured ceilings (None: the H200's, tunetable.kernels.perfmodel's reference)."""

    key: str
    arch: str                              # the compute capability the kernels need, e.g. sm_90a
    match: DeviceMatch
    fallback: tuple[str, ...] = field(default_factory=tuple)   # devices whose tables serve it, in order
    ceilings: Ceilings | None = None


@dataclass(frozen=True)
class GpuInfo:
    """What the driver reports of one GPU."""

    ordinal: int
    name: str
    sm_count: int
    memory_bytes: int
    compute_capability: tuple[int, int]

    def describe(self) -> str:
        """'cuda:1 (NVIDIA H100 80GB HBM3, 132 SMs, 79.6 GiB, sm_90)'."""
        major, minor = self.compute_capability
        return (f"cuda:{self.ordinal} ({self.name}, {self.sm_count} SMs, {self.memory_bytes / GIB:.1f} GiB, "
                f"sm_{major}{minor})")


def gpu_info(cuda: Any, ordinal: int) -> GpuInfo:
    """What the driver (``cuda``: pycuda.driver, initialised) reports of device ``ordinal``."""
    device = cuda.Device(ordinal)
    major, minor = device.compute_capability()
    return GpuInfo(ordinal=ordinal, name=str(device.name()),
                   sm_count=int(device.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)),
                   memory_bytes=int(device.total_memory()), compute_capability=(int(major), int(minor)))


def recording_path(*, device: str, table: str, root: str = RECORDINGS_DIR) -> str:
    """The recording the replay backend serves for ``table`` on ``device``: <root>/<device>_<table>.parquet."""
    return f"{root}/{device}_{table}.parquet"


def coverage_recording_path(*, device: str, table: str, root: str = RECORDINGS_DIR) -> str:
    """``device``'s coverage recording of ``table`` (scripts/device_record_h100.sh's set ``coverage``: the shapes
    of params.yaml ``selector.<s>.coverage``): <root>/<device>_coverage_<table>.parquet; the selector's fit only."""
    return recording_path(device=device, table=f"{COVERAGE_SET}_{table}", root=root)


def recognise(*, name: str, sm_count: int, memory_bytes: int, devices: Sequence[DeviceSpec]) -> str | None:
    """The key of the first declared device whose match holds for what the driver reports (None: unknown)."""
    for spec in devices:
        if spec.match.holds(name=name, sm_count=sm_count, memory_bytes=memory_bytes):
            return spec.key
    return None


def recognise_gpu(info: GpuInfo, *, devices: Sequence[DeviceSpec]) -> str | None:
    """The key of the declared device GPU ``info`` is (``recognise`` over what its driver reported), or None."""
    return recognise(name=info.name, sm_count=info.sm_count, memory_bytes=info.memory_bytes, devices=devices)


def device_of_name(*, name: str, devices: Sequence[DeviceSpec]) -> str | None:
    """The first declared device whose name fragment ``name`` holds (a recording's or manifest's ``device``,
    which records the driver's name only), or None."""
    return next((spec.key for spec in devices if spec.match.name in name), None)


def memory_octaves(match: DeviceMatch, *, memory_bytes: int) -> float:
    """How far ``memory_bytes`` lies outside ``match``'s memory range, in octaves (0 inside it or unbounded)."""
    gib = max(memory_bytes, 1) / GIB
    if match.min_memory_gib is not None and gib < match.min_memory_gib:
        return math.log2(match.min_memory_gib / gib)
    if match.max_memory_gib is not None and gib >= match.max_memory_gib:
        return math.log2(gib / match.max_memory_gib)
    return 0.0


def nearest_device(*, sm_count: int, memory_bytes: int, candidates: Sequence[DeviceSpec]) -> str | None:
    """The candidate nearest a GPU that none of them matches: the SM count first (waves and tiles per SM decide a
    table's choices), then the memory size (its generation and bandwidth); ties go to declaration order."""
    def distance(item: tuple[int, DeviceSpec]) -> tuple[int, float, int]:
        index, spec = item
        sms = 0 if spec.match.sm_count is None else abs(spec.match.sm_count - sm_count)
        return sms, memory_octaves(spec.match, memory_bytes=memory_bytes), index
    return min(enumerate(candidates), key=distance)[1].key if candidates else None


def serving_device(*, device: str | None, recorded: Sequence[str], devices: Sequence[DeviceSpec],
                   arch: str | None = None, sm_count: int | None = None,
                   memory_bytes: int | None = None) -> str | None:
    """The recorded device whose tables serve ``device`` (its own, its fallbacks, then its arch's).

    ``device`` None is an unrecognised GPU of architecture ``arch``: the recorded device of that architecture
    nearest its ``sm_count`` and ``memory_bytes`` serves it (``nearest_device``), the first one declared where
    they are not given. None when no recorded device of the same architecture exists.
    """
    by_key: Mapping[str, DeviceSpec] = {spec.key: spec for spec in devices}
    if device is not None and device in recorded:
        return device
    spec = by_key.get(device) if device is not None else None
    if spec is not None:
        for other in spec.fallback:
            if other in recorded:
                return other
        arch = spec.arch
    same_arch = [other for other in devices if other.key in recorded and other.arch == arch]
    if spec is None and sm_count is not None and memory_bytes is not None:
        return nearest_device(sm_count=sm_count, memory_bytes=memory_bytes, candidates=same_arch)
    return same_arch[0].key if same_arch else None


def device_specs_from_mapping(raw: Mapping[str, Mapping[str, object]]) -> tuple[DeviceSpec, ...]:
    """DeviceSpecs of a validated ``devices:`` mapping (params.yaml, or the generated tables), in order."""
    specs = []
    for key, item in raw.items():
        match = dict(item["match"])     # type: ignore[arg-type]
        ceilings = item.get("ceilings")
        specs.append(DeviceSpec(
            key=str(key), arch=str(item.get("arch", "sm_90a")),
            match=DeviceMatch(name=str(match["name"]), sm_count=match.get("sm_count"),   # type: ignore[arg-type]
                              min_memory_gib=match.get("min_memory_gib"),                 # type: ignore[arg-type]
                              max_memory_gib=match.get("max_memory_gib")),               # type: ignore[arg-type]
            fallback=tuple(str(other) for other in item.get("fallback", ())),            # type: ignore[union-attr]
            ceilings=None if ceilings is None else Ceilings(
                copy_tb_s=float(ceilings["copy_tb_s"]), tflops=float(ceilings["tflops"]))))  # type: ignore[index]
    return tuple(specs)
