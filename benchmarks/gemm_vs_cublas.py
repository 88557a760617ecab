"""A kernel family against cuBLAS on the H200, both timed by the bench harness itself.

The same worker process and method as `tunetable bench` (pipeline/bench/cuda_backend.py): random
bf16 inputs rotated over > 3x L2 (cold L2), every configuration verified against cuBLAS with a
poisoned output before it is timed, a time-based warm-up, a spin kernel holding the stream while
each timed batch is queued, CUDA events around the batch; cuBLAS (cublasGemmEx, the harness's
baseline) is one more candidate, interleaved round by round with the configurations, so clock
drift under the 700 W cap hits all alike. Median and IQR of the rounds, SM clock and power
logged per sample. A hang or fault is isolated in the worker and reported, not fatal.

Run on the GPU machine (pycuda, nvcc; cuobjdump for SASS evidence):
    python benchmarks/gemm_vs_cublas.py --family gemm_wgmma [--table gemm_wgmma | --config K=V,...]
        [--shapes 4096x4096x4096 8192x8192x8192] [--verify-shapes 7x4096x4096 ...] [--rounds 15]
Writes benchmarks/results/gemm_vs_cublas_<family>.json and .md (or under --out).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.kernels.families import FAMILIES  # noqa: E402
from tunetable.atomic import atomic_write_text  # noqa: E402
from tunetable.bench.failures import WorkerFailure  # noqa: E402
from tunetable.bench.tasks import ConfigTask, launch_payload  # noqa: E402
from tunetable.bench.worker import WorkerProcess  # noqa: E402
from tunetable.compile import compile_configs, main_function, parse_ptxas  # noqa: E402
from tunetable.config import KernelConfig  # noqa: E402
from tunetable.grid import compile_rules, expand, first_failed_rule  # noqa: E402
from tunetable.params import table_spec  # noqa: E402
from tunetable.yamlio import load_yaml_file  # noqa: E402

NVCC_FLAGS = ["-O3", "-std=c++17", "-lineinfo"]
SETTINGS = {"l2_factor": 3, "warmup_ms": 25, "min_batch_ms": 0.5, "verify_rtol": 0.02, "seed": 0}
REQUEST_TIMEOUT_S = 30.0
MAX_HANGS = 2  # a kernel that deadlocks tends to do so everywhere: stop burning device time
# R2UR: a value moved from vector to uniform registers (wgmma descriptors built in vector registers need one each).
SASS_OPS = ("HGMMA", "HMMA", "UTMALDG", "LDGSTS", "LDSM", "LDL", "STL", "R2UR")


def parse_shape(text: str) -> tuple[int, int, int]:
    """'MxNxK' -> (M, N, K)."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"shape must be MxNxK, got {text!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


def explicit_config(*, family: str, text: str, check_rules: bool = True) -> KernelConfig:
    """'BLOCK_M=128,BLOCK_N=256,...' -> a configuration with the family's derived THREADS and SMEM_BYTES.

    With ``check_rules`` the family's validity rules (the grid's) must hold; a probe of a patched kernel
    (``--source``) may lift one of the bounds they state, so it passes False.
    """
    params: dict[str, int] = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        if not name or not value.strip().lstrip("-").isdigit():
            raise SystemExit(f"--config: '{item}' is not NAME=INTEGER")
        params[name.strip()] = int(value)
    spec = FAMILIES[family]
    derived = {"THREADS": spec.threads(params), "SMEM_BYTES": spec.smem_bytes(params)}
    if check_rules:
        rules = compile_rules({}, names=[*params, *derived], path=spec.folder / "family.py", table=family,
                              family=spec)
        failed = first_failed_rule({**params, **derived}, rules)
        if failed is not None:
            raise SystemExit(f"--config {text}: {family}.{failed.reason()} "
                             f"({spec.rules[failed.index].why}); a patched --source may lift it")
    return KernelConfig.from_dict(family, params, derived)


def table_configs(*, table: str, filters: list[str]) -> list[KernelConfig]:
    """Kept configurations of a params.yaml table, narrowed by NAME=VALUE filters."""
    # The YAML loader without the schema check: the GPU image has no jsonschema (CI validates params.yaml).
    kept = expand(table_spec(load_yaml_file(REPO / "params.yaml"), table)).kept
    wanted = [f.split("=", 1) for f in filters]
    return [c for c in kept if all(str(c.as_dict().get(name)) == value for name, value in wanted)]


def sass_counts(*, cubin: str, entry: str) -> dict[str, int] | None:
    """Instruction counts in the entry's SASS, or None without cuobjdump."""
    if shutil.which("cuobjdump") is None:
        return None
    sass = subprocess.run(["cuobjdump", "--dump-sass", "--function", entry, cubin],
                          check=True, capture_output=True, text=True).stdout
    return {op: len(re.findall(rf"\b{op}\b", sass)) for op in SASS_OPS}


def payload_for(*, config: KernelConfig, cubin: str, shape: tuple[int, int, int],
                grid_cap: int | None = None, grid_multiple: int | None = None) -> dict[str, Any]:
    """The worker's launch payload (the bench's ``launch_payload``); ``grid_cap`` cuts a persistent grid,
    ``grid_multiple`` rounds it up (a probe variant launching clusters its family does not declare)."""
    task = ConfigTask(config_id=config.id, family=config.family, params=config.params,
                      defines=tuple(config.defines().items()), cubin=cubin)
    payload = launch_payload(task=task, m=shape[0], n=shape[1], k=shape[2], families=FAMILIES)
    if grid_cap and config.family == "gemm_wgmma":
        defines = payload["defines"]
        cluster = int(defines["CLUSTER_M"]) * int(defines["CLUSTER_N"])
        payload["grid"][0] = min(payload["grid"][0], max(cluster, grid_cap // cluster * cluster))
    if grid_multiple:
        payload["grid"][0] = -(-payload["grid"][0] // grid_multiple) * grid_multiple
    return payload


class Harness:
    """The bench's worker process, restarted after a fault or hang."""

    def __init__(self, *, grid_cap: int | None = None, grid_multiple: int | None = None) -> None:
        self.grid_cap = grid_cap  # --grid-cap: persistent-grid experiments
        self.grid_multiple = grid_multiple  # --grid-multiple: probe variants' clusters
        self.worker = WorkerProcess(backend="cuda")
        self.info = self.worker.start()
        self.hangs = 0

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """One request; a fault or hang restarts the worker and answers a failure record."""
        try:
            return self.worker.request(message, timeout=REQUEST_TIMEOUT_S)
        except WorkerFailure as exc:
            self.hangs += exc.status == "timeout"
            if self.hangs >= MAX_HANGS:
                raise SystemExit(f"{self.hangs} hangs (last: {message.get('config_id')}): giving up") from None
            self.worker.kill()
            self.worker = WorkerProcess(backend="cuda")
            self.worker.start()
            return {"status": exc.status, "error": str(exc)}


def use_shape(harness: Harness, *, shape: tuple[int, int, int]) -> None:
    """Make ``shape`` the worker's current one (input sets, reference); exits with its error when that fails."""
    reply = harness.request({"op": "shape", "M": shape[0], "N": shape[1], "K": shape[2], "settings": SETTINGS})
    if not reply.get("ok"):
        raise SystemExit(f"preparing shape {shape} failed: {reply.get('error') or reply}")


def verify_shape(harness: Harness, *, shape: tuple[int, int, int], configs: list[KernelConfig],
                 cubins: dict[str, str]) -> dict[str, Any]:
    """Verify every configuration on one shape; returns id -> status / rel_err."""
    use_shape(harness, shape=shape)
    out = {}
    for config in configs:
        reply = harness.request({"op": "prepare", "config_id": config.id,
                                 "payload": payload_for(config=config, cubin=cubins[config.id], shape=shape,
                                                      grid_cap=harness.grid_cap, grid_multiple=harness.grid_multiple)})
        out[config.id] = {"status": reply.get("status"), "rel_err": reply.get("rel_err"), "error": reply.get("error")}
        if reply.get("status") in ("launch", "timeout"):  # the worker was restarted: the shape is gone
            use_shape(harness, shape=shape)
    return out


def time_shape(harness: Harness, *, shape: tuple[int, int, int], configs: list[KernelConfig], cubins: dict[str, str],
               rounds: int, warmup_s: float) -> dict[str, Any]:
    """Verify, warm up and time every configuration and cuBLAS, interleaved round by round."""
    m, n, k = shape
    use_shape(harness, shape=shape)
    candidates, failures, launched = ["cublas"], {}, {}
    reply = harness.request({"op": "prepare", "config_id": "cublas", "payload": {"kind": "baseline"}})
    if reply.get("status") != "ok":
        raise SystemExit(f"cuBLAS baseline failed on {shape}: {reply}")
    for config in configs:
        reply = harness.request({"op": "prepare", "config_id": config.id,
                                 "payload": payload_for(config=config, cubin=cubins[config.id], shape=shape,
                                                      grid_cap=harness.grid_cap, grid_multiple=harness.grid_multiple)})
        if reply.get("status") == "ok":
            candidates.append(config.id)
            launched[config.id] = reply.get("launch_grid")
            if reply.get("max_active_clusters") is not None:
                print(f"  {config.id}: at most {reply['max_active_clusters']} clusters resident", flush=True)
        else:
            failures[config.id] = reply
            if reply.get("status") in ("launch", "timeout"):
                return time_shape(harness, shape=shape, configs=[c for c in configs if c.id not in failures],
                                  cubins=cubins, rounds=rounds, warmup_s=warmup_s) | {"failures": failures}
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in candidates}
    deadline = time.perf_counter() + warmup_s
    while time.perf_counter() < deadline:  # the card starts cool and fast: settle it at its power cap
        for name in candidates:
            harness.request({"op": "sample", "config_id": name})
    for _ in range(rounds):
        for name in candidates:
            samples[name].append(harness.request({"op": "sample", "config_id": name}))
    rows = []
    for name, values in samples.items():
        ms = [v["sample_ms"] for v in values]
        q1, med, q3 = np.percentile(ms, [25, 50, 75])
        rows.append({"name": name, "median_ms": float(med), "iqr_ms": float(q3 - q1),
                     "tflops": 2.0 * m * n * k / (med * 1e-3) / 1e12, "samples_ms": ms,
                     "sm_clock_mhz": [v.get("sm_clock_mhz") for v in values],
                     "power_w": [v.get("power_w") for v in values]})
    rows.sort(key=lambda r: (r["median_ms"], r["name"]))
    return {"M": m, "N": n, "K": k, "rows": rows, "failures": failures, "launch_grid": launched}


def summarise(*, shape: dict[str, Any], by_id: dict[str, KernelConfig], resources: dict[str, dict[str, Any]],
              cubins: dict[str, str]) -> dict[str, Any]:
    """Best configuration against cuBLAS on one timed shape."""
    rows = shape["rows"]
    cublas = next(r for r in rows if r["name"] == "cublas")
    ours = [r for r in rows if r["name"] != "cublas"]
    if not ours:
        return {"best": None}
    best = ours[0]
    config = by_id[best["name"]]
    return {"best": best["name"], "best_label": config.label(), "best_ms": best["median_ms"],
            "best_tflops": best["tflops"], "cublas_ms": cublas["median_ms"], "cublas_tflops": cublas["tflops"],
            "ratio_to_cublas": cublas["median_ms"] / best["median_ms"], "resources": resources.get(best["name"]),
            "sass": sass_counts(cubin=cubins[best["name"]], entry=FAMILIES[config.family].entry)}


def render_markdown(*, results: dict[str, Any], by_id: dict[str, KernelConfig]) -> str:
    """The human-readable report."""
    family = results["family"]
    lines = [f"# {family} vs cuBLAS (bf16, C = A·Bᵀ), timed by the bench harness", "",
             f"Device: {results['device']['device']}, driver {results['device']['driver']}, "
             f"cuBLAS {results['device'].get('cublas_version')}. {results['method']}", "",
             "| shape | cuBLAS ms | cuBLAS TFLOP/s | best config | ms | TFLOP/s | x cuBLAS | SM MHz | W (max) | SASS |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for shape in results["timed"]:
        summary = shape["summary"]
        if summary.get("best") is None:
            lines.append(f"| {shape['M']}x{shape['N']}x{shape['K']} | no configuration passed |")
            continue
        best_row = shape["rows"][[r["name"] for r in shape["rows"]].index(summary["best"])]
        clocks = [c for c in best_row["sm_clock_mhz"] if c]
        power = [p for p in best_row["power_w"] if p]
        sass = ", ".join(f"{k} {v}" for k, v in (summary.get("sass") or {}).items() if v) or "n/a"
        lines.append(f"| {shape['M']}x{shape['N']}x{shape['K']} | {summary['cublas_ms']:.4f} | "
                     f"{summary['cublas_tflops']:.1f} | {summary['best']} ({summary['best_label']}) | "
                     f"{summary['best_ms']:.4f} | {summary['best_tflops']:.1f} | {summary['ratio_to_cublas']:.3f} | "
                     f"{min(clocks) if clocks else 'n/a'}-{max(clocks) if clocks else 'n/a'} | "
                     f"{max(power) if power else 0:.0f} | {sass} |")
    if results["verified"]:
        lines += ["", "## Verification on odd shapes (rel. error against cuBLAS, poisoned output)", "",
                  "| shape | passed | failed |", "|---|---|---|"]
        for shape in results["verified"]:
            bad = {cid: r for cid, r in shape["configs"].items() if r["status"] != "ok"}
            lines.append(f"| {shape['M']}x{shape['N']}x{shape['K']} | {len(shape['configs']) - len(bad)} | "
                         + (", ".join(f"{cid} {r['status']} {r.get('error') or ''}".strip() for cid, r in bad.items())
                            or "none") + " |")
    for shape in results["timed"]:
        lines += ["", f"## {shape['M']}x{shape['N']}x{shape['K']}", "",
                  "| config | params | median ms | IQR ms | TFLOP/s | regs | spills |", "|---|---|---|---|---|---|---|"]
        for row in shape["rows"]:
            res = results["resources"].get(row["name"], {})
            label = by_id[row["name"]].label() if row["name"] in by_id else "cublasGemmEx (harness baseline)"
            lines.append(f"| {row['name']} | {label} | {row['median_ms']:.4f} | {row['iqr_ms']:.4f} | "
                         f"{row['tflops']:.1f} | {res.get('registers', '')} | {res.get('spill_bytes', '')} |")
        for cid, failure in shape["failures"].items():
            lines.append(f"| {cid} | {by_id[cid].label()} | {failure.get('status')}: {failure.get('error')} | | | | |")
    return "\n".join(lines) + "\n"


def source_label(source: Path) -> str:
    """The kernel source as the report names it: relative to the repository, else as given (an installed copy)."""
    resolved = source.resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(source)


def build_parser() -> argparse.ArgumentParser:
    """The command line (a probe line, benchmarks/probes/*.txt, is one of these after its name)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="gemm_mma", choices=sorted(FAMILIES))
    parser.add_argument("--table", help="take the kept configurations of this params.yaml table")
    parser.add_argument("--filter", action="append", default=[], help="NAME=VALUE, with --table")
    parser.add_argument("--config", action="append", default=[], help="explicit NAME=V,NAME=V,... (repeatable)")
    parser.add_argument("--source", type=Path,
                        help="kernel source (default: the family's; an older one: git show REV:PATH > out/x.cu)")
    parser.add_argument("--shapes", type=parse_shape, nargs="*", default=[(4096,) * 3, (8192,) * 3])
    parser.add_argument("--verify-shapes", type=parse_shape, nargs="*", default=[])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--name", help="output file stem (default gemm_vs_cublas_<family>)")
    parser.add_argument("--nvcc-flag", action="append", default=[], help="extra nvcc flag (experiments, e.g. -DNAME)")
    parser.add_argument("--grid-cap", type=int, help="cap the persistent grid at this many blocks (experiments)")
    parser.add_argument("--grid-multiple", type=int,
                        help="round the persistent grid up to a multiple of this (a variant's cluster size)")
    return parser


def build(configs: list[Any], *, entry: str, source: Path, flags: list[str]) -> tuple[dict[str, str], dict[str, Any]]:
    """Compile the configurations (sm_90a, all cores): cubins and ptxas resources by config id (failures said)."""
    by_id = {c.id: c for c in configs}
    started = time.perf_counter()
    compiled = compile_configs(configs, kernel_path=source, flags=flags, arch="sm_90a",
                               cache_dir=Path(tempfile.gettempdir()) / "tunetable-bench-cubins",
                               workers=os.cpu_count() or 2)
    cubins, resources = {}, {}
    for cid, result in compiled.items():
        if result.status != "ok":
            print(f"build failed: {cid} {by_id[cid].label()}: {result.error}", file=sys.stderr)
            continue
        cubins[cid] = result.cubin
        main = main_function(parse_ptxas(result.ptxas_log), entry=entry)
        resources[cid] = {"registers": main.registers, "spill_bytes": main.spill_stores + main.spill_loads,
                          "stack_bytes": main.stack_bytes} if main else {}
    print(f"compiled {len(cubins)}/{len(configs)} configurations in {time.perf_counter() - started:.1f} s", flush=True)
    return cubins, resources


def main() -> None:
    """Compile, verify, time interleaved with cuBLAS, print and write the figures."""
    args = build_parser().parse_args()

    family = FAMILIES[args.family]
    configs = [explicit_config(family=args.family, text=t, check_rules=args.source is None) for t in args.config]
    if args.table:
        configs += table_configs(table=args.table, filters=args.filter)
    configs = list({c.id: c for c in configs}.values())
    if not configs:
        raise SystemExit("no configurations: give --table and/or --config")
    by_id = {c.id: c for c in configs}
    source = args.source or REPO / family.source
    cubins, resources = build(configs, entry=family.entry, source=source, flags=NVCC_FLAGS + args.nvcc_flag)
    built = [c for c in configs if c.id in cubins]

    harness = Harness(grid_cap=args.grid_cap, grid_multiple=args.grid_multiple)
    results: dict[str, Any] = {
        "family": args.family, "source": source_label(source), "device": harness.info,
        "settings": SETTINGS, "nvcc_flags": NVCC_FLAGS + args.nvcc_flag, "grid_cap": args.grid_cap,
        "rounds": args.rounds, "warmup_s": args.warmup_s, "resources": resources,
        "configs": {c.id: c.label() for c in configs},
        "method": "bench harness (pipeline/bench/cuda_backend.py): rotating random inputs > 3x L2, verification "
                  "against cuBLAS with poisoned output, spin-held batches between CUDA events, cuBLAS "
                  "(cublasGemmEx) interleaved with the configurations round by round, median of rounds.",
        "verified": [], "timed": [],
    }
    for shape in args.verify_shapes:
        verdicts = verify_shape(harness, shape=shape, configs=built, cubins=cubins)
        bad = {cid: v for cid, v in verdicts.items() if v["status"] != "ok"}
        print(f"verify {shape}: {len(verdicts) - len(bad)}/{len(verdicts)} ok"
              + "".join(f"\n  {cid} {by_id[cid].label()}: {v}" for cid, v in bad.items()), flush=True)
        results["verified"].append({"M": shape[0], "N": shape[1], "K": shape[2], "configs": verdicts})
    for shape in args.shapes:
        timed = time_shape(harness, shape=shape, configs=built, cubins=cubins, rounds=args.rounds,
                           warmup_s=args.warmup_s)
        timed["summary"] = summarise(shape=timed, by_id=by_id, resources=resources, cubins=cubins)
        results["timed"].append(timed)
        print(f"timed {shape}:", flush=True)
        for row in timed["rows"]:
            label = by_id[row["name"]].label() if row["name"] in by_id else "cuBLAS"
            grid = timed["launch_grid"].get(row["name"])
            print(f"  {row['tflops']:7.1f} TFLOP/s  {row['median_ms']:.4f} ms  {row['name']}  {label}"
                  + (f"  grid {grid[0]}" if grid else ""), flush=True)
        for cid, failure in timed["failures"].items():
            print(f"  FAILED {cid} {by_id[cid].label()}: {failure}", flush=True)
        summary = timed["summary"]
        if summary.get("best"):
            print(f"  best {summary['best_tflops']:.1f} vs cuBLAS {summary['cublas_tflops']:.1f} TFLOP/s: "
                  f"{summary['ratio_to_cublas']:.3f}x  SASS {summary.get('sass')}", flush=True)
    harness.worker.stop()
    stem = args.name or f"gemm_vs_cublas_{args.family}"
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / f"{stem}.json", json.dumps(results, indent=1, sort_keys=True) + "\n")
    atomic_write_text(args.out / f"{stem}.md", render_markdown(results=results, by_id=by_id))
    print(f"wrote {args.out / stem}.json/.md", flush=True)


if __name__ == "__main__":
    main()
