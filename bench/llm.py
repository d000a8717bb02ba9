"""`vigil bench llm`: the same model and workload served four ways, side by side:

  (a) Vigil's engine: iteration-level scheduling, selective batching, paged KV with
      prefix caching;
  (b) the same engine with prefix caching off (the ablation of the cache);
  (c) Hugging Face transformers `generate` with static request-level batching: the
      requests waiting when a batch starts are padded into one batch that runs until
      its longest member ends;
  (d) Vigil's engine restricted to request-level batching (the ablation of iteration-
      level scheduling).

Workload: Poisson arrivals; prompts are caption requests for random scene facts (for a
chat model, the same instruction then the facts, through its chat template: a shared
prefix of every request; for scene-lm its own caption prompt); output lengths drawn
uniformly from 8 to 256 tokens (generated to exactly that length). For each system
the highest arrival rate is searched (from the rate at which a trial's requests arrive
within `trial_s`, or one request per time alone if that is higher: halving while the
bound breaks, then doubling, then three bisection steps) at which
p99 latency stays within a bound, and the throughput (generated tokens/s) at that rate
is reported: throughput at equal p99. The bound is 4x the time one 256-token request
takes alone on the slowest of the three, so that each of them meets it at a light
load. A trial spans at least `trial_s` seconds of arrivals, so that a queue that
builds at a rate beyond a system's capacity shows in its p99.

Near a system's capacity one trial's p99 swings with the machine (on a shared 2-core
VM the same rate gave 2.35 s in one run and 3.5 s in another), so the three searches
take turns, a trial each, so that a slow spell of the machine falls on all three
alike, and a rate that breaks the bound narrowly is tried once more before it counts
as beyond. The time alone is the median of three runs. Prefix caching shows most in
the time to first token: after the searches, the engine with the cache runs once more at
the rate the engine without it reached, and the two mean times to first token are
compared at that one rate.

With `peer="llamacpp"` the bench serves the workload two ways instead: Vigil's engine
and llama.cpp's server (bench/llamacpp_peer.py) on the same GGUF file with the same
thread count, through the same rate search and bound. The three runs alone that set
the bound stream their tokens, so each also gives the single-request decode rate,
(tokens - 1) / (time from the first token to the last), whose medians are compared.
"""

from __future__ import annotations

import os
import random
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generator

import numpy as np
import torch

from llm.engine import EngineConfig, LLMEngine
from llm.gguf import version_file
from llm.prompts import caption_request
from llm.requests import RequestHandle
from llm.sampling import SamplingParams
from llm.scene_corpus import random_facts
from llm.serving import DEFAULT_LLM, llm_version, load_llm
from llm.tokenizer import Tokenizer
from models.repository import ModelRepository

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class LLMBenchOptions:
    quick: bool = False
    repository: Path = ROOT / "configs" / "models"
    model: str = DEFAULT_LLM
    num_requests: int = 40  # per trial at least; more at high rates, so that a trial spans trial_s of arrivals
    trial_s: float = 20.0
    min_tokens: int = 8
    max_tokens: int = 256
    max_batch: int = 32
    bound_factor: float = 4.0
    max_rate: float = 512.0  # requests/s; the search stops here
    device: str = "cpu"
    seed: int = 0
    peer: str | None = None  # "llamacpp": Vigil's engine beside llama.cpp's server, and nothing else

    def __post_init__(self) -> None:
        if self.peer not in PEERS:
            raise ValueError(f"peer must be one of {', '.join(p for p in PEERS if p)} or none; was {self.peer!r}")


PEERS = (None, "llamacpp")
# (system, the key of Vigil's tokens/s over its tokens/s) of each kind of run
OWN_RATIOS = (("hf_static", "ratio_vs_hf_static"), ("request_level", "ratio_vs_request_level"),
              ("no_prefix_cache", "ratio_vs_no_prefix_cache"))
PEER_RATIOS = (("llamacpp", "ratio_vs_llamacpp"),)


@dataclass
class Job:
    arrival_s: float
    prompt: list[int]
    num_out: int


def caption_ids(tokenizer: Tokenizer, facts) -> list[int]:
    prompt = caption_request(tokenizer, facts)
    return tokenizer.encode(prompt) if isinstance(prompt, str) else prompt


