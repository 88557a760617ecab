"""The runtime a user imports: ``tunetable.gemm`` and friends, standing alone.

Three steps, each a module that imports only the families (tunetable.kernels.families), the
generated tables (tunetable.kernels.tuning_configs) and the leaves (tunetable.kernels.jit, driver,
tma): never the build, never params.yaml, never nvcc at decision time.

- ``decide``: which family and configuration run a shape (the dispatch list, then the table;
  untuned shapes: the ``untuned`` seam, then the fallback);
- ``operands``: the checks of torch / CuPy / pycuda / CUDA-array-interface inputs;
- ``launch``: cubins (compiled on first use through the JIT leaf with the generated ``BUILDS``),
  the one launch-plan builder the bench shares, and ``gemm`` / ``gemm_with``: per device (primary
  context, plans, workspaces), on the caller's stream, capturable in CUDA graphs.

Beside them: ``devices`` (which recorded device's tables serve a GPU), ``record`` (the shapes gemm()
serves, for ``tunetable shapes import``), ``layers`` and ``torch_ops`` (the ``tunetable::gemm`` torch
operator, ``Linear`` and ``patch``; ``tunetable.torch`` re-exports them; only ``torch_ops`` imports torch).

docs/architecture.md draws the layers.
"""
