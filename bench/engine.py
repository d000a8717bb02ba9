"""`vigil bench engine`: scheduling policies side by side, in one process and one run.

Models are torchvision ResNet-18s at a small input (timing only: weights are seeded
random numbers written to a temporary repository, all models sharing one backbone and
each with its own head, like heads fine-tuned on a common feature extractor). Every
policy runs over the same executor; the baselines serve each model on its own (no
prefix sharing, as TF Serving and Clipper would), Vigil's `nexus` shares prefixes.
Ray Serve with `@serve.batch` serves the same model as a real peer when Ray is
installed (`pip install 'ray[serve]'`), and so does NVIDIA Triton's dynamic batcher
when its venv exists (`make triton-venv`; bench/triton_peer.py).

Scenarios (JSON keys):
- single: one app, one model, Poisson arrivals. `goodput` per policy (requests/s at
  which >= 99% meet the SLO), `ratio_vs_best_baseline`, `bound` (the best throughput
  the profile allows: max b/l(b) with l(b) <= SLO), `fraction_of_bound`.
- shared_backbone: one camera, four apps whose models share the backbone, bursty
  arrivals. `goodput` in frames/s per policy, `ratio_vs_best_baseline`.
- overload: a high-priority app (60% of capacity) and a low-priority app (140%) on two
  models: `high_attainment`, `low_admitted_attainment`, `low_dropped`, `rss_growth`.
- swap: steady load at half capacity while three new versions replace the serving one:
  `failed_requests` (errors and unavailable; deadline drops are reported apart).
- selection: the bundled SceneDet (version 1 small, 2 accurate) on street frames, load
  ramping from 0.5x to 2x version 2's capacity; adaptive selection against each version
  alone: `*_attainment` and `*_map` (the held-out mAP of the versions that served,
  weighted by how many requests each served).
- contended (`--contended`): single and shared_backbone again, with `hogs` busy
  processes at nice 10 beside the engine (bench/hogs.py), twice: profiles measured
  under the hogs and served quiet (`measured_busy_served_quiet`: the profile is too
  slow), and measured quiet and served under the hogs (`measured_quiet_served_busy`:
  too fast). Goodput per policy and the Nexus/best-baseline ratio of each. Then
  `hogs_end`: Nexus on `single` at its quiet goodput beside the hogs, and each second's
  goodput as a share of quiet once they end (`recovered_within_s`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import yaml

from bench.hogs import MAX_HOGS, NICE, Hogs, default_hogs
from bench.workload import EngineTarget, Stream, run_trial, search_goodput
from engine.engine import Engine
from models.repository import ModelRepository

BASELINES = ("tfs", "clipper", "nobatch")
SCENARIOS = ("single", "shared_backbone", "overload", "swap", "selection", "contended")


@dataclass(frozen=True)
class EngineBenchOptions:
    quick: bool = False
    device: str = "cpu"
    scenarios: tuple[str, ...] = SCENARIOS
    arch: str = "resnet18"
    input_size: int = 112
    slo_ms: float = 250.0
    ray: bool = True
    triton: bool = True  # when the Triton venv exists (make triton-venv)
    trial_s: float = field(default=0.0)  # 0: 3 s quick, 8 s full
    search_steps: int = field(default=0)  # 0: 4 quick, 6 full
    seed: int = 0
    hogs: int = field(default_factory=default_hogs)  # busy processes in the contended scenario

    def __post_init__(self) -> None:
        if not 1 <= self.hogs <= MAX_HOGS:
            raise ValueError(f"hogs must be 1 to {MAX_HOGS}; was {self.hogs}")

    @property
    def trial(self) -> float:
        return self.trial_s or (3.0 if self.quick else 8.0)

    @property
    def steps(self) -> int:
        return self.search_steps or (4 if self.quick else 6)


# -- the repository ---------------------------------------------------------------------------
def write_models(root: Path, arch: str, size: int, heads: int, extra_backbones: int = 1) -> None:
    """Models m0..m{heads-1} share one backbone; o0.. have backbones of their own."""
    import torch
    import torchvision

    torch.manual_seed(0)
    base = torchvision.models.get_model(arch, weights=None, num_classes=10).state_dict()
    names = [(f"m{k}", 0, k) for k in range(heads)] + [(f"o{k}", k + 1, 100 + k) for k in range(extra_backbones)]
    for name, backbone_seed, head_seed in names:
        torch.manual_seed(backbone_seed)
        state = torchvision.models.get_model(arch, weights=None, num_classes=10).state_dict() \
            if backbone_seed else dict(base)
        torch.manual_seed(1000 + head_seed)
        head = torchvision.models.get_model(arch, weights=None, num_classes=10).state_dict()
        state.update({k: v for k, v in head.items() if k.startswith("fc.")})
        write_version(root, name, 1, arch, size, state)


def write_version(root: Path, name: str, version: int, arch: str, size: int, state: dict) -> None:
    import torch

    folder = root / name / str(version)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state, folder / "model.pt")
    spec = {"name": name, "adapter": "torchvision", "arch": arch, "config": {"num_classes": 10},
            "weights": "model.pt", "split": ["backbone", "head"], "output": "classification",
            "input": {"size": [size, size], "pad_to": 1, "profile_frame": [size, size]},
            "batch_sizes": [1, 2, 4, 8, 16, 32]}
    (folder / "model.yaml").write_text(yaml.safe_dump(spec))


def bound(engine: Engine, model: str, slo_ms: float) -> float:
    """max over b of b / l(b) with l(b) <= SLO, where l sums the model's fragments."""
    profiles = engine.fragment_profiles(model)
    best = 0.0
    for b in range(1, profiles[0].max_batch + 1):
        latency = sum(p.latency_ms(b) for p in profiles)
        if latency <= slo_ms:
            best = max(best, b * 1000.0 / latency)
    return best


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