def workload(tokenizer, rate: float, n: int, opts: LLMBenchOptions) -> list[Job]:
    rng = random.Random(opts.seed)
    t, jobs = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        jobs.append(Job(t, caption_ids(tokenizer, random_facts(rng)), rng.randint(opts.min_tokens, opts.max_tokens)))
    return jobs


def reference_model(path: Path, device: str):
    """transformers' model of the same checkpoint (a GGUF through `gguf_file=`), in float32."""
    from transformers import AutoModelForCausalLM

    path = version_file(path)
    if path.suffix == ".gguf":
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    else:
        model = AutoModelForCausalLM.from_pretrained(path)
    return model.to(device).eval()


def run_vigil(engine: LLMEngine, jobs: list[Job]) -> tuple[list[float], float, int, list[float]]:
    """Returns per-request latency (s), makespan (s), generated tokens, per-request time
    to first token (s).

    The engine steps on the calling thread while a feeder thread submits the arrivals,
    as transformers' `generate` computes on the calling thread in (b). On a small CPU
    this matters: torch ops issued from a second thread run with OpenMP workers that
    sleep between ops (libgomp stops spinning once it has more threads than cores),
    which made every step of the same engine 1.6x slower than from the main thread."""
    t0 = time.perf_counter()
    handles: list[tuple[Job, RequestHandle]] = []

    def feed() -> None:
        for job in jobs:
            delay = t0 + job.arrival_s - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            params = SamplingParams(max_tokens=job.num_out, ignore_eos=True)
            handles.append((job, engine.add_request(job.prompt, params, stream=False)))

    feeder = threading.Thread(target=feed, name="bench-arrivals", daemon=True)
    feeder.start()
    while feeder.is_alive() or engine.has_work():
        if engine.has_work():
            engine.step()
        else:
            time.sleep(0.0005)
    feeder.join()
    latencies, tokens, firsts = [], 0, []
    for job, h in handles:
        out = h.result(60)
        latencies.append(h.request.last_token_s - h.request.arrival)
        firsts.append(h.request.first_token_s - h.request.arrival)
        tokens += len(h.request.output_ids)
        assert out.finish_reason == "length"
    makespan = time.perf_counter() - t0
    engine.close()
    return latencies, makespan, tokens, firsts


def run_hf_static(model, jobs: list[Job], max_batch: int, pad_id: int) -> tuple[list[float], float, int, list[float]]:
    """As `run_vigil`; a static batch returns its tokens at its end, so the first comes
    with the last."""
    device = model.device
    t0 = time.perf_counter()
    latencies, tokens, i = [], 0, 0
    while i < len(jobs):
        now = time.perf_counter() - t0
        if jobs[i].arrival_s > now:
            time.sleep(jobs[i].arrival_s - now)
            now = time.perf_counter() - t0
        batch = [j for j in jobs[i:i + max_batch] if j.arrival_s <= now]
        i += len(batch)
        width = max(len(j.prompt) for j in batch)
        ids = torch.full((len(batch), width), pad_id)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for k, j in enumerate(batch):  # left padding
            ids[k, width - len(j.prompt):] = torch.tensor(j.prompt)
            mask[k, width - len(j.prompt):] = 1
        longest = max(j.num_out for j in batch)
        with torch.inference_mode():
            model.generate(ids.to(device), attention_mask=mask.to(device), max_new_tokens=longest,
                           min_new_tokens=longest, do_sample=False, pad_token_id=pad_id)
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the batch is done when its last kernel is
        end = time.perf_counter() - t0
        for j in batch:
            latencies.append(end - j.arrival_s)
            tokens += j.num_out  # what each request asked for; the rest of the batch's work is waste
    return latencies, time.perf_counter() - t0, tokens, latencies


Search = Generator[float, dict, "dict | None"]
RETRY_MARGIN = 1.5  # a trial's p99 within this many bounds may be the machine's slow spell


