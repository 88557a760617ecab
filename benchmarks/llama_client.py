"""A real client: a Llama-3-8B-architecture model from transformers, patched with tunetable.torch.patch, against
the same model unpatched, in the same run on the same inputs (GPU machine: torch, transformers, pycuda).

The model is built from Llama-3-8B's config (hidden 4096, intermediate 14336, 32 layers, 32 heads, 8 KV
heads, vocab 128256, rope theta 500000) with random bf16 weights (no download). The patched model is a
copy sharing every parameter, its nn.Linear layers swapped for tunetable.torch.Linear; the unpatched one
runs torch's own GEMMs (cuBLAS).

- Prefill: 1 x 2048 tokens, eager, the last position's logits (as engines compute them); median of
  interleaved rounds, CUDA events.
- Decode: batch 1, 8 and 64, one token per sequence per step, with a static KV cache (transformers'
  StaticCache, 256 slots; prompt of 32 tokens prefilled) and the step captured in a CUDA graph, the way
  engines run decode; the attention mask is built inside the graph from the cache's own position. Time
  per step is the median over rounds of CUDA-event time of 20 replays, the two models interleaved.
- Logits: the same model in fp32 (its bf16 weights widened exactly, no TF32; built before the others run and
  freed after its logits are taken) is the reference: each model's relative error ||x - fp32|| / ||fp32|| over
  the full prefill logits and the first replayed decode step's, beside patched vs unpatched and how often both
  pick the same top-1 token. bf16 tolerance: the patched model's error at most BF16_ERROR_FACTOR x the
  unpatched model's (both round in bf16, differently, so patched vs unpatched alone is about sqrt(2) x
  either's own error and says little).
- Per layer shape: every (M, N, K) the operator served, the path that served it (tunetable.torch.decisions():
  tunetable's kernel or torch's matmul, and why), tunetable's kernel launches per phase (the shape recorder),
  and on random inputs tunetable's kernel against torch.mm: time, bit-for-bit equality and error vs fp32.
- torch.compile: torch._dynamo.explain of the patched model (1 x 16 tokens): its graph breaks and any
  whose reason names tunetable (the unpatched model is traced too only when the patched one breaks).

Targets: decode step time with CUDA graphs <= unpatched at batch 1, 8 and 64; prefill <= 1.0x unpatched;
logits within bf16 tolerance (the rule above); zero graph breaks from tunetable.

    python benchmarks/llama_client.py [--layers 32] [--out benchmarks/results] [--no-reference]

Prints a table and writes llama_client.json and llama_client.md (a run with fewer layers than 32
writes llama_client_<n>layers.* and says so: never the full-model figure).
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tunetable.atomic import atomic_write_text  # noqa: E402

LLAMA3_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                 num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rms_norm_eps=1e-5,
                 rope_theta=500000.0, tie_word_embeddings=False)
PREFILL_TOKENS = 2048
DECODE_BATCHES = (1, 8, 64)
PROMPT = 32
STEPS_PER_SAMPLE = 20
ROUNDS = 5
CACHE_SLOTS = 256      # >= the positions a decode run writes: PROMPT + 2 warm-ups + 1 + 3 + ROUNDS x STEPS = 138
PREFILL_ROUNDS = 7
COMPILE_TOKENS = 16
WARM_STEPS = 2         # decode steps before the capture: the first replay is step WARM_STEPS + 1
# bf16 tolerance: the patched model's logits error against the fp32 model at most this times the unpatched
# model's (two bf16 computations that round differently are each about as far from fp32; their difference is
# about sqrt(2) times either's error, which is why patched-vs-unpatched alone says little)
BF16_ERROR_FACTOR = 1.25
SHAPE_REPS = 20        # per-shape check: CUDA-event time of this many calls, tunetable's kernel and torch.mm


def build_models(torch: Any, *, layers: int) -> tuple[Any, Any, Any, Any]:
    """(config, unpatched, patched, patch report): random bf16 weights on the GPU, shared by both models."""
    from transformers import LlamaConfig, LlamaForCausalLM

    import tunetable.torch as tt

    config = LlamaConfig(**{**LLAMA3_8B, "num_hidden_layers": layers}, attn_implementation="sdpa")
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            unpatched = LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(default)
    unpatched.requires_grad_(False)
    shared = {id(p): p for p in unpatched.parameters()}
    patched = copy.deepcopy(unpatched, memo=shared)   # the same parameters, its own modules
    report = tt.patch(patched)
    return config, unpatched, patched, report


def events_ms(torch: Any, run: Callable[[], Any], *, count: int) -> float:
    """GPU time of ``count`` runs bracketed by CUDA events, per run (ms)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(count):
        run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / count