# -- scenarios ------------------------------------------------------------------------------------
class Bench:
    def __init__(self, options: EngineBenchOptions, root: Path, log=print) -> None:
        self.o = options
        self.root = root
        self.log = log
        rng = np.random.default_rng(options.seed)
        s = options.input_size
        self.frames = {name: rng.integers(0, 255, (s, s, 3), dtype=np.uint8) for name in ("cam", "hi", "lo", "cap")}
        # what runs beside the engine while it measures its profiles, and while it serves
        self.measuring: AbstractContextManager = nullcontext()
        self.serving: AbstractContextManager = nullcontext()

    def engine(self, policy: str, models: list[str]) -> Engine:
        engine = Engine(ModelRepository(self.root), self.o.device, policy=policy, share=(policy == "nexus"))
        with self.measuring:
            for m in models:
                engine.load(m)
        return engine

    def goodput(self, engine: Engine, make_streams, hi: float, frames: dict | None = None) -> float:
        target = EngineTarget(engine, frames or self.frames)

        def attainment(rate: float) -> float:
            result = run_trial(target, make_streams(rate), self.o.trial, seed=self.o.seed)
            self.log(f"    rate {rate:7.1f}/s: attainment {result.attainment():.3f}")
            return result.attainment()

        with self.serving:
            # A warm-up at half the upper rate first: adaptive policies (Clipper's AIMD, the
            # engine's observed latencies) start each search from the same learned state.
            run_trial(target, make_streams(0.5 * hi), max(2.0, self.o.trial / 2), seed=self.o.seed + 99)
            return search_goodput(attainment, hi, self.o.steps, retries=0 if self.o.quick else 1)

    def single(self) -> dict:
        slo = self.o.slo_ms
        goodput, b = {}, None
        for policy in ("nexus",) + BASELINES:
            self.log(f"  single/{policy}")
            with self.engine(policy, ["m0"]) as engine:
                b = b or bound(engine, "m0", slo)
                goodput[policy] = round(self.goodput(
                    engine, lambda r: [Stream("cam", (("app", "m0"),), r, slo)], 1.15 * b), 2)
        if self.o.ray:
            from bench.ray_peer import ray_goodput

            self.log("  single/ray_serve")
            goodput["ray_serve"] = ray_goodput(self.root / "m0" / "1", self.o, self.frames["cam"], 1.15 * b, self.log)
        if self.o.triton:
            from bench.triton_peer import triton_goodput

            self.log("  single/triton")
            goodput["triton"] = triton_goodput(self.root / "m0" / "1", self.o, self.frames["cam"], 1.15 * b, self.log)
        best = max(goodput[p] for p in BASELINES)
        out = {"slo_ms": slo, "goodput": goodput, "bound": round(b, 2),
               "ratio_vs_best_baseline": round(goodput["nexus"] / best, 3) if best else None,
               "fraction_of_bound": round(goodput["nexus"] / b, 3) if b else None}
        for peer in ("ray_serve", "triton"):
            if goodput.get(peer):
                out[f"ratio_vs_{peer}"] = round(goodput["nexus"] / goodput[peer], 3)
        return out

    def shared_backbone(self) -> dict:
        slo, apps = self.o.slo_ms, tuple((f"app{k}", f"m{k}") for k in range(4))
        goodput, b = {}, None
        for policy in ("nexus",) + BASELINES:
            self.log(f"  shared_backbone/{policy}")
            with self.engine(policy, [m for _, m in apps]) as engine:
                b = b or bound(engine, "m0", slo)  # one model's bound: the most frames sharing can give
                goodput[policy] = round(self.goodput(
                    engine, lambda r: [Stream("cam", apps, r, slo, bursty=True)], 1.15 * b), 2)
        if self.o.triton:
            from bench.triton_peer import triton_goodput

            self.log("  single/triton")
            goodput["triton"] = triton_goodput(self.root / "m0" / "1", self.o, self.frames["cam"], 1.15 * b, self.log)
        best = max(goodput[p] for p in BASELINES)
        return {"slo_ms": slo, "apps": len(apps), "goodput_frames_per_s": goodput,
                "ratio_vs_best_baseline": round(goodput["nexus"] / best, 3) if best else None}

    def contended(self) -> dict:
        out: dict = {"hogs": self.o.hogs, "nice": NICE}
        options = self.o
        for name, measuring, serving in (("measured_busy_served_quiet", Hogs(self.o.hogs), nullcontext()),
                                         ("measured_quiet_served_busy", nullcontext(), Hogs(self.o.hogs))):
            self.log(f"  contended: {name.replace('_', ' ')}")
            for profiles in self.root.glob("*/*/profiles"):  # each engine measures afresh, as named
                shutil.rmtree(profiles)
            self.measuring, self.serving = measuring, serving
            self.o = replace(options, ray=False, triton=False)  # the peers are measured quiet only
            try:
                single, shared = self.single(), self.shared_backbone()
            finally:
                self.measuring, self.serving, self.o = nullcontext(), nullcontext(), options
            out[name] = {"single": {k: single[k] for k in ("goodput", "bound", "ratio_vs_best_baseline")},
                         "shared_backbone": {k: shared[k] for k in ("goodput_frames_per_s", "ratio_vs_best_baseline")}}
        out["hogs_end"] = self.hogs_end()
        return out

    def hogs_end(self, seconds: int = 10) -> dict:
        """Nexus on `single` at its quiet goodput: ten seconds beside the hogs, then, once
        they end, each second's goodput as a share of the quiet one."""
        self.log("  contended: after the hogs end")
        with self.engine("nexus", ["m0"]) as engine:
            def streams(rate: float) -> list[Stream]:
                return [Stream("cam", (("app", "m0"),), rate, self.o.slo_ms)]

            quiet = self.goodput(engine, streams, 1.15 * bound(engine, "m0", self.o.slo_ms))
            target = EngineTarget(engine, self.frames)
            with Hogs(self.o.hogs):
                busy = run_trial(target, streams(quiet), 10.0, seed=self.o.seed + 5).attainment()
            shares = [round(run_trial(target, streams(quiet), 1.0, seed=self.o.seed + 10 + k,
                                      warmup_s=0.0).attainment(), 3) for k in range(seconds)]
        return {"quiet_goodput": round(quiet, 2), "attainment_beside_hogs": round(busy, 4),
                "share_of_quiet_by_second": shares, "recovered_within_s": recovered_within(shares)}

    def measured_capacity(self, engine: Engine, model: str, slo_ms: float, version=None,
                          frames: dict | None = None) -> float:
        """The model's goodput alone under nexus: the capacity loads are scaled from."""
        hi = 1.15 * bound(engine, model, slo_ms)
        return self.goodput(engine, lambda r: [Stream("cap", (("cap", model),), r, slo_ms, version=version)], hi,
                            frames)

    def overload(self) -> dict:
        slo = self.o.slo_ms
        with self.engine("nexus", ["m0", "o0"]) as engine:
            self.log("  overload: measuring capacity")
            capacity = self.measured_capacity(engine, "m0", slo)
            streams = [Stream("hi", (("high", "m0"),), 0.6 * capacity, slo, priority=5),
                       Stream("lo", (("low", "o0"),), 1.4 * capacity, slo * 2, priority=0)]
            target = EngineTarget(engine, self.frames)
            run_trial(target, streams, max(2.0, self.o.trial / 2), seed=self.o.seed + 1)  # warm-up
            before = rss_mb()
            result = run_trial(target, streams, self.o.trial * 2, seed=self.o.seed + 2)
            after = rss_mb()
        return {"capacity_per_s": round(capacity, 2), "offered": "2x capacity (60% high, 140% low)",
                "high_attainment": round(result.attainment("high"), 4),
                "low_admitted_attainment": round(result.admitted_attainment("low"), 4),
                "low_dropped": result.dropped("low"), "low_arrived": result.arrived.get("low", 0),
                "outcomes": result.outcomes,
                "rss_mb": [round(before, 1), round(after, 1)], "rss_growth": round((after - before) / before, 4)}

    def swap(self) -> dict:
        import torch

        slo = self.o.slo_ms
        (self.root / "sw").mkdir(exist_ok=True)
        state = torch.load(self.root / "m0" / "1" / "model.pt", weights_only=True)
        write_version(self.root, "sw", 1, self.o.arch, self.o.input_size, state)
        (self.root / "sw" / "model_config.yaml").write_text(yaml.safe_dump({"version_policy": {"latest": 1}}))
        with self.engine("nexus", ["sw"]) as engine:
            rate = 0.5 * bound(engine, "sw", slo)
            duration = max(6.0, self.o.trial * 2)
            swaps: list[threading.Thread] = []

            def swap_to(version: int) -> None:
                torch.manual_seed(version)
                fc = torch.nn.Linear(512, 10).state_dict()
                write_version(self.root, "sw", version, self.o.arch, self.o.input_size,
                              {**state, "fc.weight": fc["weight"], "fc.bias": fc["bias"]})
                engine.reload("sw")

            def during(elapsed_s: float) -> None:
                due = int(elapsed_s / duration * 4)  # at 1/4, 2/4 and 3/4 of the trial
                if len(swaps) < min(due, 3):
                    t = threading.Thread(target=swap_to, args=(len(swaps) + 2,))
                    swaps.append(t)
                    t.start()

            result = run_trial(EngineTarget(engine, self.frames), [Stream("cam", (("app", "sw"),), rate, slo)],
                               duration, seed=self.o.seed + 3, warmup_s=0.0, during=during)
            for t in swaps:
                t.join()
            serving = engine.versions("sw")
        outcomes = result.outcomes.get("app", {})
        failed = sum(n for k, n in outcomes.items() if k not in ("ok", "late", "deadline"))
        return {"swaps": len(swaps), "serving_after": serving, "requests": result.arrived.get("app", 0),
                "failed_requests": failed, "deadline_drops": outcomes.get("deadline", 0),
                "attainment": round(result.attainment(), 4)}


    def selection(self) -> dict:
        from vigil.settings import MODELS_DIR

        repo = ModelRepository(MODELS_DIR)
        quality = {v: repo.spec("scenedet", v).quality for v in repo.versions("scenedet")}
        frames = _street_frames(8)
        slo = 500.0
        out: dict = {"slo_ms": slo, "quality": quality}
        with Engine(repo, self.o.device) as engine:
            engine.load("scenedet", [1, 2])
            target = EngineTarget(engine, {"cam": frames[0], "cap": frames[0]})
            self.log("  selection: measuring version 2's capacity")
            cap2 = self.measured_capacity(engine, "scenedet", slo, version=2, frames={"cap": frames[0]})
            out["v2_capacity_per_s"] = round(cap2, 2)
            for name, version in (("adaptive", "adaptive"), ("v2_only", 2), ("v1_only", 1)):
                self.log(f"  selection/{name}")
                stream = Stream("cam", (("app", "scenedet"),), 0.5 * cap2, slo, rate_end=2.0 * cap2, version=version)
                result = run_trial(target, [stream], max(6.0, self.o.trial * 2), seed=self.o.seed + 4)
                served = result.versions.get("app", {})
                total = sum(served.values()) or 1
                out[f"{name}_attainment"] = round(result.attainment(), 4)
                out[f"{name}_map"] = round(sum(n * (quality[v] or 0.0) for v, n in served.items()) / total, 4)
                out[f"{name}_served"] = {str(v): n for v, n in sorted(served.items())}
            out["switches"] = [e for e in engine.selections() if e["app"] == "app"]
        return out


