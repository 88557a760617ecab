"""tunetable kernels: the kernel families, generated tuning tables and the runtime.

``gemm(a, b, out=None)`` computes C = a · bᵀ in bf16: the generated dispatch list
(kernels/tuning_configs.py) picks the kernel family for the shape (gemm_mma: mma.sync;
gemm_wgmma: TMA + wgmma), that family's table the configuration. ``gemm_with(tunables, a, b,
family=...)`` runs an explicit configuration; ``autotune`` tunes a function's configuration on
first call and caches the choice on disk. A shape no table holds runs the shape selector's choice
with an ``UntunedShapeWarning`` (``TUNETABLE_AUTOTUNE=1``: tuned on first call among the
selector's top candidates instead). Importing this package needs no GPU: pycuda is
imported on the first GEMM; the runtime itself is imported on first use of these names, so that
the build can import the families (``tunetable.kernels.families``) without it.
"""

import importlib

_RUNTIME_API = {
    "FallbackWarning": "tunetable.kernels.runtime.decide",
    "UntunedShapeWarning": "tunetable.kernels.runtime.decide",
    "NoGpuError": "tunetable.kernels.runtime.launch",
    "gemm": "tunetable.kernels.runtime.launch",
    "gemm_with": "tunetable.kernels.runtime.launch",
    "GraphCaptureError": "tunetable.kernels.runtime.launch",
    "DeviceTableWarning": "tunetable.kernels.runtime.devices",
    "UnsupportedDeviceError": "tunetable.kernels.runtime.devices",
    "record_shapes": "tunetable.kernels.runtime.record",
    "stop_recording": "tunetable.kernels.runtime.record",
    "autotune": "tunetable.kernels.autotune",
}
__all__ = sorted(_RUNTIME_API)


def __getattr__(name: str):
    """The runtime API (``gemm``, ``gemm_with``, ``autotune``, ...), imported on first use."""
    module = _RUNTIME_API.get(name)
    if module is None:
        raise AttributeError(f"module 'tunetable.kernels' has no attribute {name!r}")

    return getattr(importlib.import_module(module), name)
