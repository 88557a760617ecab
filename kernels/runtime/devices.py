"""Which recorded device a GPU is, and which device's tables serve it (pure Python, no GPU call).

The tables were measured on particular GPUs (``RECORDED_DEVICES`` of the generated file: the primary
device and every other device with all of its tables, docs/devices.md; a device with some tables only is
not among them, and its fallback serves it whole). At run time each GPU the operands live on is
recognised from what the driver reports (name, SM count, memory size) by params.yaml's ``devices:``
(generated into ``DEVICES``; the one rule is
``tunetable.kernels.families.devices``):

- a GPU of another architecture than the kernels' (sm_90) is refused with one error naming the GPU
  and what is supported;
- a recorded device is served its own tables;
- any other Hopper GPU (an H100 before its tables are recorded, an unknown sm_90 part) is served the
  tables its declared ``fallback`` names, else (a declared device) the first recorded device of its
  architecture or (an unknown part) the recorded device nearest it by SM count, then memory, with ONE
  ``DeviceTableWarning`` per GPU naming both and how to record tables for it (docs/devices.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tunetable.kernels.families.devices import Ceilings, DeviceSpec, GpuInfo, recognise_gpu, serving_device
from tunetable.kernels.tuning_configs import DEVICE_TABLES, DEVICES, RECORDED_DEVICES

SUPPORTED_ARCH = (9, 0)             # sm_90a kernels: wgmma, TMA (compute capability 9.0)
ARCH = "sm_90a"                     # the declared devices' architecture the kernels are built for


def measured_on(device: str) -> str:
    """The GPU a recorded device's tables were measured on ('NVIDIA H200', generated from its manifests'
    provenance), else the name fragment its declaration matches ('an H200')."""
    tables = DEVICE_TABLES.get(device)
    if tables is not None and tables.measured_on:
        return tables.measured_on
    spec = DEVICES.get(device)
    return f"an {spec.match.name}" if spec is not None else device


class UnsupportedDeviceError(RuntimeError):
    """The operands live on a GPU the kernels cannot run on (not compute capability 9.0)."""


class DeviceTableWarning(UserWarning):
    """A GPU with no tables of its own runs another recorded device's tables."""


@dataclass(frozen=True)
class TableDevice:
    """The recorded device whose tables serve one GPU; ``warning`` is set when it is not the GPU itself."""

    device: str
    identified: str | None          # the GPU's own profile key, None when unknown
    warning: str | None = None


def gpu_ceilings(table: TableDevice, *, devices: Sequence[DeviceSpec] = tuple(DEVICES.values())) -> Ceilings | None:
    """The measured ceilings of the GPU ``table`` was made for: its own declared device's, else the serving
    device's (an unrecognised GPU: the nearest recorded device's); None: the H200's (perfmodel's reference)."""
    by_key = {spec.key: spec for spec in devices}
    for key in (table.identified, table.device):
        spec = by_key.get(key) if key is not None else None
        if spec is not None and spec.ceilings is not None:
            return spec.ceilings
    return None


def table_device(info: GpuInfo, *, recorded: Sequence[str] = RECORDED_DEVICES,
                 devices: Sequence[DeviceSpec] = tuple(DEVICES.values())) -> TableDevice:
    """The recorded device whose tables serve ``info``; UnsupportedDeviceError for a GPU of another arch."""
    if tuple(info.compute_capability) != SUPPORTED_ARCH:
        major, minor = info.compute_capability
        supported = ", ".join(f"{spec.key} ({spec.match.name})" for spec in devices if spec.arch == ARCH)
        raise UnsupportedDeviceError(
            f"tunetable.gemm: {info.describe()} has compute capability {major}.{minor}; the kernels need "
            f"{ARCH} (compute capability {SUPPORTED_ARCH[0]}.{SUPPORTED_ARCH[1]}: Hopper; declared devices: "
            f"{supported})")
    found = recognise_gpu(info, devices=devices)
    serving = serving_device(device=found, recorded=recorded, devices=devices, arch=ARCH, sm_count=info.sm_count,
                             memory_bytes=info.memory_bytes)
    if serving is None:
        raise UnsupportedDeviceError(f"tunetable.gemm: {info.describe()}: no recorded device of {ARCH} "
                                     f"(recorded: {', '.join(recorded) or 'none'}): record tables first")
    if serving == found:
        return TableDevice(device=serving, identified=found)
    what = f"device {found}" if found is not None else "a Hopper GPU that no declared device matches"
    nearest = "" if found is not None else ", the nearest by SM count, then memory"
    warning = (f"tunetable.gemm: {info.describe()} is {what} with no tables of its own; running device "
               f"{serving}'s tables{nearest}, measured on {measured_on(serving)} (recorded: {', '.join(recorded)}), "
               f"tuned for another GPU. To record tables for it, declare it in params.yaml's devices: and record on it "
               f"(docs/devices.md: scripts/device_record_h100.sh, or `tunetable tune-device`)")
    return TableDevice(device=serving, identified=found, warning=warning)