def recovered_within(shares: list[float], floor: float = 0.9) -> int | None:
    """Seconds until goodput is back to `floor` of quiet and stays there (None: not in
    the seconds measured)."""
    for k in range(len(shares)):
        if all(s >= floor for s in shares[k:]):
            return k + 1
    return None


def _street_frames(n: int) -> list[np.ndarray]:
    from sample_videos.render import RenderConfig, Renderer

    return [f.image for _, f in zip(range(n), Renderer(RenderConfig(seed=9100)).frames(every=15))]


def run_engine_bench(options: EngineBenchOptions, log=print) -> dict:
    import torch

    unknown = set(options.scenarios) - set(SCENARIOS)
    if unknown:
        raise ValueError(f"unknown scenarios {sorted(unknown)}; use {list(SCENARIOS)}")
    started = time.perf_counter()
    result: dict = {"device": options.device, "torch_threads": torch.get_num_threads(), "arch": options.arch,
                    "input_size": options.input_size, "quick": options.quick, "trial_s": options.trial,
                    "search_steps": options.steps}
    with tempfile.TemporaryDirectory(prefix="vigil-bench-") as tmp:
        root = Path(tmp)
        log(f"writing benchmark models ({options.arch}, {options.input_size}px) ...")
        write_models(root, options.arch, options.input_size, heads=4)
        bench = Bench(options, root, log)
        for name in options.scenarios:
            log(f"scenario {name}")
            result[name] = getattr(bench, name)()
    result["wall_s"] = round(time.perf_counter() - started, 1)
    return result


