"""tunetable.compile with the real nvcc: cubins, real ptxas output, build failures, cache, pool, command."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest
import yaml

from tunetable.compile import compile_configs, parse_ptxas
from tunetable.kernels.jit import CompileResult, compile_config, lookup
from tunetable.config import KernelConfig
from tunetable.grid import load_table_grid

pytestmark = pytest.mark.nvcc

FIXTURE_KERNELS = Path(__file__).parent / "fixtures" / "kernels"
FLAGS = ("-O3", "-std=c++17")
ELF_MAGIC = b"\x7fELF"


@pytest.fixture
def kernel_dir(tmp_path: Path) -> Path:
    """A private copy of the test kernel and its header (tests edit them)."""
    target = tmp_path / "kernels"
    shutil.copytree(FIXTURE_KERNELS, target)
    return target


def compile_tiny(kernel_dir: Path, cache: Path, **defines: int) -> CompileResult:
    """Compile the test kernel with ``defines`` into ``cache``."""
    return compile_config(
        kernel_path=kernel_dir / "tiny_tile.cu", defines=defines, flags=FLAGS, arch="sm_90a", cache_dir=cache
    )


def test_compiles_a_cubin_and_reads_real_ptxas_resources(kernel_dir: Path, tmp_path: Path) -> None:
    result = compile_tiny(kernel_dir, tmp_path / "cache", BLOCK=128, ITEMS=4)
    assert result.status == "ok" and not result.cached and result.error is None
    assert Path(result.cubin).read_bytes()[:4] == ELF_MAGIC
    functions = parse_ptxas(result.ptxas_log)
    assert set(functions) == {"tiny_tile"}
    tiny = functions["tiny_tile"]
    # __shared__ float tile[BLOCK * ITEMS] = 128 * 4 * 4 bytes; one __syncthreads barrier.
    assert tiny.smem_bytes == 2048 and tiny.barriers == 1 and tiny.entry
    assert 0 < tiny.registers <= 255 and tiny.spill_stores == 0
    assert result.compile_s > 0


def test_build_failure_is_a_record_with_nvccs_message(kernel_dir: Path, tmp_path: Path) -> None:
    result = compile_tiny(kernel_dir, tmp_path / "cache", BLOCK=100, ITEMS=4)
    assert result.status == "build" and result.cubin is None
    assert "static assertion failed" in result.error and "BLOCK must be a multiple of 32" in result.error
    assert len(result.error.splitlines()) <= 8
    # A real compile error is deterministic for its key: served from the cache next time.
    again = compile_tiny(kernel_dir, tmp_path / "cache", BLOCK=100, ITEMS=4)
    assert again.cached and again.status == "build" and again.error == result.error


def test_warm_cache_hits_and_a_header_edit_misses(kernel_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cold = compile_tiny(kernel_dir, cache, BLOCK=64, ITEMS=2)
    warm = compile_tiny(kernel_dir, cache, BLOCK=64, ITEMS=2)
    assert warm.cached and warm.key == cold.key and warm.ptxas_log == cold.ptxas_log
    assert warm.compile_s == cold.compile_s  # the original compile time, not the lookup time
    header = kernel_dir / "tiny_tile.cuh"
    header.write_text(header.read_text().replace("2.0f", "3.0f"))
    edited = compile_tiny(kernel_dir, cache, BLOCK=64, ITEMS=2)
    assert not edited.cached and edited.key != cold.key and edited.status == "ok"
    assert lookup(cache_dir=cache, key=cold.key) is not None  # the old entry is untouched


def _compile_uncached(kernel: str, cache: str) -> str:
    """Worker for the race test: always runs nvcc, writes the same entry."""
    result = compile_config(
        kernel_path=kernel, defines={"BLOCK": 96, "ITEMS": 3}, flags=FLAGS, arch="sm_90a", cache_dir=cache,
        use_cache=False
    )
    return result.key


def test_two_processes_compiling_the_same_config_leave_one_whole_entry(kernel_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with ProcessPoolExecutor(max_workers=2, mp_context=get_context("forkserver")) as pool:
        keys = list(pool.map(_compile_uncached, [str(kernel_dir / "tiny_tile.cu")] * 2, [str(cache)] * 2))
    assert keys[0] == keys[1]
    hit = lookup(cache_dir=cache, key=keys[0])
    assert hit is not None and hit.status == "ok"
    assert Path(hit.cubin).read_bytes()[:4] == ELF_MAGIC
    # no temp files left
    assert sorted(path.name for path in cache.iterdir()) == [f"{keys[0]}.cubin", f"{keys[0]}.json"]


def test_pool_compiles_misses_and_answers_hits_from_the_cache(kernel_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    configs = [KernelConfig(family="tiny", params=(("BLOCK", block), ("ITEMS", 2))) for block in (32, 64, 100)]
    seen: list[tuple[str, str, bool]] = []
    kwargs = dict(kernel_path=kernel_dir / "tiny_tile.cu", flags=FLAGS, arch="sm_90a", cache_dir=cache, workers=2)
    results = compile_configs(configs, on_result=lambda c, r: seen.append((c.id, r.status, r.cached)), **kwargs)
    assert {config.id: results[config.id].status for config in configs} == {
        configs[0].id: "ok", configs[1].id: "ok", configs[2].id: "build",
    }
    assert sorted(seen) == sorted((config.id, results[config.id].status, False) for config in configs)
    warm = compile_configs(configs, **kwargs)
    assert all(result.cached for result in warm.values())
    assert {cid: r.key for cid, r in warm.items()} == {cid: r.key for cid, r in results.items()}


def test_real_gemm_kernel_compiles_with_its_resources(repo_root: Path, tmp_path: Path) -> None:
    kernel = repo_root / "kernels" / "families" / "gemm_mma" / "gemm_mma.cu"
    if not kernel.is_file():
        pytest.skip("kernels/families/gemm_mma/gemm_mma.cu is not written yet")
    grid = load_table_grid(params_path=repo_root / "params.yaml", table="gemm_mma")
    # The smallest tile of the default grid: the fastest tensor-core compile.
    config = min(grid.result.kept, key=lambda c: (c.as_dict()["BLOCK_M"] * c.as_dict()["BLOCK_N"], c.id))
    result = compile_config(
        kernel_path=kernel, defines=config.defines(), flags=("-O3", "-std=c++17"), arch="sm_90a", cache_dir=tmp_path
    )
    assert result.status == "ok", result.error
    functions = parse_ptxas(result.ptxas_log)
    # One kernel: split-K reduces inside gemm_mma, there is no gemm_mma_splitk_reduce any more.
    assert {name for name, function in functions.items() if function.entry} == {"gemm_mma"}
    assert "gemm_mma_splitk_reduce" not in functions
    assert 0 < functions["gemm_mma"].registers <= 255


def test_compile_command_writes_the_report(kernel_dir: Path, tmp_path: Path) -> None:
    params = {
        "tables": {
            "tiny": {
                "family": "tiny",
                "kernel": "kernels/tiny_tile.cu",
                "dtype": "bf16",
                "shapes": {"NK": [[64, 64]], "M": [1]},
                "grid": {"groups": [{"BLOCK": [64, 100, 256], "ITEMS": [8]}], "derived": {"THREADS": "BLOCK"}},
                "codegen": {"manifest": "m.yaml", "snippet": "s", "target": "t.py", "begin_marker": "B",
                            "end_marker": "E", "source_label": "l"},
            }
        },
        "compile": {"nvcc_flags": list(FLAGS), "cache_dir": ".cache/cubins",
                    "limits": {"max_shared_bytes_per_block": 4096}},
        "bench": {},
        "select": {},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    command = [sys.executable, "-m", "tunetable", "compile", "--table", "tiny", "--workers", "2"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    report_path = tmp_path / "results" / "compile" / "tiny.json"
    report = json.loads(report_path.read_text())
    assert report["table"] == "tiny" and report["arch"] == "sm_90a" and report["nvcc"].startswith("Build cuda")
    by_block = {record["label"]: record for record in report["records"]}
    assert [record["status"] for record in report["records"]] == ["ok", "build", "pruned"]
    assert by_block["BLOCK=64/ITEMS=8"]["smem_bytes"] == 64 * 8 * 4
    assert (tmp_path / by_block["BLOCK=64/ITEMS=8"]["cubin"]).read_bytes()[:4] == ELF_MAGIC
    assert "BLOCK must be a multiple of 32" in by_block["BLOCK=100/ITEMS=8"]["error"]
    assert by_block["BLOCK=256/ITEMS=8"]["reason"] == "8192 B shared memory > 4096 B per block"
    # A warm rerun gives a byte-identical report.
    first = report_path.read_bytes()
    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert again.returncode == 0, again.stderr
    assert report_path.read_bytes() == first
