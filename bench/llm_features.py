"""`vigil bench llm-features`: what structured outputs and per-request LoRA adapters cost
the LLM engine, measured side by side in one run on one model (SmolLM2 by default).

Adapters: the same closed batch of caption requests (chat prompts with a shared prefix,
every request generating exactly `out_tokens`) run
  (a) all on the base model, through one engine;
  (b) spread evenly over the base model and three adapters (the model's own, and two
      random ones of the same rank written for the run), through one engine;
  (c) the same spread over four separate engines, each with its adapter merged into its
      weights, all running at once on the same cores.
Reported: generated tokens/s of (b) over (a), and of (b) over (c). Each batch is run
`repeats` times, the systems taking turns, after a warm-up run; the best counts.

Structured outputs:
  - validity: `structured_requests` requests, sampled at temperature 1 with a seed each,
    over five schemas (nested objects, enums, arrays, bounded numbers, a pattern); every
    output is parsed and checked with `jsonschema`;
  - mask cost: a closed batch, half of it held to a regex that cannot end within
    `out_tokens` (so every request generates exactly as many tokens), against the same
    batch unconstrained; jump-forward off, so every constrained token is masked;
  - jump-forward: single requests held to a schema of fixed keys; forward passes
    (engine steps) per generated token.
"""

from __future__ import annotations

import json
import random
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from llm.checkpoint import load_checkpoint
from llm.engine import EngineConfig, LLMEngine
from llm.prompts import caption_request
from llm.sampling import SamplingParams
from llm.scene_corpus import random_facts
from llm.serving import llm_version
from llm.structured import Constraint
from models.repository import ModelRepository

ROOT = Path(__file__).resolve().parents[1]

SCHEMAS = [
    {"type": "object", "properties": {  # nested objects, an enum, bounded integers
        "camera": {"type": "string", "maxLength": 12},
        "seen": {"type": "object", "properties": {"kind": {"enum": ["person", "car", "bike"]},
                                                  "count": {"type": "integer", "minimum": 0, "maximum": 50}},
                 "required": ["kind", "count"]}},
     "required": ["camera", "seen"]},
    {"type": "object", "properties": {  # an array of bounded length
        "zones": {"type": "array", "items": {"enum": ["door", "road", "lawn"]}, "minItems": 1, "maxItems": 4}},
     "required": ["zones"]},
    {"type": "object", "properties": {  # numbers with bounds, a boolean
        "speed": {"type": "number", "minimum": 0, "maximum": 120}, "moving": {"type": "boolean"}},
     "required": ["speed", "moving"]},
    {"type": "object", "properties": {  # an array of objects
        "tracks": {"type": "array", "maxItems": 3, "items": {
            "type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 999},
                                             "label": {"enum": ["person", "car"]}},
            "required": ["id", "label"]}}},
     "required": ["tracks"]},
    {"type": "object", "properties": {  # a pattern, and an optional field
        "time": {"type": "string", "pattern": "^[0-9]{1,2}:[0-5][0-9]$"}, "note": {"type": "string", "maxLength": 8}},
     "required": ["time"]},
]
FIXED_KEYS = {"type": "object", "properties": {"camera": {"enum": ["door", "street", "lobby"]},
                                               "kind": {"enum": ["person", "car"]},
                                               "count": {"type": "integer", "minimum": 0, "maximum": 99},
                                               "moving": {"type": "boolean"}},
              "required": ["camera", "kind", "count", "moving"]}
QUESTIONS = ["A camera saw three people at the door. Describe it as JSON.",
             "Two cars passed the street camera. Reply in JSON.",
             "Nobody was in the lobby. Give the JSON.", "One person walked by the door. JSON please.",
             "Five cars waited on the street. Answer in JSON."]


@dataclass(frozen=True)
class FeaturesBenchOptions:
    quick: bool = False
    repository: Path = ROOT / "configs" / "models"
    model: str = "smollm2-135m-instruct"
    device: str = "cpu"
    requests: int = 32  # per closed batch: one batch of max_batch, so no engine runs them in waves
    out_tokens: int = 192  # long enough that decoding, where batching pays, outweighs the prompts
    max_batch: int = 32
    repeats: int = 2  # of each throughput measurement, in turns; the best counts
    structured_requests: int = 1000
    seed: int = 0


def write_random_adapter(folder: Path, like: Path, seed: int) -> Path:
    """An adapter of the same rank and projections as the one at `like`, random weights."""
    from safetensors.torch import load_file, save_file

    g = torch.Generator().manual_seed(seed)
    tensors = {name: torch.randn(t.shape, generator=g) * float(t.float().std())
               for name, t in load_file(str(like / "adapter_model.safetensors")).items()}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text((like / "adapter_config.json").read_text())
    return folder


