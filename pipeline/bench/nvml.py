"""SM clock and power through NVML (nvidia-ml-py); readings are None where NVML is absent."""

from __future__ import annotations

import os
from typing import Any


class NvmlSampler:
    """Reads the SM clock (MHz) and board power (W) of one GPU, found by its PCI bus id."""

    def __init__(self, *, pci_bus_id: str | None):
        self.handle: Any = None
        self.driver: str | None = None
        try:
            import pynvml  # lazy and optional (the cuda extra): clock and power are logged where NVML exists
        except ImportError:
            return
        self.nvml = pynvml
        try:
            pynvml.nvmlInit()
            self.driver = _text(pynvml.nvmlSystemGetDriverVersion())
            self.handle = self._find(pci_bus_id)
        except pynvml.NVMLError:
            self.handle = None

    def _find(self, pci_bus_id: str | None) -> Any:
        """The NVML handle of the GPU at ``pci_bus_id``, else of the first CUDA_VISIBLE_DEVICES entry."""
        nvml = self.nvml
        if pci_bus_id:
            for candidate in (pci_bus_id, "0000" + pci_bus_id):
                try:
                    return nvml.nvmlDeviceGetHandleByPciBusId(candidate)
                except nvml.NVMLError:
                    continue
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        return nvml.nvmlDeviceGetHandleByIndex(int(visible) if visible.isdigit() else 0)

    def read(self) -> dict[str, float | None]:
        """{'sm_clock_mhz', 'power_w'} now (None when unavailable)."""
        if self.handle is None:
            return {"sm_clock_mhz": None, "power_w": None}
        nvml = self.nvml
        try:
            clock = float(nvml.nvmlDeviceGetClockInfo(self.handle, nvml.NVML_CLOCK_SM))
            power = nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0
        except nvml.NVMLError:
            return {"sm_clock_mhz": None, "power_w": None}
        return {"sm_clock_mhz": clock, "power_w": float(power)}


def _text(value: Any) -> str:
    """``value`` as text (bytes decoded)."""
    return value.decode() if isinstance(value, bytes) else str(value)
