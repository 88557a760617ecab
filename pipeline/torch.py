"""``tunetable.torch``: tunetable's tuned GEMMs in a PyTorch model (docs/pytorch.md).

    import tunetable.torch
    report = tunetable.torch.patch(model)      # nn.Linear layers the kernels serve -> tunetable.torch.Linear
    y = torch.ops.tunetable.gemm(a, b)         # the operator itself: a · bᵀ, bf16, CUDA
    tunetable.torch.decisions()                # per shape served: tunetable's kernel or torch's matmul, and why

Importing this module imports torch; ``import tunetable`` never does. It belongs to the runtime layer
(docs/architecture.md): it re-exports the runtime's torch front end and imports nothing of the build.
"""

from tunetable.kernels.runtime.layers import PatchReport
from tunetable.kernels.runtime.record import record_shapes, stop_recording
from tunetable.kernels.runtime.torch_ops import Linear, Route, decisions, gemm, patch, route

__all__ = ["Linear", "PatchReport", "Route", "decisions", "gemm", "patch", "record_shapes", "route",
           "stop_recording"]