def closed_batch(engines: dict[str | None, LLMEngine], jobs: list[tuple[str | None, list[int] | str,
                                                                        SamplingParams]]) -> tuple[float, int]:
    """Runs every job at once, each on the engine of its adapter (through that adapter
    when the engine serves it); engines step on threads of their own. (seconds, tokens)."""
    handles = []
    started = time.perf_counter()
    for adapter, prompt, params in jobs:
        engine = engines[adapter] if adapter in engines else engines[None]
        lora = adapter if adapter in engine.adapters.loaded else None
        handles.append(engine.add_request(prompt, params, stream=False, lora=lora))
    used = {id(e): e for e in engines.values()}.values()
    threads = [threading.Thread(target=_drain, args=(e,)) for e in used]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    return elapsed, sum(len(h.request.output_ids) for h in handles)


def best_in_turns(engines: dict, workloads: dict[str, list], repeats: int) -> dict[str, float]:
    """Each workload's best generated tokens/s over `repeats` closed batches, the workloads
    taking turns, so that a slow spell of a shared machine falls on all alike."""
    rates: dict[str, list[float]] = {label: [] for label in workloads}
    for _ in range(repeats):
        for label, jobs in workloads.items():
            seconds, tokens = closed_batch(engines, jobs)
            rates[label].append(tokens / seconds)
    return {label: round(max(r), 1) for label, r in rates.items()}