def rel_err(torch: Any, got: Any, want: Any) -> float:
    """||got - want|| / ||want|| in float32."""
    return float((got.float() - want.float()).norm() / want.float().norm())


def top1_agreement(got: Any, want: Any) -> float:
    """Share of positions where both logits pick the same token."""
    return float((got.argmax(-1) == want.argmax(-1)).float().mean())


def prefill_ids(torch: Any, *, vocab: int) -> Any:
    """The prefill's 1 x PREFILL_TOKENS token ids (seeded)."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    return torch.randint(0, vocab, (1, PREFILL_TOKENS), device="cuda", generator=gen)


def decode_inputs(torch: Any, *, vocab: int, batch: int) -> tuple[Any, Any]:
    """One decode batch's prompt (batch x PROMPT) and step token ids (batch x 1), seeded by the batch size."""
    gen = torch.Generator(device="cuda").manual_seed(2 + batch)
    prompt = torch.randint(0, vocab, (batch, PROMPT), device="cuda", generator=gen)
    return prompt, torch.randint(0, vocab, (batch, 1), device="cuda", generator=gen)


def errors(torch: Any, logits: dict[str, Any], reference: Any) -> dict[str, Any]:
    """The logits' errors: patched vs unpatched, each against the fp32 model, top-1 agreement, the bf16 rule."""
    found = {"logits_rel_err": rel_err(torch, logits["patched"], logits["unpatched"]),
             "top1_agreement": top1_agreement(logits["patched"], logits["unpatched"])}
    if reference is not None:
        found["err_vs_fp32"] = {name: rel_err(torch, value, reference) for name, value in logits.items()}
        found["top1_vs_fp32"] = {name: top1_agreement(value, reference) for name, value in logits.items()}
        found["within_bf16_tolerance"] = (found["err_vs_fp32"]["patched"]
                                          <= BF16_ERROR_FACTOR * found["err_vs_fp32"]["unpatched"])
    return found


def prefill(torch: Any, models: dict[str, Any], *, vocab: int, reference: Any = None) -> dict[str, Any]:
    """1 x PREFILL_TOKENS eager forward of both models: time (last position's logits) and full-logits errors."""
    ids = prefill_ids(torch, vocab=vocab)
    with torch.inference_mode():
        logits = {name: model(input_ids=ids, use_cache=False).logits.float() for name, model in models.items()}
        found = errors(torch, logits, reference)
        logits.clear()
        runs = {name: (lambda m=model: m(input_ids=ids, use_cache=False, logits_to_keep=1)) for name, model in
                models.items()}
        for run in runs.values():
            events_ms(torch, run, count=2)       # warm-up: plans, cuBLAS heuristics, clocks
        samples: dict[str, list[float]] = {name: [] for name in runs}
        for round_index in range(PREFILL_ROUNDS):
            order = list(runs)[round_index % 2:] + list(runs)[:round_index % 2]
            for name in order:
                samples[name].append(events_ms(torch, runs[name], count=1))
    ms = {name: statistics.median(values) for name, values in samples.items()}
    return {"tokens": PREFILL_TOKENS, "ms": ms, "samples_ms": samples,
            "tokens_per_s": {name: PREFILL_TOKENS / (value * 1e-3) for name, value in ms.items()},
            "patched_over_unpatched": ms["patched"] / ms["unpatched"], **found}


