"""The perf models' numpy twins (tunetable.perfmodel_grid, the selector build's) give the per-shape closures' times
bit for bit (kernels/perfmodel.py, the runtime's), on every configuration of every table's grid; and the build's
lattice scores are ``scores`` at each point."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from tunetable.grid import DeviceLimits, expand
from tunetable.kernels.families import FAMILIES
from tunetable.kernels.perfmodel import GemmTile, Resources, estimated_resources
from tunetable.kernels.runtime.selector_serve import LATTICE, model_parts
from tunetable.params import load_params, selector_spec, table_spec
from tunetable.perfmodel_grid import model_grid
from tunetable.selector_fit import load_table_measurements, probe_ms, ranges_of, selector_model

REPO = Path(__file__).resolve().parents[1]
PARAMS = load_params(REPO / "params.yaml")
# Ms from a decode row to past the largest anchor, odd and tile-straddling ones among them; N and K the lattice's and
# off-lattice ones (multiples of 8, as the families accept).
MS = (1, 3, 8, 17, 64, 100, 129, 250, 333, 1000, 2047, 4096, 8193, 30000)
NKS = (*LATTICE[::3], 8, 72, 200, 3584, 5120, 18944, 65536)


def resources_of(defines: dict[str, int]) -> list[Resources | None]:
    """None for a persistent family; for a tiled one the estimate and a register-bound, a smem-bound and an
    unlaunchable block (occupancy 1, few, 0)."""
    if "WARPS_M" not in defines:
        return [None]
    tile = GemmTile.from_defines(defines)
    estimate = estimated_resources(tile)
    return [estimate, Resources(registers=255, smem_bytes=estimate.smem_bytes, threads=tile.threads),
            Resources(registers=64, smem_bytes=200_000, threads=tile.threads),
            Resources(registers=64, smem_bytes=240_000, threads=tile.threads)]


@pytest.mark.parametrize("table", sorted(PARAMS["tables"]))
def test_every_grid_configuration_is_bit_equal_to_its_closure(table: str) -> None:
    spec = table_spec(PARAMS, table)
    kept = expand(spec, limits=DeviceLimits.from_params(PARAMS)).kept
    m, n, k = (np.array(axis, dtype=np.int64) for axis in zip(*itertools.product(MS, NKS, NKS)))
    checked = 0
    for config in kept:
        defines = config.defines()
        for resources in resources_of(defines):
            registers, smem = (0, 0) if resources is None else (resources.registers, resources.smem_bytes)
            grid = model_grid(family=spec.family, tunables=defines, registers=registers, smem_bytes=smem)
            base, _ = model_parts(family=spec.family, tunables=defines, registers=registers, smem_bytes=smem)
            if grid is None:
                assert defines.get("TAIL_SPLIT", 0) > 0, config.id   # only a tail split goes per shape
                continue
            expected = np.array([base(int(a), int(b), int(c)) for a, b, c in zip(m, n, k)])
            assert np.array_equal(grid(m, n, k), expected), f"{table} {config.id} {resources}"
            checked += 1
    assert checked >= len(kept) // 2   # most configurations have a twin (TAIL_SPLIT ones do not)
    assert FAMILIES[spec.family].perf_model in ("persistent", "tiled")


def test_the_builds_lattice_scores_are_scores_at_each_point() -> None:
    spec = selector_spec(PARAMS, "gemm_selector")
    model = selector_model(tables=[load_table_measurements(root=REPO, spec=table_spec(PARAMS, name))
                                   for name in spec.tables])
    start, end, lo, hi = ranges_of(model.anchors)[-1]   # open-ended: some tables measured neither end
    columns = list(range(0, len(model.configs), 3))
    terms = model.range_terms(columns=columns, lo=lo, hi=hi)
    ms = probe_ms(start=start, end=end)
    lattice = model.lattice_scores(ms=ms, lo=lo, hi=hi, columns=columns, terms=terms)
    assert lattice.shape == (len(ms), len(LATTICE), len(LATTICE), len(columns))
    for (i, m), (a, n), (b, k) in itertools.product(enumerate(ms), enumerate(LATTICE), enumerate(LATTICE)):
        expected = model.scores(m=m, n=n, k=k, lo=lo, hi=hi, columns=columns, terms=terms)
        assert np.array_equal(lattice[i, a, b], expected), (m, n, k)
    assert np.isfinite(lattice).any() and np.isinf(lattice).any()   # candidates and non-candidates both met