def blocks_needed(engine: LLMEngine, prompts: list, opts: FeaturesBenchOptions) -> int:
    """KV blocks that every request of a closed batch holds at its end, none shared."""
    size = engine.config.block_size
    return sum(-(-(len(engine.tokenizer.encode(p) if isinstance(p, str) else p) + opts.out_tokens) // size)
               for p in prompts)


def _drain(engine: LLMEngine) -> None:
    while engine.has_work():
        engine.step()


def run_features_bench(opts: FeaturesBenchOptions, log: Callable[[str], None] = print) -> dict:
    repository = ModelRepository(opts.repository)
    path = llm_version(repository, opts.model)
    adapters = repository.config(opts.model).adapters
    if not adapters:
        raise ValueError(f"{opts.model}: no adapters in its model_config.yaml to measure")
    own_name, own_folder = next(iter(adapters.items()))
    own = repository.root / opts.model / own_folder
    config = EngineConfig(num_blocks=2048, block_size=16, max_num_seqs=opts.max_batch)
    result: dict = {"model": opts.model, "device": opts.device, "requests": opts.requests,
                    "out_tokens": opts.out_tokens, "max_batch": opts.max_batch}
    with tempfile.TemporaryDirectory(prefix="vigil-bench-adapters-") as tmp:
        folders = {own_name: own, **{f"random{k}": write_random_adapter(Path(tmp) / f"random{k}", own, k)
                                     for k in (1, 2)}}
        model, tok = load_checkpoint(path, opts.device)
        engine = LLMEngine(model, tok, config, name=opts.model)
        for name, folder in folders.items():
            engine.load_lora(name, folder)
        rng = random.Random(opts.seed)
        prompts = [caption_request(tok, random_facts(rng), tuned=True) for _ in range(opts.requests)]
        fixed = SamplingParams(max_tokens=opts.out_tokens, ignore_eos=True)
        spread = [None, *folders]
        log(f"adapters: {opts.requests} requests x {opts.out_tokens} tokens, base only, then over the base and "
            f"{len(folders)} adapters, through one engine, in turns ({opts.repeats} each, the best counts)")
        base_jobs = [(None, p, fixed) for p in prompts]
        mixed_jobs = [(spread[i % len(spread)], p, fixed) for i, p in enumerate(prompts)]
        closed_batch({None: engine}, mixed_jobs)  # warm-up: every KV block written once, every path run
        rates = best_in_turns({None: engine}, {"base": base_jobs, "mixed": mixed_jobs}, opts.repeats)
        result["adapters"] = {"base_tps": rates["base"], "mixed_tps": rates["mixed"]}

        log(f"structured outputs: {opts.structured_requests} sampled requests over {len(SCHEMAS)} schemas")
        result["structured"] = structured(engine, tok, opts, log)
        engine.close()

        log("adapters: the same spread over four engines at once, each with its adapter merged")
        share = EngineConfig(num_blocks=blocks_needed(engine, prompts, opts) // len(spread) + 64, block_size=16,
                             max_num_seqs=opts.max_batch)
        merged = {None: LLMEngine(*load_checkpoint(path, opts.device), share, name="base")}
        for name, folder in folders.items():
            merged[name] = LLMEngine(*load_checkpoint(path, opts.device, folder), share, name=name)
        closed_batch(merged, mixed_jobs)  # warm-up
        split = best_in_turns(merged, {"split": mixed_jobs}, opts.repeats)["split"]
        for e in merged.values():
            e.close()
    a = result["adapters"]
    a["separate_merged_tps"] = split
    a["mixed_vs_base"] = round(a["mixed_tps"] / a["base_tps"], 3)
    a["mixed_vs_separate_merged"] = round(a["mixed_tps"] / a["separate_merged_tps"], 3)
    return result


def structured(engine: LLMEngine, tok, opts: FeaturesBenchOptions, log: Callable[[str], None]) -> dict:
    import jsonschema

    chats = [tok.chat([{"role": "user", "content": q}]) for q in QUESTIONS]
    jobs = [(chats[k % len(chats)], SamplingParams(max_tokens=96, temperature=1.0, seed=k,
                                                   constraint=Constraint.json_schema(SCHEMAS[k % len(SCHEMAS)])))
            for k in range(opts.structured_requests)]
    handles = [engine.add_request(p, params, stream=False) for p, params in jobs]
    _drain(engine)
    valid = cut = 0
    for k, h in enumerate(handles):
        out = h.result(5)
        if out.finish_reason == "length":  # max_tokens ended it mid-value: not a failure of the grammar
            cut += 1
            continue
        try:
            jsonschema.validate(json.loads(out.text), SCHEMAS[k % len(SCHEMAS)])
            valid += 1
        except (ValueError, jsonschema.ValidationError) as exc:
            log(f"  invalid output {out.text!r}: {exc}")
    ended = len(handles) - cut
    log(f"  {valid}/{ended} ended outputs parse and validate ({cut} cut by max_tokens)")

    rng = random.Random(opts.seed + 1)
    prompts = [caption_request(tok, random_facts(rng)) for _ in range(opts.requests)]
    free = SamplingParams(max_tokens=opts.out_tokens, ignore_eos=True)
    held = SamplingParams(max_tokens=opts.out_tokens, constraint=Constraint.regex("[a-z ,.]{1000}"))
    jf = engine.scheduler.jump_forward
    engine.scheduler.jump_forward = False  # every constrained token masked: the mask's whole cost
    try:
        rates = best_in_turns({None: engine}, {"free": [(None, p, free) for p in prompts],
                                               "half": [(None, p, held if i % 2 else free)
                                                        for i, p in enumerate(prompts)]}, opts.repeats)
    finally:
        engine.scheduler.jump_forward = jf
    log(f"  half constrained: {rates['half']:.0f} tokens/s; unconstrained {rates['free']:.0f}")

    passes = tokens = 0
    for chat in chats:
        before = engine.num_steps
        h = engine.add_request(chat, SamplingParams(max_tokens=64, constraint=Constraint.json_schema(FIXED_KEYS)))
        _drain(engine)
        passes += engine.num_steps - before
        tokens += len(h.request.output_ids) + 1  # and the end of text sampled
    return {"requests": len(handles), "ended": ended, "valid": valid, "cut_by_max_tokens": cut,
            "valid_share": round(valid / max(1, ended), 4), "schemas": len(SCHEMAS),
            "unconstrained_tps": rates["free"], "half_constrained_tps": rates["half"],
            "half_constrained_vs_unconstrained": round(rates["half"] / rates["free"], 3),
            "jump_forward_passes_per_token": round(passes / tokens, 3), "compiles": engine.grammars.compiles}


def format_features_report(r: dict) -> str:
    a, s = r["adapters"], r["structured"]
    return "\n".join([
        f"adapters ({r['model']}, {r['requests']} requests x {r['out_tokens']} tokens):",
        f"  base only {a['base_tps']} tok/s; base + 3 adapters in one engine {a['mixed_tps']} tok/s "
        f"({a['mixed_vs_base']}x); four merged engines {a['separate_merged_tps']} tok/s "
        f"(one engine is {a['mixed_vs_separate_merged']}x)",
        f"structured outputs: {s['valid']}/{s['ended']} valid ({s['cut_by_max_tokens']} cut by max_tokens); "
        f"half constrained {s['half_constrained_vs_unconstrained']}x the unconstrained throughput; "
        f"jump-forward {s['jump_forward_passes_per_token']} passes per token"])