def reference_model(torch: Any, unpatched: Any, config: Any) -> Any:
    """The same model in float32: its bf16 weights and buffers widened exactly (built on the meta device)."""
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        found = LlamaForCausalLM(config)
    found = found.to_empty(device="cuda").float().eval()
    found.load_state_dict(unpatched.state_dict())
    sources = dict(unpatched.named_buffers())
    with torch.no_grad():
        for name, buffer in found.named_buffers():   # non-persistent buffers (rotary inv_freq) too
            buffer.copy_(sources[name])
    return found.requires_grad_(False)


def references(torch: Any, unpatched: Any, config: Any) -> dict[str, Any]:
    """The fp32 model's logits for the prefill (all positions) and each decode batch's first replayed step."""
    matmul = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False      # full fp32 products
    model = reference_model(torch, unpatched, config)
    try:
        with torch.inference_mode():
            found = {"prefill": model(input_ids=prefill_ids(torch, vocab=config.vocab_size), use_cache=False)
                     .logits.float()}
            for batch in DECODE_BATCHES:
                prompt, step_ids = decode_inputs(torch, vocab=config.vocab_size, batch=batch)
                state = DecodeState(torch, model, config, batch=batch, prompt=prompt, step_ids=step_ids)
                for _ in range(WARM_STEPS + 1):   # the graphs' warm-up steps, then the first replay's
                    logits = state.step()
                found[f"decode {batch}"] = logits.float()
                del state
    finally:
        torch.backends.cuda.matmul.allow_tf32 = matmul
        del model
        torch.cuda.empty_cache()
    return found


class DecodeState:
    """One model's decode at one batch size over a static KV cache: the prompt prefilled, then ``step()``."""

    def __init__(self, torch: Any, model: Any, config: Any, *, batch: int, prompt: Any, step_ids: Any):
        from transformers import StaticCache

        self.model = model
        self.cache = StaticCache(config=config, max_cache_len=CACHE_SLOTS)
        self.slots = torch.arange(CACHE_SLOTS, device="cuda")
        self.batch = batch
        self.ids = step_ids.clone()                                    # static input
        with torch.inference_mode():
            model(input_ids=prompt, past_key_values=self.cache, use_cache=True, logits_to_keep=1)

    def step(self) -> Any:
        """One token per sequence: the mask allows the cache slots up to the new token's position."""
        position = self.cache.layers[0].cumulative_length            # a device tensor: read inside the graph
        mask = (self.slots <= position).view(1, 1, 1, CACHE_SLOTS).expand(self.batch, 1, 1, CACHE_SLOTS)
        return self.model(input_ids=self.ids, attention_mask=mask, past_key_values=self.cache, use_cache=True).logits


class DecodeGraph(DecodeState):
    """A DecodeState whose step is captured in a CUDA graph after WARM_STEPS warm-up steps on a side stream."""

    def __init__(self, torch: Any, model: Any, config: Any, *, batch: int, prompt: Any, step_ids: Any):
        super().__init__(torch, model, config, batch=batch, prompt=prompt, step_ids=step_ids)
        with torch.inference_mode():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(WARM_STEPS):        # warm-up on a side stream, as torch.cuda.graph asks
                    self.step()
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.logits = self.step()

    def replay(self) -> None:
        """One decode step (advances the cache position inside the graph)."""
        self.graph.replay()


def decode(torch: Any, models: dict[str, Any], config: Any, *, batch: int, reference: Any = None) -> dict[str, Any]:
    """Both models' CUDA-graph decode step at ``batch``: time per step, tokens/s, first replay's logits errors."""
    prompt, step_ids = decode_inputs(torch, vocab=config.vocab_size, batch=batch)
    graphs = {name: DecodeGraph(torch, model, config, batch=batch, prompt=prompt, step_ids=step_ids)
              for name, model in models.items()}
    for found in graphs.values():
        found.replay()
    torch.cuda.synchronize()
    found_errors = errors(torch, {name: graph.logits for name, graph in graphs.items()}, reference)
    for found in graphs.values():
        events_ms(torch, found.replay, count=3)
    samples: dict[str, list[float]] = {name: [] for name in graphs}
    for round_index in range(ROUNDS):
        order = list(graphs)[round_index % 2:] + list(graphs)[:round_index % 2]
        for name in order:
            samples[name].append(events_ms(torch, graphs[name].replay, count=STEPS_PER_SAMPLE))
    ms = {name: statistics.median(values) for name, values in samples.items()}
    graphs.clear()
    torch.cuda.empty_cache()
    return {"batch": batch, "ms_per_step": ms, "samples_ms": samples,
            "tokens_per_s": {name: batch / (value * 1e-3) for name, value in ms.items()},
            "patched_over_unpatched": ms["patched"] / ms["unpatched"], **found_errors}


