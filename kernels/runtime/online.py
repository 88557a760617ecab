"""Online tuning of shapes no table holds: gemm()'s first call measures the selector's top candidates.

Opt-in (``TUNETABLE_AUTOTUNE=1``): on the first gemm() of a shape that no tuning table holds, the
shape selector's ``k`` best predicted configurations (``TUNETABLE_AUTOTUNE_TOP_K``, default and
at most 8, any family; ``ranking``: from the shortlists of M's range and of its two neighbours,
since leaving each recorded M out in turn the best of 8 is then 1.56 % behind the best instead of
3.11 %, benchmarks/unseen_shapes.py) run on the caller's inputs, each checked against a float32 reference when
the inputs are torch tensors and timed with a cold L2 (``tunetable.kernels.autotune``); the
fastest is kept in memory and in a JSON file under the autotune cache folder
(``TUNETABLE_CACHE_DIR``, default ``$XDG_CACHE_HOME/tunetable/autotune``), keyed by the device,
the kernels' sources, the shape and the candidate list. A later process reads the file and tunes
nothing; ``TUNETABLE_FORCE_RETUNE=1`` tunes again. Shapes a table holds are never re-tuned here.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tunetable.kernels.autotune import Autotuner, default_device
from tunetable.kernels.families import FAMILIES

AUTOTUNE_ENV = "TUNETABLE_AUTOTUNE"
TOP_K_ENV = "TUNETABLE_AUTOTUNE_TOP_K"
MAX_TOP_K = 8
VERIFY_RTOL = 0.02   # ||C - C_ref|| / ||C_ref|| for bf16 outputs, the bench's verify_rtol


class OnlineTuningWarning(UserWarning):
    """A shape no table holds was tuned now on the GPU among the selector's top candidates."""


def enabled() -> bool:
    """Whether gemm() tunes shapes no table holds (``TUNETABLE_AUTOTUNE`` set to 1, true or yes)."""
    return os.environ.get(AUTOTUNE_ENV, "").strip().lower() in ("1", "true", "yes")


def top_k() -> int:
    """How many of the selector's candidates to measure (``TUNETABLE_AUTOTUNE_TOP_K``, 1..8, default 8)."""
    text = os.environ.get(TOP_K_ENV, "").strip()
    if not text:
        return MAX_TOP_K
    if not text.isdigit() or not 1 <= int(text) <= MAX_TOP_K:
        raise ValueError(f"{TOP_K_ENV} must be an integer from 1 to {MAX_TOP_K}, got {text!r}")
    return int(text)


def ranking(selector: Any, *, m: int, n: int, k: int) -> Sequence[Any]:
    """The predictions online tuning takes its candidates from (module docstring), best first."""
    return selector.rank(m=m, n=n, k=k, neighbours=True)


def candidate_configs(ranking: Sequence[Any], *, count: int) -> list[dict[str, Any]]:
    """The first ``count`` predictions as autotune configurations: family, config id and lower-case tunables."""
    return [{"family": p.candidate.kernel, "table": p.candidate.table, "config_id": p.candidate.config_id,
             "tunables": dict(p.candidate.tunables)} for p in ranking[:count]]


GemmWith = Callable[..., Any]   # launch.gemm_with(tunables, a, b, out, family=): handed in, so no import circle


def runner(gemm_with: GemmWith) -> Callable[..., Any]:
    """The function the autotuner times: one candidate's GEMM into ``out`` through ``gemm_with``."""

    def _run(a: Any, b: Any, out: Any, m: int, n: int, k: int, *, config: Mapping[str, Any]) -> Any:
        return gemm_with(config["tunables"], a, b, out, family=config["family"])

    return _run


def _verifier() -> Any:
    """A verify(named_args) that compares ``out`` with a float32 reference for torch inputs (else accepts)."""
    references: dict[int, Any] = {}

    def verify(named: Mapping[str, Any]) -> bool:
        a, b, out = named["a"], named["b"], named["out"]
        if type(a).__module__.partition(".")[0] != "torch":
            return True   # no reference library at hand: the configurations were verified when recorded
        reference = references.get(id(a))
        if reference is None:
            reference = a.float() @ b.float().t()
            references.clear()
            references[id(a)] = reference
        return float((out.float() - reference).norm() / reference.norm()) <= VERIFY_RTOL

    return verify


class OnlineTuner:
    """Per shape, an autotuner over the selector's top candidates (built on the shape's first call).

    ``gemm_with`` runs one candidate (the launch step's, handed in by its caller: this module never
    imports the launch step, which imports it).
    """

    def __init__(self, *, gemm_with: GemmWith) -> None:
        self.run = runner(gemm_with)
        self.tuners: dict[tuple[str, int, int, int], Any] = {}

    def choose(self, *, m: int, n: int, k: int, a: Any, b: Any, out: Any, ranking: Sequence[Any],
               device: str | None = None) -> dict[str, Any]:
        """The fastest of the ``top_k()`` best predicted candidates on these inputs (tuned now, or from the cache).

        Keyed by device as well as shape (``device``: the GPU the operands live on, by default the current
        CUDA device's name and compute capability): an H100 and an H200 in one process each tune their own,
        among their own selector's candidates, in memory and in the cache file alike.
        """

        gpu = device or default_device()
        tuner = self.tuners.get((gpu, m, n, k))
        if tuner is None:
            configs = candidate_configs(ranking, count=top_k())
            if not configs:
                raise ValueError(f"no selector candidate for M={m}, N={n}, K={k}")
            tuner = Autotuner(self.run, configs=configs, key=["m", "n", "k"], restore_value=["out"],
                              verify=_verifier(), sources=[family.source for family in FAMILIES.values()], device=gpu)
            self.tuners[(gpu, m, n, k)] = tuner
        if out is None:
            out = a.new_empty((m, n)) if hasattr(a, "new_empty") else None
        if out is None:
            raise ValueError("online tuning needs `out` for non-torch inputs (it restores it between trials)")
        before = tuner.cache_hits
        key = tuner.key_of((a, b, out, m, n, k), {})
        chosen = tuner.best.get(key)
        if chosen is None:
            tuner(a, b, out, m, n, k)
            chosen = tuner.best[key]
            if tuner.cache_hits == before:
                trials = tuner.trials.get(key, [])
                warnings.warn(f"gemm: tuned M={m}, N={n}, K={k} now among the shape selector's top {len(trials)} "
                              f"candidates ({AUTOTUNE_ENV}=1): {chosen['table']} {chosen['config_id']}; cached in "
                              f"{tuner.cache_path(key).parent}", OnlineTuningWarning, stacklevel=4)
        return chosen
