"""tunetable: GPU-kernel tuning as a reproducible, versioned build.

Stages (each a pure core plus a thin CLI shell in ``tunetable.commands``):
grid -> compile -> bench -> rank/profile -> select -> codegen, tied together by Snakemake
(``Snakefile``, ``pipeline/rules``) and versioned by DVC (``dvc.yaml``).
"""

__version__ = "0.1.0"


# The runtime API (``from tunetable import gemm, gemm_with, autotune``), imported on first use so
# that ``import tunetable`` (the CLI, the build) loads nothing of the runtime it does not need.
_RUNTIME_API = ("gemm", "gemm_with", "autotune", "FallbackWarning", "UntunedShapeWarning", "NoGpuError",
                "GraphCaptureError", "DeviceTableWarning", "UnsupportedDeviceError", "record_shapes", "stop_recording")


def __getattr__(name: str):
    """``tunetable.gemm`` and the rest of the runtime API, from ``tunetable.kernels``."""
    if name in _RUNTIME_API:
        from tunetable import kernels  # lazy: `import tunetable` (the CLI, the build) loads no runtime

        return getattr(kernels, name)
    raise AttributeError(f"module 'tunetable' has no attribute {name!r}")