def layer_kinds(model: Any) -> dict[tuple[int, int], list[str]]:
    """(N, K) -> the kinds of nn.Linear layer of that shape in the unpatched model ('self_attn.q_proj', 'lm_head')."""
    import re

    found: dict[tuple[int, int], set[str]] = {}
    for name, module in model.named_modules():
        if hasattr(module, "in_features") and hasattr(module, "out_features"):
            kind = re.sub(r"^model\.layers\.\d+\.", "", name)
            found.setdefault((module.out_features, module.in_features), set()).add(kind)
    return {shape: sorted(kinds) for shape, kinds in found.items()}


def kernel_check(torch: Any, launch: Any, *, m: int, n: int, k: int, gen: Any) -> dict[str, Any]:
    """tunetable's kernel against torch.mm on random (M, N, K) inputs: warm time of SHAPE_REPS calls each, bit-for-bit
    equality, and each one's error against the fp32 product."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
    ours, theirs = launch.gemm(a, b), torch.mm(a, b.t())
    want = a.float() @ b.float().t()
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ours_ms = events_ms(torch, lambda: launch.gemm(a, b, out=out), count=SHAPE_REPS)
    theirs_ms = events_ms(torch, lambda: torch.mm(a, b.t(), out=out), count=SHAPE_REPS)
    return {"bitwise_equal_to_torch": bool(torch.equal(ours, theirs)),
            "tunetable_err_vs_fp32": rel_err(torch, ours, want), "torch_err_vs_fp32": rel_err(torch, theirs, want),
            "tunetable_ms": ours_ms, "torch_ms": theirs_ms, "torch_over_tunetable": theirs_ms / ours_ms}


def shape_checks(torch: Any, *, phases: dict[tuple[int, int, int], str], launches: dict[str, dict],
                 kinds: dict[tuple[int, int], list[str]], left: dict[tuple[int, int], str]) -> list[dict[str, Any]]:
    """Per shape the operator served (and, at the same Ms, each (N, K) whose layers patch left to torch): its path
    and why, tunetable's kernel launches per phase, and on random inputs tunetable's kernel and torch.mm each timed
    (warm, SHAPE_REPS calls), compared bit for bit and against fp32."""
    import tunetable.torch as tt
    from tunetable.kernels.runtime import launch

    rows = []
    gen = torch.Generator(device="cuda").manual_seed(3)
    served = tt.decisions()
    ms = sorted({route["M"] for route in served})
    kept = [{"M": m, "N": n, "K": k, "device": 0, "path": "torch", "source": "nn.Linear (left by patch)", "why": why}
            for (n, k), why in sorted(left.items()) for m in ms]
    for route in served + kept:
        m, n, k = route["M"], route["N"], route["K"]
        row = {**route, "layers": kinds.get((n, k), []), "first_phase": phases.get((m, n, k), "-"),
               "tunetable_launches": {phase: counts.get(f"{m},{n},{k}", 0) for phase, counts in launches.items()}}
        try:
            row.update(kernel_check(torch, launch, m=m, n=n, k=k, gen=gen))
        except Exception as exc:  # noqa: BLE001 - one shape that cannot run is reported, the others still are
            row["check_error"] = f"{type(exc).__name__}: {exc}"[:500]
        rows.append(row)
    torch.cuda.empty_cache()
    return rows


def graph_breaks(torch: Any, models: dict[str, Any], *, vocab: int) -> dict[str, Any]:
    """torch._dynamo.explain on 1 x COMPILE_TOKENS: the patched model's graph breaks, those naming tunetable, and
    (only when the patched model breaks at all, to tell whose breaks they are) the unpatched model's."""
    ids = torch.randint(0, vocab, (1, COMPILE_TOKENS), device="cuda")
    found: dict[str, Any] = {}
    with torch.no_grad():
        for name in ("patched", "unpatched"):
            if name == "unpatched" and found["patched"]["graph_breaks"] == 0:
                break
            torch._dynamo.reset()
            started = time.perf_counter()
            explained = torch._dynamo.explain(models[name])(input_ids=ids, use_cache=False)
            reasons = [str(getattr(reason, "reason", reason)) for reason in explained.break_reasons]
            found[name] = {"graph_breaks": explained.graph_break_count, "graphs": explained.graph_count,
                           "reasons": reasons[:10], "tunetable_breaks": sum("tunetable" in r for r in reasons),
                           "seconds": time.perf_counter() - started}
    torch._dynamo.reset()
    unpatched = found.get("unpatched", {"graph_breaks": 0})["graph_breaks"]
    found["breaks_from_tunetable"] = max(0, found["patched"]["graph_breaks"] - unpatched) \
        + found["patched"]["tunetable_breaks"]
    return found