def rate_search(start: float, bound_s: float, max_rate: float, bisections: int, retries: int) -> Search:
    """The highest rate whose trial's p99 is within `bound_s`: yields the rates to try,
    is sent each trial's result, returns the best trial (None if even start/8 breaks
    the bound). Halves `start` while it breaks the bound (up to three times), doubles
    while within it (up to `max_rate`), then bisects between the last rate within and
    the first beyond. A rate that breaks the bound by less than RETRY_MARGIN is tried
    `retries` more times (far beyond it, the queue grew: no fluke)."""

    def within(rate: float) -> Generator[float, dict, "dict | None"]:
        for _ in range(1 + retries):
            t = yield rate
            if t["p99_s"] <= bound_s:
                return t
            if t["p99_s"] > RETRY_MARGIN * bound_s:
                break
        return None

    rate = start
    for _ in range(4):
        best = yield from within(rate)
        if best is not None:
            break
        rate /= 2
    if best is None:
        return None
    good, bad = rate, None
    while rate * 2 <= max_rate:
        rate *= 2
        t = yield from within(rate)
        if t is None:
            bad = rate
            break
        best, good = t, rate
    for _ in range(bisections if bad is not None else 0):
        mid = (good + bad) / 2
        t = yield from within(mid)
        if t is None:
            bad = mid
        else:
            best, good = t, mid
    return best


def take_turns(searches: dict[str, Search], trial: Callable[[str, float], dict]) -> dict[str, "dict | None"]:
    """Runs the searches a trial each in turn, until each has its answer."""
    results: dict[str, dict | None] = {}
    rates: dict[str, float] = {}  # the rate each unfinished search asks for next

    def advance(name: str, result: dict | None) -> None:  # None starts a search
        try:
            rates[name] = searches[name].send(result)
        except StopIteration as done:
            results[name] = done.value
            rates.pop(name, None)

    for name in searches:
        advance(name, None)
    while rates:
        for name in list(rates):
            advance(name, trial(name, rates[name]))
    return {name: results[name] for name in searches}


def p99(xs: list[float]) -> float:
    return float(np.percentile(np.array(xs), 99))


def vigil_engine(opts: LLMBenchOptions, request_level: bool = False, prefix_caching: bool = True) -> LLMEngine:
    cfg = EngineConfig(num_blocks=2048, block_size=16, max_num_seqs=opts.max_batch, max_step_tokens=512,
                       request_level=request_level, prefix_caching=prefix_caching)
    return load_llm(opts.repository, opts.model, opts.device, cfg, adapters=False)  # the weights transformers runs


def own_systems(opts: LLMBenchOptions, path: Path) -> dict[str, Callable[[list[Job]], tuple]]:
    """Vigil's engine, its two ablations and transformers' static batching."""
    hf = reference_model(path, opts.device)
    pad_id = hf.config.pad_token_id if hf.config.pad_token_id is not None else (hf.config.bos_token_id or 0)
    return {
        "vigil": lambda jobs: run_vigil(vigil_engine(opts), jobs),
        "no_prefix_cache": lambda jobs: run_vigil(vigil_engine(opts, prefix_caching=False), jobs),
        "request_level": lambda jobs: run_vigil(vigil_engine(opts, request_level=True), jobs),
        "hf_static": lambda jobs: run_hf_static(hf, jobs, opts.max_batch, pad_id),
    }


def peer_systems(opts: LLMBenchOptions, path: Path, tok: Tokenizer, stack: ExitStack,
                 log: Callable[[str], None]) -> tuple[dict[str, Callable[[list[Job]], tuple]], dict]:
    """Vigil's engine and llama.cpp's server on the same GGUF file, with torch's thread
    count; the server stops when `stack` closes. Also what the result says of the peer."""
    from bench.llamacpp_peer import N_CTX, LlamaCppServer, check_prompts, control_token_bias, run_llamacpp

    gguf = version_file(path)
    if gguf.suffix != ".gguf":
        raise ValueError(f"--peer llamacpp serves a GGUF file; {opts.model} has none ({gguf}): "
                         f"try --llm smollm2-135m-instruct")
    if opts.device != "cpu":
        raise ValueError(f"--peer llamacpp runs on the CPU (`make llamacpp` builds it without CUDA); "
                         f"was --device {opts.device}: pass --device cpu")
    num_threads = torch.get_num_threads()
    server = stack.enter_context(LlamaCppServer(gguf, num_threads, N_CTX))
    log(f"llama.cpp server on {gguf.name}, {num_threads} threads: {server.url} (log {server.log_path})")

    def to_text(ids: list[int]) -> str:  # special tokens written out: the server's tokenizer reads them back
        return tok.hf.decode(ids, skip_special_tokens=False)

    check_prompts(server, [j.prompt for j in workload(tok, 1.0, 8, opts)], to_text)
    bias = control_token_bias(gguf)
    systems = {"vigil": lambda jobs: run_vigil(vigil_engine(opts), jobs),
               "llamacpp": lambda jobs: run_llamacpp(server, jobs, to_text, bias)}
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None  # a `taskset` shows here
    return systems, {"peer": opts.peer, "gguf": gguf.name, "num_threads": num_threads, "cpus": cpus}


