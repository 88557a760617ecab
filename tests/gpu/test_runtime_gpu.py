"""tunetable.kernels.gemm and @autotune on a real GPU (H200, `pytest -m gpu`).

Correct results (relative error against a float32 torch reference of the same bf16 inputs) for
every shape of the default table shape set and for a second set the table does not hold (odd M,
non-square N and K), with torch, CuPy and pycuda inputs; the clear errors of bad inputs; and an
autotuned GEMM that restores its output between trials.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
pytest.importorskip("pycuda")

import tunetable.kernels  # noqa: E402
from tunetable.kernels.autotune import autotune, close_to  # noqa: E402
from tunetable.kernels.families import FAMILIES  # noqa: E402
from tunetable.kernels.runtime.decide import FallbackWarning  # noqa: E402
from tunetable.kernels.runtime.launch import runtime  # noqa: E402
from tunetable.yamlio import load_yaml_file  # noqa: E402

DEFAULT_TUNABLES = dataclasses.asdict(FAMILIES["gemm_mma"].default_tunables)
SKINNY_TUNABLES = dataclasses.asdict(FAMILIES["gemm_mma"].skinny_tunables)

REPO = Path(__file__).resolve().parents[2]
REL_TOL = 1e-2  # bf16 output, fp32 accumulation


def default_shapes() -> list[tuple[int, int, int]]:
    """params.yaml tables.gemm_mma.shapes: every (N, K) pair crossed with every M."""
    shapes = load_yaml_file(REPO / "params.yaml")["tables"]["gemm_mma"]["shapes"]
    return [(m, n, k) for n, k in shapes["NK"] for m in shapes["M"]]


# Not in the default set: odd M, non-square N and K, small matrices, N and K not tile multiples.
OTHER_SHAPES = [
    (1, 11008, 4096), (7, 4096, 11008), (77, 2048, 5120), (333, 5120, 2048),
    (1000, 11008, 4096), (77, 4096, 4096), (333, 14336, 4096), (7, 8192, 8192),
    (1, 136, 200), (333, 264, 328), (7, 8, 8), (4095, 1032, 776),
]


def rel_err(c: "torch.Tensor", a: "torch.Tensor", b: "torch.Tensor") -> float:
    """||C - A·Bᵀ|| / ||A·Bᵀ|| with the reference in float32 from the same bf16 inputs."""
    ref = a.float() @ b.float().T
    return float((c.float() - ref).norm() / ref.norm())


def operands(m: int, n: int, k: int, seed: int = 0) -> tuple["torch.Tensor", "torch.Tensor"]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn((m, k), generator=gen, device="cuda", dtype=torch.float32).to(torch.bfloat16)
    b = torch.randn((n, k), generator=gen, device="cuda", dtype=torch.float32).to(torch.bfloat16)
    return a, b


def check_shape(m: int, n: int, k: int) -> None:
    a, b = operands(m, n, k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        c = tunetable.kernels.gemm(a, b)
    torch.cuda.synchronize()
    assert c.shape == (m, n) and c.dtype == torch.bfloat16
    assert torch.isfinite(c.float()).all()
    assert rel_err(c, a, b) < REL_TOL


@pytest.mark.parametrize("shape", default_shapes(), ids=lambda s: "M{}_N{}_K{}".format(*s))
def test_default_shape_set(shape: tuple[int, int, int]) -> None:
    check_shape(*shape)


@pytest.mark.parametrize("shape", OTHER_SHAPES, ids=lambda s: "M{}_N{}_K{}".format(*s))
def test_shapes_outside_the_table(shape: tuple[int, int, int]) -> None:
    check_shape(*shape)


def test_out_argument_is_written_and_returned() -> None:
    a, b = operands(77, 4096, 4096)
    out = torch.full((77, 4096), float("nan"), device="cuda", dtype=torch.bfloat16)
    result = tunetable.kernels.gemm(a, b, out=out)
    torch.cuda.synchronize()
    assert result is out
    assert rel_err(out, a, b) < REL_TOL


def test_explicit_configurations_agree() -> None:
    a, b = operands(333, 4096, 4096)
    for tunables in (DEFAULT_TUNABLES, SKINNY_TUNABLES):
        c = tunetable.kernels.gemm_with(tunables, a, b)
        torch.cuda.synchronize()
        assert rel_err(c, a, b) < REL_TOL


def test_cupy_inputs() -> None:
    cupy = pytest.importorskip("cupy")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a, b = operands(77, 6144, 4096)
    try:
        a_cp = cupy.asarray(a.float()).astype(ml_dtypes.bfloat16)
        b_cp = cupy.asarray(b.float()).astype(ml_dtypes.bfloat16)
    except (TypeError, ValueError, NotImplementedError) as exc:
        pytest.skip(f"this CuPy has no bfloat16 arrays: {exc}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        c_cp = tunetable.kernels.gemm(a_cp, b_cp)
    assert type(c_cp).__module__.startswith("cupy")
    cupy.cuda.Device().synchronize()
    c = torch.as_tensor(cupy.asnumpy(c_cp.astype(cupy.float32)), device="cuda")
    assert rel_err(c, a, b) < REL_TOL


def test_pycuda_inputs() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import numpy as np
    from pycuda import gpuarray

    runtime()  # pushes the primary context that pycuda's allocations below need
    a, b = operands(7, 4096, 4096)
    a_host = a.float().cpu().numpy().astype(ml_dtypes.bfloat16)
    b_host = b.float().cpu().numpy().astype(ml_dtypes.bfloat16)
    c_gpu = tunetable.kernels.gemm(gpuarray.to_gpu(a_host), gpuarray.to_gpu(b_host))
    c = torch.as_tensor(c_gpu.get().astype(np.float32), device="cuda")
    assert rel_err(c, a, b) < REL_TOL


def test_clear_errors_on_the_gpu() -> None:
    a, b = operands(64, 4096, 4096)
    with pytest.raises(TypeError, match="a: expected dtype bfloat16, got torch.float16"):
        tunetable.kernels.gemm(a.half(), b)
    with pytest.raises(TypeError, match="b: torch tensor is on cpu"):
        tunetable.kernels.gemm(a, b.cpu())
    with pytest.raises(ValueError, match="b: must be C-contiguous row-major"):
        tunetable.kernels.gemm(a, b.T.contiguous().T)
    shifted = torch.empty(64 * 4096 + 1, device="cuda", dtype=torch.bfloat16)[1:].view(64, 4096)
    with pytest.raises(ValueError, match="a: data pointer .* is not 16-byte aligned"):
        tunetable.kernels.gemm(shifted, b)
    with pytest.raises(ValueError, match="mismatched K"):
        tunetable.kernels.gemm(a, b[:, :1024].contiguous())
    with pytest.raises(ValueError, match=r"out: expected shape \(64, 4096\)"):
        tunetable.kernels.gemm(a, b, out=torch.empty((4096, 64), device="cuda", dtype=torch.bfloat16))


def test_uncovered_shape_warns_once() -> None:
    a, b = operands(77, 2056, 1032)
    with pytest.warns(FallbackWarning, match="M=77, N=2056, K=1032"):
        tunetable.kernels.gemm(a, b)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        c = tunetable.kernels.gemm(a, b)
    torch.cuda.synchronize()
    assert rel_err(c, a, b) < REL_TOL


def test_autotuned_gemm_restores_its_output_and_caches(tmp_path: Path) -> None:
    medium = {**DEFAULT_TUNABLES, "block_m": 64, "block_n": 128, "block_k": 64, "warps_m": 2, "warps_n": 4, "stages": 4}
    configs = [DEFAULT_TUNABLES, SKINNY_TUNABLES, medium, {**SKINNY_TUNABLES, "split_k": 4}]
    a, b = operands(333, 4096, 4096)
    correct = close_to(lambda args: {"out": args["a"].float() @ args["b"].float().T}, rtol=REL_TOL)

    @autotune(configs=configs, key=["m", "n", "k"], restore_value=["out"], verify=correct,
              cache_dir=tmp_path, rounds=10, warmup_ms=5.0)
    def matmul(a, b, out, m, n, k, *, config):
        return tunetable.kernels.gemm_with(config, a, b, out=out)

    out = torch.full((333, 4096), 7.0, device="cuda", dtype=torch.bfloat16)
    matmul(a, b, out, 333, 4096, 4096)
    torch.cuda.synchronize()
    assert rel_err(out, a, b) < REL_TOL
    trials = next(iter(matmul.trials.values()))
    assert [t.status for t in trials] == ["ok"] * len(configs)
    assert all(t.median_ms > 0 for t in trials)
    assert len(list(tmp_path.glob("*.json"))) == 1