def phase_rows(results: dict[str, Any]) -> list[tuple[str, dict[str, Any], float, float, str]]:
    """(label, row, unpatched ms, patched ms, ms format) of each measured phase, the prefill first."""
    rows = []
    if results["prefill"]:
        pre = results["prefill"]
        rows.append((f"prefill 1x{pre['tokens']}", pre, pre["ms"]["unpatched"], pre["ms"]["patched"], ".2f"))
    for row in results["decode"]:
        rows.append((f"decode batch {row['batch']} (CUDA graph)", row, row["ms_per_step"]["unpatched"],
                     row["ms_per_step"]["patched"], ".3f"))
    return rows


def render_markdown(results: dict[str, Any]) -> str:
    """The human summary: prefill, decode per batch, logits errors, per-shape paths, graph breaks, targets."""
    lines = [f"# Llama-3-8B architecture ({results['layers']} layers, random bf16 weights): tunetable.torch.patch "
             "vs unpatched", "",
             f"Device: {results['device']}, torch {results['torch']}, transformers {results['transformers']}, "
             f"git {results['git_rev']}, {results['date']}. {results['patch']}", "",
             f"Method: {results['method']}", "",
             "| phase | unpatched ms | patched ms | patched / unpatched | unpatched tok/s | patched tok/s | "
             "patched vs unpatched rel err | unpatched vs fp32 | patched vs fp32 | top-1 agree |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for label, row, before, after, fmt in phase_rows(results):
        fp32 = row.get("err_vs_fp32", {"unpatched": math.nan, "patched": math.nan})
        lines.append(f"| {label} | {before:{fmt}} | {after:{fmt}} | {row['patched_over_unpatched']:.3f} | "
                     f"{row['tokens_per_s']['unpatched']:.0f} | {row['tokens_per_s']['patched']:.0f} | "
                     f"{row['logits_rel_err']:.2e} | {fp32['unpatched']:.2e} | {fp32['patched']:.2e} | "
                     f"{row['top1_agreement']:.3f} |")
    lines += ["", f"bf16 tolerance: the patched model's logits error against the same model in fp32 at most "
              f"{BF16_ERROR_FACTOR:g}x the unpatched model's (both are bf16 computations; patched vs unpatched "
              "differ by about sqrt(2) x either's own error)."]
    lines += shape_markdown(results.get("shapes") or [])
    breaks = results["compile"]
    if breaks is not None:
        unpatched = (f"unpatched {breaks['unpatched']['graph_breaks']}" if "unpatched" in breaks
                     else "unpatched not traced (the patched model has none)")
        lines += ["", f"torch._dynamo.explain (1 x {COMPILE_TOKENS} tokens): patched model "
                  f"{breaks['patched']['graph_breaks']} graph breaks in {breaks['patched']['graphs']} graph(s); "
                  f"{unpatched}; breaks from tunetable: {breaks['breaks_from_tunetable']}."]
    lines += [""] + [f"Failed: {name}: {why}" for name, why in results["errors"].items()] + ["", "## Targets", ""]
    lines += [f"- {name}: {'met' if met else 'NOT met'}" for name, met in results["targets"].items()]
    return "\n".join(lines) + "\n"


def shape_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The per-shape section: which path served each shape the operator saw, and the kernel against torch.mm."""
    if not rows:
        return []
    lines = ["", "## Per layer shape: which path served it", "",
             "Path: the operator's route (tunetable.torch.decisions()); launches: tunetable kernel launches from the "
             "host per phase (a CUDA graph's counted once, at capture). Check: random inputs, tunetable's kernel "
             f"(launch.gemm, whatever the route) and torch.mm, warm, {SHAPE_REPS} calls each (CUDA events).", "",
             "| M | N | K | layers | first in | path | source | why | launches | tunetable ms | torch.mm ms | "
             "torch.mm / tunetable | bitwise = torch.mm | tunetable err vs fp32 | torch.mm err vs fp32 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        launches = ", ".join(f"{phase}: {count}" for phase, count in r["tunetable_launches"].items() if count) or "0"
        if "check_error" in r:
            lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {', '.join(r['layers'])} | {r['first_phase']} | "
                         f"{r['path']} | {r['source']} | {r['why']} | {launches} | {r['check_error']} |"
                         + " - |" * 5)
            continue
        lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {', '.join(r['layers'])} | {r['first_phase']} | "
                     f"{r['path']} | {r['source']} | {r['why']} | {launches} | {r['tunetable_ms']:.4f} | "
                     f"{r['torch_ms']:.4f} | "
                     f"{r['torch_over_tunetable']:.3f} | {'yes' if r['bitwise_equal_to_torch'] else 'no'} | "
                     f"{r['tunetable_err_vs_fp32']:.2e} | {r['torch_err_vs_fp32']:.2e} |")
    return lines


def main() -> None:
    """Build both models, measure prefill, decode and graph breaks; print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=LLAMA3_8B["num_hidden_layers"])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--no-reference", action="store_true", help="skip the fp32 model (it needs 32 GB more)")
    args = parser.parse_args()
    if not 1 <= args.layers <= LLAMA3_8B["num_hidden_layers"]:
        parser.error(f"--layers must be 1..{LLAMA3_8B['num_hidden_layers']}")
    import torch
    import transformers

    from tunetable.kernels.runtime.decide import FallbackWarning

    warnings.simplefilter("ignore", FallbackWarning)   # untuned shapes: the per-shape section says what ran
    started = time.perf_counter()
    config, unpatched, patched, report = build_models(torch, layers=args.layers)
    print(f"built {args.layers} layers in {time.perf_counter() - started:.0f} s; {report.summary()}", flush=True)
    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "transformers": transformers.__version__,
        "git_rev": os.environ.get("TUNETABLE_GIT_REV", "unknown"),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "layers": args.layers,
        "patch": report.summary(), "patched_layers": len(report.taken), "left_layers": len(report.left),
        "left": [{"name": item.name, "reason": item.reason} for item in report.left],
        "method": (f"same weights, same inputs, interleaved rounds; prefill: eager, median of {PREFILL_ROUNDS}; "
                   f"decode: static KV cache ({CACHE_SLOTS} slots, {PROMPT}-token prompt), step captured in a CUDA "
                   f"graph, median of {ROUNDS} rounds of {STEPS_PER_SAMPLE} replays; CUDA events; reference: the same "
                   "model in fp32 (weights widened exactly, no TF32)"),
        "errors": {},
    }
    stem = "llama_client" if args.layers == LLAMA3_8B["num_hidden_layers"] else f"llama_client_{args.layers}layers"
    run_phases(torch, {"unpatched": unpatched, "patched": patched}, config, results, out=args.out, stem=stem,
               started=started, reference=not args.no_reference)
    results["targets"] = targets(results)
    write(args.out, stem, results)
    text = render_markdown(results)
    atomic_write_text(args.out / f"{stem}.md", text)
    print(text)