def run_llm_bench(opts: LLMBenchOptions, log: Callable[[str], None] = print) -> dict:
    if opts.peer == "llamacpp":
        from bench.llamacpp_peer import require_llamacpp

        require_llamacpp()  # before anything loads: one line that says how to install it
    torch.manual_seed(opts.seed)
    path = llm_version(ModelRepository(opts.repository), opts.model)
    tok = Tokenizer(path)  # the bench only encodes prompts
    with ExitStack() as stack:
        if opts.peer:
            systems, about = peer_systems(opts, path, tok, stack, log)
            return measure(systems, tok, opts, log, PEER_RATIOS, about)
        return measure(own_systems(opts, path), tok, opts, log, OWN_RATIOS, {})


def measure(systems: dict[str, Callable[[list[Job]], tuple]], tok: Tokenizer, opts: LLMBenchOptions,
            log: Callable[[str], None], ratios: tuple[tuple[str, str], ...], about: dict) -> dict:
    """The bound from each system's time alone, then the rate searches, taking turns."""
    n = 16 if opts.quick else opts.num_requests
    alone_job = [Job(0.0, workload(tok, 1.0, 1, opts)[0].prompt, opts.max_tokens)]
    for run in systems.values():
        run(alone_job)  # warm-up: first calls, allocator, kernels
    runs: dict[str, list[tuple]] = {name: [] for name in systems}
    for _ in range(3):  # in turns, as the searches, so that a slow spell of the machine falls on all alike
        for name, run in systems.items():
            runs[name].append(run(alone_job))
    alone, decode_tps = {}, {}
    for name, mine in runs.items():
        alone[name] = float(np.median([lats[0] for lats, *_ in mine]))  # the bound hangs on it
        if about:  # both systems stream; a static batch has no decode of its own to time
            decode_tps[name] = float(np.median([(opts.max_tokens - 1) / (lats[0] - firsts[0])
                                                for lats, _, _, firsts in mine]))
    bound_s = opts.bound_factor * max(alone.values())
    log(f"one {opts.max_tokens}-token request alone: "
        + ", ".join(f"{k} {v:.2f} s" for k, v in alone.items()) + f"; p99 bound {bound_s:.2f} s")

    prompt_tokens = [len(j.prompt) for j in workload(tok, 1.0, 32, opts)]
    out: dict = {"model": opts.model, "device": opts.device, **about, "min_requests_per_trial": n,
                 "trial_s": opts.trial_s, "max_batch": opts.max_batch,
                 "output_tokens": [opts.min_tokens, opts.max_tokens],
                 "prompt_tokens": [min(prompt_tokens), max(prompt_tokens)],
                 "alone_s": {k: round(v, 3) for k, v in alone.items()}, "p99_bound_s": round(bound_s, 3),
                 "systems": {}}
    if decode_tps:
        out["decode_tokens_per_s"] = {k: round(v, 1) for k, v in decode_tps.items()}
        log("decode alone: " + ", ".join(f"{k} {v:.1f} tokens/s" for k, v in decode_tps.items()))
    trials: dict[str, list[dict]] = {name: [] for name in systems}

    def trial(name: str, rate: float) -> dict:
        size = n if opts.quick else max(n, round(rate * opts.trial_s))
        lats, span, tokens, firsts = systems[name](workload(tok, rate, size, opts))
        t = {"rate_per_s": round(rate, 3), "requests": size, "p99_s": round(p99(lats), 3),
             "tps": round(tokens / span, 1), "mean_ttft_s": round(float(np.mean(firsts)), 4)}
        trials[name].append(t)
        log(f"  {name:16s} rate {rate:6.2f}/s ({size} requests): p99 {t['p99_s']:.2f} s, {t['tps']:.0f} tokens/s, "
            f"mean TTFT {t['mean_ttft_s'] * 1000:.0f} ms")
        return t

    # One request per unloaded service time is a light load; below the rate at which a trial's
    # n requests arrive within trial_s, a trial of a slow model takes many minutes (SmolLM2
    # here: 40 requests at 0.1/s), and the search halves from there while the bound breaks.
    start = max(1.0 / alone["vigil"], n / opts.trial_s)
    max_rate = opts.max_rate
    if opts.quick:
        # A quick trial is n requests however slow the model: past the rate at which they all
        # arrive within one request's time alone, a trial is the same burst again.
        max_rate = min(max_rate, max(start, n / min(alone.values())))
    out["search"] = {"bisections": 0 if opts.quick else 3, "retries": 0 if opts.quick else 1}
    searches = {name: rate_search(start, bound_s, max_rate, **out["search"]) for name in systems}
    for name, best in take_turns(searches, trial).items():
        out["systems"][name] = {"best": best, "trials": trials[name]}
    best = {k: v["best"] or {"tps": 0.0, "p99_s": None, "rate_per_s": 0.0} for k, v in out["systems"].items()}
    for name in systems:
        out[f"{name}_tps"] = best[name]["tps"]
        out[f"{name}_p99_ms"] = _ms(best[name]["p99_s"])
    for name, key in ratios:
        out[key] = round(out["vigil_tps"] / out[f"{name}_tps"], 2) if out[f"{name}_tps"] else None
    if decode_tps:
        peer = ratios[0][0]
        out[f"decode_ratio_vs_{peer}"] = round(decode_tps["vigil"] / decode_tps[peer], 2)
    if "no_prefix_cache" in systems:
        out["ttft_at_same_rate"] = same_rate_ttft(best["no_prefix_cache"], trial)
    return out