def format_report(result: dict) -> str:
    lines = ["| scenario | measure | value |", "|---|---|---|"]
    if "single" in result:
        s = result["single"]
        for policy, g in s["goodput"].items():
            lines.append(f"| single | goodput {policy} (req/s) | {g} |")
        lines += [f"| single | ratio_vs_best_baseline | {s['ratio_vs_best_baseline']} |",
                  f"| single | fraction_of_bound | {s['fraction_of_bound']} |"]
        for peer in ("ray_serve", "triton"):
            if f"ratio_vs_{peer}" in s:
                lines.append(f"| single | nexus / {peer} | {s[f'ratio_vs_{peer}']} |")
    if "shared_backbone" in result:
        s = result["shared_backbone"]
        for policy, g in s["goodput_frames_per_s"].items():
            lines.append(f"| shared_backbone | goodput {policy} (frames/s, 4 apps) | {g} |")
        lines.append(f"| shared_backbone | ratio_vs_best_baseline | {s['ratio_vs_best_baseline']} |")
    if "overload" in result:
        s = result["overload"]
        for k in ("high_attainment", "low_admitted_attainment", "low_dropped", "rss_growth"):
            lines.append(f"| overload | {k} | {s[k]} |")
    if "swap" in result:
        s = result["swap"]
        for k in ("swaps", "failed_requests", "deadline_drops"):
            lines.append(f"| swap | {k} | {s[k]} |")
    if "contended" in result:
        c = result["contended"]
        if "hogs_end" in c:
            h = c["hogs_end"]
            lines.append(f"| contended, {c['hogs']} busy: hogs end | nexus goodput share of quiet, second by "
                         f"second | {h['share_of_quiet_by_second']} (back to 0.9 in {h['recovered_within_s']} s) |")
        for case in ("measured_busy_served_quiet", "measured_quiet_served_busy"):
            if case not in c:
                continue
            for scenario, key in (("single", "goodput"), ("shared_backbone", "goodput_frames_per_s")):
                s = c[case][scenario]
                goodput = ", ".join(f"{p} {g}" for p, g in s[key].items())
                lines.append(f"| contended, {c['hogs']} busy: {case} | {scenario} goodput | {goodput} |")
                lines.append(f"| contended, {c['hogs']} busy: {case} | {scenario} ratio_vs_best_baseline | "
                             f"{s['ratio_vs_best_baseline']} |")
    if "selection" in result:
        s = result["selection"]
        for k in ("adaptive_attainment", "v2_only_attainment", "v1_only_attainment", "adaptive_map", "v1_only_map"):
            lines.append(f"| selection | {k} | {s[k]} |")
    return "\n".join(lines)
