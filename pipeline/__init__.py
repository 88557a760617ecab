"""tunetable: GPU-kernel tuning as a reproducible, versioned build.

Stages (each a pure core plus a thin CLI shell in ``pipeline.commands``):
grid -> compile -> bench -> rank/profile -> select -> codegen, tied together by Snakemake
(``Snakefile``, ``pipeline/rules``) and versioned by DVC (``dvc.yaml``).
"""

__version__ = "0.1.0"