def same_rate_ttft(without: dict, trial: Callable[[str, float], dict]) -> dict | None:
    """The engine with the cache at the rate the engine without it reached: both mean
    times to first token, and how many times lower it is with the cache."""
    if not without.get("rate_per_s"):
        return None
    with_cache = trial("vigil", without["rate_per_s"])
    return {"rate_per_s": without["rate_per_s"], "with_cache_ms": _ms(with_cache["mean_ttft_s"]),
            "without_ms": _ms(without["mean_ttft_s"]),
            "ratio": round(without["mean_ttft_s"] / with_cache["mean_ttft_s"], 2) if with_cache["mean_ttft_s"] else None}


def _ms(s: float | None) -> float | None:
    return None if s is None else round(s * 1000.0, 1)


def format_llm_report(r: dict) -> str:
    rows = [f"LLM serving, {r['model']}: throughput at p99 <= {r['p99_bound_s']:.2f} s "
            f"(prompts {r['prompt_tokens'][0]}-{r['prompt_tokens'][1]} tokens, outputs {r['output_tokens'][0]}-"
            f"{r['output_tokens'][1]} tokens, Poisson arrivals)",
            f"{'system':18s}{'rate/s':>8s}{'tokens/s':>10s}{'p99 ms':>10s}{'TTFT ms':>10s}"]
    for name, system in r["systems"].items():
        b = system["best"] or {}
        rows.append(f"{name:18s}{b.get('rate_per_s', 0):8.2f}{b.get('tps', 0):10.1f}"
                    f"{(b.get('p99_s') or 0) * 1000:10.0f}{(b.get('mean_ttft_s') or 0) * 1000:10.0f}")
    rows.append(", ".join(f"{key} {r[key]}" for key in r if key.startswith("ratio_vs_")))
    if "decode_tokens_per_s" in r:
        peer = r["peer"]
        rows.append("one request alone, decode: " + ", ".join(f"{k} {v} tokens/s" for k, v in
                                                               r["decode_tokens_per_s"].items())
                    + f" (decode_ratio_vs_{peer} {r[f'decode_ratio_vs_{peer}']})")
    same = r.get("ttft_at_same_rate")
    if same:
        rows.append(f"mean TTFT at {same['rate_per_s']}/s: {same['with_cache_ms']} ms with the prefix cache, "
                    f"{same['without_ms']} ms without ({same['ratio']}x)")
    return "\n".join(rows)
