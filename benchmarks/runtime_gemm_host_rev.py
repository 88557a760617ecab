"""The host path before and after issue 50's cut, on a machine without a GPU: git 26848d9's runtime against this tree's.

Both run in their own interpreter with the same stubs (runtime_gemm_host.py --stub's, as far as each revision's
internals allow): CPU tensors dressed as CUDA tensors of device 0, a hand-made gemm_mma plan of 8 x 4096 x 4096,
libcuda's launch replaced by libc's ffs through ctypes with the launch's argument conversion (26848d9: its typed
call; now: the untyped prepared call), torch's raw stream answered by Python; 26848d9's current-context query
(a ctypes call there) is answered by Python too, so its figures are if anything low. Each child: the fastest
of 9 rounds of 1000 calls (timeit's rule: other processes on the machine's shared cores only ever add time) of
tunetable.gemm(out=), gemm() and the operator under inference_mode, no_grad and grad mode; the two trees'
children alternate 5 times and each figure is the median of its 5.

    python benchmarks/runtime_gemm_host_rev.py [--rev 26848d9] [--out benchmarks/results]

Writes runtime_gemm_host_rev.json / .md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.atomic import atomic_write_text  # noqa: E402

CALLS = 1000
ROUNDS = 9
ALTERNATIONS = 5   # before, after, before, ...: the machine's load drifts (shared cores), so the trees alternate
# Run in a child interpreter: argv[1] is the tree to import tunetable from ("" for the installed one).
CHILD = r'''
import ctypes, ctypes.util, json, statistics, sys, threading, time
if sys.argv[1]:
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
    sys.path.insert(0, sys.argv[1])
import torch
import tunetable
import tunetable.torch as tt
from tunetable.kernels import driver
from tunetable.kernels.families import FAMILIES
from tunetable.kernels.runtime import launch
from tunetable.kernels.runtime.plan import LaunchPlan

class Dressed(torch.Tensor):
    __module__ = "torch.dressed"   # the runtime picks its reader by the type's module
    __torch_function__ = torch._C._disabled_torch_function_impl
    @property
    def is_cuda(self): return True
    def get_device(self): return 0

libc = ctypes.CDLL(ctypes.util.find_library("c"))
typed = ctypes.CDLL(ctypes.util.find_library("c")).ffs
typed.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                                            ctypes.POINTER(ctypes.c_void_p)]
typed_lib = type("Typed", (), {"cuLaunchKernel": typed})()   # made once: driver._cuda() is called per launch
driver._cuda = lambda: typed_lib
driver.current_context = lambda: None
torch._C._cuda_getCurrentRawStream = lambda device: 0
m, n, k = 8, 4096, 4096
kernel = object.__new__(driver.DriverKernel)
kernel.function = ctypes.c_void_p(0)
plan = launch.ShapePlan(plan=LaunchPlan(family=FAMILIES["gemm_mma"], defines={}, m=m, n=n, k=k, grid=(132, 1, 1),
                                        block=(128, 1, 1), smem_bytes=0, workspace_ptr=0, kernel=kernel))
runtime = object.__new__(launch.DeviceRuntime)
runtime.ordinal, runtime.handle, runtime.shape_plans = 0, None, {(m, n, k): plan}
launch._runtimes[0] = runtime
if hasattr(launch, "_prepared"):   # this tree: the Library op, the prepared launch, the route
    from tunetable.kernels.runtime import prepared, torch_ops
    bare_lib = type("Bare", (), {"cuLaunchKernel": libc.ffs, "cuCtxGetCurrent": libc.ffs})()
    prepared.bare_libcuda = lambda: bare_lib
    launch._torch.update(types=frozenset({Dressed}), bf16=torch.bfloat16, stream=lambda device: 0)
    launch._prepared[(m, n, k, 0, 0, threading.get_ident())] = prepared.PreparedLaunch(plan, stream=0, context=None)
    torch_ops._routes[(m, n, k, 0)] = torch_ops.Route(m=m, n=n, k=k, device=0, why_torch=None, source="stub")
    torch_ops._PLAIN = frozenset({Dressed})
    fragment = torch.library.Library("tunetable", "IMPL")
    fragment.impl("gemm", torch_ops._gemm_cuda, "CPU")
else:                              # 26848d9: the custom_op, its kernel registered for the dressed CPU tensors
    tt.gemm.register_kernel("cpu", lambda a, b: launch.gemm(a, b))
a = torch.randn(m, k, dtype=torch.bfloat16).as_subclass(Dressed)
b = torch.randn(n, k, dtype=torch.bfloat16).as_subclass(Dressed)
c = torch.empty(m, n, dtype=torch.bfloat16).as_subclass(Dressed)
gemm = launch.gemm

def per_call_us(call, context):
    with context():
        for _ in range(300):
            call()
        rounds = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            for _ in range(CALLS):
                call()
            rounds.append((time.perf_counter() - started) / CALLS * 1e6)
    return min(rounds)   # timeit's rule: other processes on the shared cores only ever add time

ROUNDS, CALLS = int(sys.argv[2]), int(sys.argv[3])
print(json.dumps({"gemm_out_us": per_call_us(lambda: gemm(a, b, out=c), torch.inference_mode),
                  "gemm_alloc_us": per_call_us(lambda: gemm(a, b), torch.inference_mode),
                  "torch_op_us": per_call_us(lambda: tt.gemm(a, b), torch.inference_mode),
                  "torch_op_no_grad_us": per_call_us(lambda: tt.gemm(a, b), torch.no_grad),
                  "torch_op_grad_mode_us": per_call_us(lambda: tt.gemm(a, b), torch.enable_grad)}))
'''
LABELS = {"gemm_out_us": "gemm(out=)", "gemm_alloc_us": "gemm()", "torch_op_us": "tunetable::gemm (inference_mode)",
          "torch_op_no_grad_us": "tunetable::gemm (no_grad)", "torch_op_grad_mode_us": "tunetable::gemm (grad mode)"}


def measure(tree: str) -> dict[str, float]:
    """The child's figures, importing tunetable from ``tree`` ("" for this tree's install)."""
    done = subprocess.run([sys.executable, "-c", CHILD, tree, str(ROUNDS), str(CALLS)], capture_output=True,
                          text=True, check=False, cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise SystemExit(f"runtime_gemm_host_rev: the child for {tree or 'this tree'} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def old_tree(rev: str, into: Path) -> Path:
    """``rev``'s pipeline/ and kernels/ laid out as the installed package (tunetable/, tunetable/kernels/)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "pipeline", "kernels"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "pipeline").rename(into / "tunetable")
    (into / "kernels").rename(into / "tunetable" / "kernels")
    return into


