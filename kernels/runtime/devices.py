"""Which recorded device a GPU is, and which device's tables serve it (pure Python, no GPU call).

The tables were measured on particular GPUs (``RECORDED_DEVICES``: today the H200 alone). At run
time each GPU the operands live on is identified from what the driver reports (name, SM count,
memory size) against ``KNOWN_DEVICES``:

- a GPU of another architecture than the kernels' (sm_90) is refused with one error naming the GPU
  and what is supported;
- a recorded device is served its own tables;
- any other Hopper GPU (an H100, an unknown sm_90 part) is served the nearest recorded device's
  tables (same SM count first, then the closest memory size), with ONE ``DeviceTableWarning`` per
  GPU naming both and how to record tables for it.

The per-device tables (issue 49) plug in by generating ``RECORDED_DEVICES`` next to the tables and
keying the dispatcher on ``TableDevice.device``; the identification stays here.
"""

from __future__ import annotations

from dataclasses import dataclass

SUPPORTED_ARCH = (9, 0)             # sm_90a kernels: wgmma, TMA (compute capability 9.0)
GIB = 1 << 30


class UnsupportedDeviceError(RuntimeError):
    """The operands live on a GPU the kernels cannot run on (not compute capability 9.0)."""


class DeviceTableWarning(UserWarning):
    """A GPU with no tables of its own runs another recorded device's tables."""


@dataclass(frozen=True)
class DeviceProfile:
    """How one device is recognised from what the driver reports: name fragment, SM count, memory range."""

    key: str                        # the tables' device name (data/recordings/<key>_<table>.parquet)
    label: str                      # how people call it
    name_fragment: str              # a substring of the driver's device name
    sm_count: int
    memory_gib: tuple[float, float]  # [low, high) of the total memory the driver reports


KNOWN_DEVICES: tuple[DeviceProfile, ...] = (
    DeviceProfile(key="h200", label="NVIDIA H200", name_fragment="H200", sm_count=132, memory_gib=(130.0, 150.0)),
    DeviceProfile(key="h100", label="NVIDIA H100 SXM", name_fragment="H100", sm_count=132, memory_gib=(75.0, 100.0)),
)
RECORDED_DEVICES: tuple[str, ...] = ("h200",)   # the devices the generated tables were measured on


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


@dataclass(frozen=True)
class TableDevice:
    """The recorded device whose tables serve one GPU; ``warning`` is set when it is not the GPU itself."""

    device: str
    identified: str | None          # the GPU's own profile key, None when unknown
    warning: str | None = None


def identify(info: GpuInfo, *, known: tuple[DeviceProfile, ...] = KNOWN_DEVICES) -> DeviceProfile | None:
    """The profile whose name fragment, SM count and memory range all match ``info`` (None: unknown)."""
    gib = info.memory_bytes / GIB
    for profile in known:
        low, high = profile.memory_gib
        if profile.name_fragment in info.name and profile.sm_count == info.sm_count and low <= gib < high:
            return profile
    return None


def nearest_recorded(info: GpuInfo, *, recorded: tuple[str, ...],
                     known: tuple[DeviceProfile, ...] = KNOWN_DEVICES) -> DeviceProfile:
    """The recorded device closest to ``info``: equal SM count first, then the nearest memory size, then order."""
    profiles = [profile for key in recorded for profile in known if profile.key == key]
    if not profiles:
        raise ValueError(f"no profile in KNOWN_DEVICES for the recorded devices {', '.join(recorded) or '(none)'}")
    gib = info.memory_bytes / GIB

    def distance(item: tuple[int, DeviceProfile]) -> tuple[int, float, int]:
        index, profile = item
        return (abs(profile.sm_count - info.sm_count), abs(sum(profile.memory_gib) / 2 - gib), index)

    return min(enumerate(profiles), key=distance)[1]


def table_device(info: GpuInfo, *, recorded: tuple[str, ...] = RECORDED_DEVICES,
                 known: tuple[DeviceProfile, ...] = KNOWN_DEVICES) -> TableDevice:
    """The recorded device whose tables serve ``info``; UnsupportedDeviceError for a GPU of another arch."""
    if tuple(info.compute_capability) != SUPPORTED_ARCH:
        major, minor = info.compute_capability
        supported = ", ".join(profile.label for profile in known)
        raise UnsupportedDeviceError(
            f"tunetable.gemm: {info.describe()} has compute capability {major}.{minor}; the kernels need "
            f"sm_90a (compute capability {SUPPORTED_ARCH[0]}.{SUPPORTED_ARCH[1]}: Hopper, e.g. {supported})")
    found = identify(info, known=known)
    if found is not None and found.key in recorded:
        return TableDevice(device=found.key, identified=found.key)
    nearest = nearest_recorded(info, recorded=recorded, known=known)
    what = found.label if found is not None else "a Hopper GPU with no device profile"
    warning = (f"tunetable.gemm: {info.describe()} is {what} with no tables of its own; running the "
               f"{nearest.label}'s tables (recorded: {', '.join(recorded)}), tuned for another GPU. To record "
               f"tables for it, run the pipeline on this GPU (`snakemake --cores all` on a host with it; "
               f"docs/pytorch.md, 'Your model's shapes')")
    return TableDevice(device=nearest.key, identified=found.key if found is not None else None, warning=warning)