def run_phases(torch: Any, models: dict[str, Any], config: Any, results: dict[str, Any], *, out: Path, stem: str,
               started: float, reference: bool) -> None:
    """The fp32 reference, prefill, decode per batch, the per-shape checks and graph breaks, each recorded as it
    ends (a phase that fails is recorded with its reason and the others still run)."""
    import tempfile

    import tunetable.torch as tt
    from tunetable.kernels.runtime import record

    phases: dict[tuple[int, int, int], str] = {}
    launches: dict[str, dict[str, int]] = {}

    def phase(name: str, run: Callable[[], Any], *, served: bool = False) -> Any:
        """One measurement (its shapes recorded when ``served``), figures written after it."""
        before = {(r["M"], r["N"], r["K"]) for r in tt.decisions()}
        recorder = record.record_shapes(Path(tempfile.mkdtemp(prefix="llama_client.")) / "shapes.csv")
        try:
            found = run()
        except Exception as exc:  # noqa: BLE001 - a client run reports every phase it could measure
            results["errors"][name] = f"{type(exc).__name__}: {exc}"[:2000]
            print(f"{name} FAILED: {results['errors'][name]}", flush=True)
            found = None
        if served:
            launches[name] = {f"{m},{n},{k}": count for (m, n, k), count in recorder.counts.items()}
            phases.update({(r["M"], r["N"], r["K"]): name for r in tt.decisions()
                           if (r["M"], r["N"], r["K"]) not in before})
        record.stop_recording()
        torch.cuda.empty_cache()
        write(out, stem, results)
        print(f"{name} done ({time.perf_counter() - started:.0f} s)", flush=True)
        return found

    refs = phase("fp32 reference", lambda: references(torch, models["unpatched"], config)) if reference else None
    refs = refs or {}
    results["prefill"] = phase("prefill", lambda: prefill(torch, models, vocab=config.vocab_size,
                                                          reference=refs.get("prefill")), served=True)
    results["decode"] = [row for row in (phase(f"decode batch {batch}", lambda b=batch: decode(
        torch, models, config, batch=b, reference=refs.get(f"decode {b}")), served=True) for batch in DECODE_BATCHES)
        if row is not None]
    refs.clear()
    modules = dict(models["unpatched"].named_modules())
    left = {(modules[item["name"]].out_features, modules[item["name"]].in_features): item["reason"]
            for item in results["left"] if item["name"] in modules}
    results["shapes"] = phase("shape checks", lambda: shape_checks(torch, phases=phases, launches=launches,
                                                                  kinds=layer_kinds(models["unpatched"]), left=left))
    results["compile"] = phase("compile", lambda: graph_breaks(torch, models, vocab=config.vocab_size))