def main() -> None:
    """Measure both trees, print and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="26848d9")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    from tunetable.keys import git_revision

    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="runtime_gemm_host_rev.") as tmp:
        tree = str(old_tree(args.rev, Path(tmp)))
        for _ in range(ALTERNATIONS):
            runs["before"].append(measure(tree))
            runs["after"].append(measure(""))
    before, after = ({key: statistics.median(run[key] for run in runs[side]) for key in LABELS}
                     for side in ("before", "after"))
    results = {"rev_before": args.rev, "rev_after": git_revision(REPO), "before": before, "after": after,
               "runs": runs, "method": __doc__.split("\n\n")[1].replace("\n", " ")}
    lines = [f"# Host path per call on the CPU machine (stubs, no driver): git {args.rev} against "
             f"{results['rev_after']}", "", results["method"], "",
             "| call | before µs | after µs | after / before | before, each run | after, each run |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {label} | {before[key]:.2f} | {after[key]:.2f} | {after[key] / before[key]:.2f} | "
              f"{' '.join(f'{run[key]:.1f}' for run in runs['before'])} | "
              f"{' '.join(f'{run[key]:.1f}' for run in runs['after'])} |" for key, label in LABELS.items()]
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "runtime_gemm_host_rev.json", json.dumps(results, indent=1, sort_keys=True) + "\n")
    atomic_write_text(args.out / "runtime_gemm_host_rev.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
