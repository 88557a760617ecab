"""The GPUs this process may use, found without creating a CUDA context (no pycuda), and which declared device
the first one is (``recognised_device``: pycuda's cuInit, lazily, on the GPU host only)."""

from __future__ import annotations

import ctypes
import glob
import os
from pathlib import Path

from tunetable.kernels.families.devices import GpuInfo, gpu_info, recognise_gpu


def _libcuda_loadable() -> bool:
    """True when the CUDA driver library (libcuda) loads."""
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


def visible_gpu_ids() -> list[str]:
    """GPU ids this process may use (CUDA_VISIBLE_DEVICES, else /dev/nvidiaN), no CUDA context made."""
    nodes = sorted(glob.glob("/dev/nvidia[0-9]*"), key=lambda p: int(p.removeprefix("/dev/nvidia")))
    if not nodes or not _libcuda_loadable():
        return []
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [item.strip() for item in env.split(",") if item.strip() and item.strip() != "-1"]
    return [node.removeprefix("/dev/nvidia") for node in nodes]


def gpu_visible() -> bool:
    """True when a CUDA device node exists and libcuda loads (no context is created)."""
    return bool(visible_gpu_ids())


def device_name() -> str:
    """Name of the first visible GPU (NVML, else /proc/driver/nvidia), or 'none'."""
    if not gpu_visible():
        return "none"
    try:
        import pynvml  # lazy and optional (the cuda extra): the device's name where NVML exists
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
            return name.decode() if isinstance(name, bytes) else str(name)
        except pynvml.NVMLError:
            pass
    for info in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
        for line in Path(info).read_text().splitlines():
            if line.startswith("Model:"):
                return line.split(":", 1)[1].strip()
    return "cuda-unknown"


def gpu_report(ordinal: int = 0) -> GpuInfo:
    """What the driver reports of GPU ``ordinal`` (pycuda; no context), read as the runtime reads it."""
    import pycuda.driver as cuda  # lazy: the GPU host's dependency, never a CPU machine's

    cuda.init()
    return gpu_info(cuda, ordinal)


def recognised_device(params: dict, ordinal: int = 0) -> str | None:
    """The declared device (params.yaml ``devices:``) GPU ``ordinal`` is, or None (kernels/families/devices.py)."""
    from tunetable.params import device_specs  # lazy: the bench's leaf modules stay import-light

    return recognise_gpu(gpu_report(ordinal), devices=device_specs(params))