def targets(results: dict[str, Any]) -> dict[str, bool]:
    """Each target of the issue, met or not (a phase that failed counts as not met)."""
    found = {f"decode batch {batch} <= unpatched": False for batch in DECODE_BATCHES}
    found.update({f"decode batch {row['batch']} <= unpatched": row["patched_over_unpatched"] <= 1.0
                  for row in results["decode"]})
    prefill_row = results["prefill"]
    found["prefill <= 1.0x unpatched"] = prefill_row is not None and prefill_row["patched_over_unpatched"] <= 1.0
    rows = ([prefill_row] if prefill_row else []) + list(results["decode"])
    rule = f"patched error vs fp32 <= {BF16_ERROR_FACTOR:g}x unpatched's, every phase"
    found[f"logits within bf16 tolerance ({rule})"] = (
        len(rows) == 1 + len(DECODE_BATCHES) and all(row.get("within_bf16_tolerance", False) for row in rows))
    found["zero graph breaks from tunetable"] = (results["compile"] is not None
                                                 and results["compile"]["breaks_from_tunetable"] == 0)
    return found


def write(out: Path, stem: str, results: dict[str, Any]) -> None:
    """<stem>.json (atomic), rewritten after every phase so that a run cut short keeps its figures."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"{stem}.json", json.dumps(results, indent=1, sort_keys=True, default=str) + "\n")


if __name__ == "__main__":
    main()
