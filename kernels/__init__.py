"""tunetable kernels: CUDA C templates, snippets, generated tuning tables and runtime dispatch.

``gemm(a, b, out=None)`` computes C = a · bᵀ in bf16: the generated dispatch list
(kernels/tuning_configs.py) picks the kernel family for the shape (gemm_mma: mma.sync;
gemm_wgmma: TMA + wgmma), that family's table the configuration. ``gemm_with(tunables, a, b,
family=...)`` runs an explicit configuration; ``autotune`` tunes a function's configuration on
first call and caches the choice on disk. Importing this package needs no GPU: pycuda is
imported on the first GEMM.
"""

from tunetable.kernels.autotune import autotune
from tunetable.kernels.dispatch import FallbackWarning, NoGpuError, gemm, gemm_with

__all__ = ["FallbackWarning", "NoGpuError", "autotune", "gemm", "gemm_with"]
