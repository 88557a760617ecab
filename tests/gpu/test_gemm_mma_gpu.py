"""Correctness of every default-grid gemm_mma configuration on odd shapes (H200, `pytest -m gpu`)."""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tunetable.config import KernelConfig
from tunetable.grid import expand
from tunetable.kernels.families import FAMILIES
from tunetable.kernels.jit import include_flags
from tunetable.params import table_spec
from tunetable.yamlio import load_yaml_file

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
FAMILY = FAMILIES["gemm_mma"]
REL_TOL = 1e-2  # bf16 operands, fp32 accumulation
BF16_NAN = 0xFFFF
F32_NAN = 0xFFFFFFFF

# M in {1, 7, 77, 333, 4096}; non-square LLM projections; N, K not multiples of any tile.
SHAPES = [
    (1, 4096, 4096),
    (7, 6144, 4096),
    (77, 4096, 14336),
    (333, 6144, 4096),
    (333, 14336, 4096),
    (4096, 4096, 4096),
    (4096, 6144, 4096),
    (77, 136, 200),
    (333, 264, 328),
    (7, 8, 8),
]


def default_configs() -> list[KernelConfig]:
    """The kept configurations of the default gemm_mma grid in params.yaml."""
    # The YAML loader without the schema check: the GPU image has no jsonschema, and CI validates params.yaml.
    spec = table_spec(load_yaml_file(REPO / "params.yaml"), "gemm_mma")
    return list(expand(spec).kept)


CONFIGS = default_configs()


def to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round float32 to bf16 (nearest even) and return the raw uint16 bits."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def bf16_bits_to_f64(bits: np.ndarray) -> np.ndarray:
    """Widen raw bf16 bits to float64."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


def compile_cubin(config: KernelConfig, out_dir: Path) -> Path:
    """Compile one configuration to an sm_90a cubin with the GPU machine's nvcc."""
    cubin = out_dir / f"{config.id}.cubin"
    defines = [f"-D{name}={value}" for name, value in config.defines().items()]
    cmd = [
        "nvcc", "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17",
        *include_flags(), *defines, "-o", str(cubin), str(REPO / FAMILY.source),
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return cubin


@pytest.fixture(scope="module")
def cuda():
    """pycuda driver with the device's primary context pushed for the module."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found on PATH")
    driver = pytest.importorskip("pycuda.driver")
    driver.init()
    context = driver.Device(0).retain_primary_context()
    context.push()
    yield driver
    context.pop()


@pytest.fixture(scope="module")
def kernels(cuda, tmp_path_factory):
    """config id -> (config, module, kernel function), every default config compiled (one kernel each)."""
    out_dir = tmp_path_factory.mktemp("cubins")
    with ThreadPoolExecutor(max_workers=16) as pool:
        cubins = list(pool.map(lambda c: compile_cubin(c, out_dir), CONFIGS))
    loaded = {}
    for config, cubin in zip(CONFIGS, cubins):
        module = cuda.module_from_file(str(cubin))
        main = module.get_function(FAMILY.entry)
        smem = FAMILY.smem_bytes(config.defines())
        main.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
        loaded[config.id] = (config, module, main)
    return loaded


def new_workspace(cuda, nbytes: int):
    """A workspace zeroed once after allocation, as the runtime does: tile counters start at 0 (None for 0 bytes)."""
    if not nbytes:
        return None
    workspace = cuda.mem_alloc(nbytes)
    cuda.memset_d8(workspace, 0, nbytes)
    return workspace


def launch_once(cuda, main, geometry, buffers, workspace, partials: int, M: int, N: int, K: int) -> np.ndarray:
    """Poison C and the fp32 partials (never the tile counters after them), launch the kernel alone, return C's bits."""
    a_dev, b_dev, c_dev = buffers
    cuda.memset_d16(c_dev, BF16_NAN, M * N)
    if partials:
        cuda.memset_d32(workspace, F32_NAN, partials)
    main(a_dev, b_dev, c_dev, workspace if workspace is not None else np.intp(0), np.int32(M), np.int32(N),
         np.int32(K), block=geometry.block, grid=geometry.grid, shared=geometry.smem_bytes)
    cuda.Context.synchronize()
    out = np.empty((M, N), dtype=np.uint16)
    cuda.memcpy_dtoh(out, c_dev)
    return out


def run_config(cuda, kernel, buffers, M: int, N: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """C's bf16 bits after each of two launches on one new workspace (the second finds the counters the first reset)."""
    config, _module, main = kernel
    defines = config.defines()
    geometry = FAMILY.launch(defines, M, N, K)
    split = defines["SPLIT_K"]
    partials = split * M * N if split > 1 else 0  # fp32 [SPLIT_K, M, N]; the tile counters follow
    workspace = new_workspace(cuda, geometry.workspace_bytes)
    try:
        first = launch_once(cuda, main, geometry, buffers, workspace, partials, M, N, K)
        second = launch_once(cuda, main, geometry, buffers, workspace, partials, M, N, K)
    finally:
        if workspace is not None:
            workspace.free()
    return first, second


@pytest.mark.parametrize("M,N,K", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_every_default_config_matches_float64(cuda, kernels, M, N, K):
    """Relative error vs float64 <= 1e-2, no unwritten (NaN) element, and a repeat launch gives the same bits."""
    assert len(kernels) == len(CONFIGS) > 0
    assert FAMILY.zeroed_workspace  # what new_workspace does for every configuration, as the runtime does
    rng = np.random.default_rng([M, N, K])
    a_bits = to_bf16_bits(rng.standard_normal((M, K), dtype=np.float32))
    b_bits = to_bf16_bits(rng.standard_normal((N, K), dtype=np.float32))
    reference = bf16_bits_to_f64(a_bits) @ bf16_bits_to_f64(b_bits).T
    ref_norm = np.linalg.norm(reference)
    buffers = (cuda.to_device(a_bits), cuda.to_device(b_bits), cuda.mem_alloc(M * N * 2))
    failures = []
    for config_id, kernel in kernels.items():
        first, second = run_config(cuda, kernel, buffers, M, N, K)
        result = bf16_bits_to_f64(first)
        unwritten = int(np.isnan(result).sum())
        rel = float(np.linalg.norm(result - reference) / ref_norm) if not unwritten else float("nan")
        repeat = np.array_equal(first, second)  # counters reset by the kernel; split-K sums in split order
        if unwritten or not rel <= REL_TOL or not repeat:
            failures.append(f"{config_id} {kernel[0].label()}: rel={rel:.3g} nan={unwritten} same_on_repeat={repeat}")
    assert not failures, f"{len(failures)}/{len(kernels)} configs wrong at {M}x{N}x{K}:\n" + "\n".join(failures)
