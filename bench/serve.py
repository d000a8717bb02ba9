"""`vigil bench serve`: the served path under growing load, beside the engine alone.

For each N (1, 2, 4, 8, 16) a fresh `vigil serve` runs N looping bundled clips, each
with a people counter (SceneDet, person head, 1 s SLO; with `detector: coco`, the
pretrained COCO detector on OpenCV's vtest.avi, real footage, where it is installed); the first app has priority
10 and samples 5 frames a second, the others priority 0, every frame, with `min_fps`
so that load control can shed their rate. After a
warm-up, one window measures, from the server's own metrics: goodput (frames within
their SLO per second, all apps), the high-priority app's attainment and the others'
(over the frames whose outcome fell in the window; drops count as misses), p99 over
every arrival, the server's RSS and CPU, and the share of the machine's CPU that the
hypervisor stole in the window (vigil/provenance.py). The allocator the server ran with is
reported too (vigil/allocator.py). With several `allocators` (`auto`, `jemalloc`,
`mimalloc`, `system`), every N runs under each, in turn, and `goodput_vs_first` gives
each one's best goodput over the first one's.

The bound is the same model run through the engine alone in this process, in the
same run: frames of the same clips, preprocessed and batched as the engine batches
them with no deadline, at its best frames/s. `served_vs_bound` is the best goodput
over that bound; `overload_retention` is the goodput at the largest N over the best.

With captions (`captions_n`), those counts run again with scene-lm captioning every
stream: captions per minute, the LLM steps the schedule granted (by share and in
slack), and vision's goodput and priority attainment with captions on over off.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from concurrent.futures import wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import httpx
import yaml

from bench.launch import Launched, free_ports
from engine.machine_load import cpu_times, process_ticks
from vigil.allocator import in_use
from vigil.provenance import steal_share
from vigil.settings import MODELS_DIR, ROOT, SAMPLES_DIR

CLIPS = sorted(SAMPLES_DIR.glob("*.mp4"))
SLO_MS = 1000.0
HIGH_FPS = 5.0  # the priority camera samples this; the others every frame (15 a second)
LOW_MIN_FPS = 3.0
CAPTION_EVERY_S = 5.0  # with captions on: each stream's caption this often


@dataclass(frozen=True)
class ServeBenchOptions:
    counts: tuple[int, ...] = (1, 2, 4, 8, 16)
    warmup_s: float = 20.0
    window_s: float = 40.0
    device: str = "cpu"
    bound_s: float = 15.0
    captions_n: tuple[int, ...] = (1, 4)  # the counts measured again with captions on (none: skip)
    detector: str = "scenedet"  # the people counters' model: scenedet on the bundled clips, or coco
    allocators: tuple[str, ...] = ("auto",)  # the server's VIGIL_ALLOCATOR; the first is the headline

    def __post_init__(self) -> None:
        from vigil.allocator import CHOICES

        if not self.allocators or not set(self.allocators) <= set(CHOICES) or \
                len(set(self.allocators)) != len(self.allocators):
            raise ValueError(f"allocators must be distinct choices of {', '.join(CHOICES)}; were {self.allocators}")
        if not self.counts or min(self.counts) < 1 or max(self.counts) > 64:
            raise ValueError(f"counts must be between 1 and 64 streams; were {self.counts}")
        if not (0 < self.window_s <= 3600 and 0 <= self.warmup_s <= 3600 and 0 < self.bound_s <= 600):
            raise ValueError("window_s in (0, 3600], warmup_s in [0, 3600] and bound_s in (0, 600]")
        if self.detector not in ("scenedet", "coco"):
            raise ValueError(f"detector must be scenedet or coco; was {self.detector!r}")

    def clips(self) -> list[Path]:
        """SceneDet's bundled clips, or for coco real footage (a synthetic clip would say
        nothing of a detector trained on real scenes)."""
        if self.detector == "scenedet":
            return CLIPS
        from sample_videos.footage import FETCH, PLACES

        found = [p for p in PLACES["vtest"] if p.is_file()][:1]
        if not found:
            raise ValueError(f"the serve bench runs coco on vtest.avi: {FETCH['vtest']}")
        return found


class _Server:
    """`vigil serve` in its own process, the way a user starts it (the vision path; with
    `captions`, scene-lm captions every stream too; with `cluster`, its engine on the
    Ray cluster at that address, and its streams and apps in actors there unless not
    `actors`)."""

    def __init__(self, workdir: Path, device: str, captions: bool = False, cluster: str | None = None,
                 actors: bool = True, allocator: str = "auto", clips: list[Path] = ()) -> None:
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "vigil.yaml"
        llm = {"llm_model": "scene-lm", "caption_every_s": CAPTION_EVERY_S} if captions else \
            {"llm_model": None, "caption_every_s": 0}
        on = {"cluster": {"address": cluster, "actors": actors}} if cluster else {}
        media = [str(SAMPLES_DIR), *{str(p.parent) for p in clips}]
        config.write_text(yaml.safe_dump({**llm, "limits": {"media_dirs": media}, **on}))
        self.server = Launched("vigil serve", [sys.executable, "-m", "cli", "serve", "--config", str(config),
                                               "--port", str(self.port), "--grpc-port", "0", "--data-dir",
                                               str(workdir / "data"), "--device", device,
                                               *(["--cluster", cluster] if cluster else [])],
                               ROOT, workdir / "serve.log", f"{self.url}/readyz", 120,
                               env={"VIGIL_ALLOCATOR": allocator})
        self.proc = self.server.proc

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
        return 0.0

    def cpu_s(self) -> float:
        ticks = process_ticks(self.proc.pid)
        if ticks is None:
            raise RuntimeError(f"cannot read the CPU time of vigil serve (pid {self.proc.pid}): it has exited")
        return ticks / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.server.stop()


def _app_spec(i: int, detector: str) -> dict:
    spec = {"name": f"cam{i}", "source": f"cam{i}", "detector": detector, "classes": ["person"], "slo_ms": SLO_MS,
            "priority": 10 if i == 0 else 0}
    if i == 0:
        spec["fps"] = HIGH_FPS
    else:
        spec["min_fps"] = LOW_MIN_FPS
    return spec


def _totals(api: httpx.Client, n: int) -> list[dict]:
    return [api.get(f"/v1/apps/cam{i}/metrics").json() for i in range(n)]


def _caption_ids(api: httpx.Client) -> set[int]:
    r = api.get("/v1/captions", params={"limit": 1000})
    return {c["id"] for c in r.json()["captions"]} if r.status_code == 200 else set()


def settled(before: dict, after: dict) -> int:
    """An app's frames whose outcome (a result, late or in time, or a drop) fell between
    two readings of its metrics. Attainment over these never exceeds 1, as it would over
    the window's arrivals when frames that arrived before it complete inside it."""
    dropped = sum(after["dropped"].values()) - sum(before["dropped"].values())
    return after["completed"] - before["completed"] + dropped


def measure_point(n: int, options: ServeBenchOptions, log: Callable[[str], None], captions: bool = False,
                  cluster: str | None = None, actors: bool = True, allocator: str | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="vigil-bench-serve-") as tmp:
        clips = options.clips()
        server = _Server(Path(tmp), options.device, captions, cluster, actors, allocator or options.allocators[0],
                         clips)
        try:
            with httpx.Client(base_url=server.url, timeout=60) as api:
                # loaded (and on a fresh clone profiled) before any stream decodes: a
                # profile measured beside the decoders would plan for a slower device
                api.post(f"/v1/models/{options.detector}/load", json={}, timeout=600).raise_for_status()
                for i in range(n):
                    api.post("/v1/streams", json={"name": f"cam{i}", "url": str(clips[i % len(clips)]),
                                                  "options": {"loop": True}}).raise_for_status()
                    api.post("/v1/apps", json=_app_spec(i, options.detector)).raise_for_status()
                time.sleep(options.warmup_s)
                before, cpu0, t0 = _totals(api, n), server.cpu_s(), time.monotonic()
                machine0 = cpu_times()
                captions_before = _caption_ids(api)
                guest_before = api.get("/v1/overview").json()["device"]["guest"]
                rss = [server.rss_mb()]
                allocator = in_use(server.proc.pid)
                while time.monotonic() - t0 < options.window_s:
                    time.sleep(min(2.0, options.window_s / 10))
                    rss.append(server.rss_mb())
                after, cpu1, elapsed = _totals(api, n), server.cpu_s(), time.monotonic() - t0
                steal = steal_share(machine0, cpu_times())
                overloaded = [a["load"]["overloaded"] for a in after]
                written = len(_caption_ids(api) - captions_before)
                guest = api.get("/v1/overview").json()["device"]["guest"]
        finally:
            server.stop()

    within = [after[i]["within_slo"] - before[i]["within_slo"] for i in range(n)]
    outcomes = [settled(before[i], after[i]) for i in range(n)]
    low_outcomes = sum(outcomes[1:])
    point = {"n": n, "goodput_fps": round(sum(within) / elapsed, 2),
             "high_attainment": round(within[0] / outcomes[0], 4) if outcomes[0] else None,
             "low_attainment": round(sum(within[1:]) / low_outcomes, 4) if low_outcomes else None,
             "p99_all_ms": after[0]["latency_all_ms"]["p99"],
             "p99_all_ms_low": after[-1]["latency_all_ms"]["p99"] if n > 1 else None,
             "rss_mb": round(rss[-1], 1), "rss_growth": round(rss[-1] / rss[0], 3),
             "cpu_pct": round(100 * (cpu1 - cpu0) / elapsed, 1), "cpu_steal": steal,
             "overloaded_apps": sum(overloaded), "allocator": allocator}
    if captions:
        steps = {k: guest[k] - guest_before[k] for k in ("guest_steps_by_share", "guest_steps_in_slack")}
        point.update(captions_per_min=round(60 * written / elapsed, 2), llm_steps=steps,
                     llm_share_since_start=guest["guest_share"])
    where = (" with captions" if captions else "") + \
        ((" on the cluster" + ("" if actors else ", streams and apps in the front door")) if cluster else "")
    log(f"  N={n}{where}: goodput {point['goodput_fps']} frames/s, "
        f"high {point['high_attainment']}, low {point['low_attainment']}, p99 all {point['p99_all_ms']}, "
        f"rss {point['rss_mb']} MB (x{point['rss_growth']}), cpu {point['cpu_pct']}%, steal {point['cpu_steal']}"
        + (f", {point['captions_per_min']} captions/min, LLM steps {point['llm_steps']}" if captions else ""))
    return point


def engine_bound(options: ServeBenchOptions, log: Callable[[str], None]) -> tuple[float, float | None]:
    """The people counters' model (SceneDet: its person path) through the engine
    alone: best frames/s in the largest batches it forms (the profile's efficient size),
    and the share of the machine's CPU stolen meanwhile (vigil/provenance.py)."""
    from engine.engine import Engine
    from engine.requests import Request
    from models.repository import ModelRepository
    from streams import open_source

    frames = []
    src = open_source(str(options.clips()[0]))
    for f in src.frames():
        frames.append(f.image)
        if len(frames) == 64:
            break
    src.close()
    engine = Engine(ModelRepository(MODELS_DIR), options.device, lanes=None)  # the lanes `vigil serve` runs
    try:
        engine.load(options.detector)

        def chunk(k: int) -> list:
            now = engine.clock()
            return engine.submit_many([Request("bound", options.detector, frames[(k + j) % len(frames)], now, SLO_MS,
                                               priority=0, labels=("person",), input_key=("bound", k + j),
                                               may_drop=False) for j in range(32)])

        wait(chunk(0))  # warm
        done, k, t0, machine0 = 0, 32, time.monotonic(), cpu_times()
        in_flight = [chunk(k), chunk(k + 32)]
        k += 64
        while time.monotonic() - t0 < options.bound_s:
            wait(in_flight.pop(0))
            done += 32
            in_flight.append(chunk(k))
            k += 32
        fps = done / (time.monotonic() - t0)
        steal = steal_share(machine0, cpu_times())
    finally:
        engine.close(drain=False)
    log(f"  engine alone: {fps:.1f} frames/s ({engine.lanes} lane(s) of {engine.lane_threads or 'all'} thread(s)), "
        f"steal {steal}")
    return round(fps, 2), steal


def run_serve_bench(options: ServeBenchOptions, log: Callable[[str], None] = print) -> dict:
    log("engine-only bound")
    bound, bound_steal = engine_bound(options, log)
    log(f"served path, N = {', '.join(map(str, options.counts))}")
    points = [measure_point(n, options, log) for n in options.counts]
    best = max(p["goodput_fps"] for p in points)
    by_allocator = {}
    for allocator in options.allocators[1:]:
        log(f"served path with VIGIL_ALLOCATOR={allocator}")
        by_allocator[allocator] = [measure_point(n, options, log, allocator=allocator) for n in options.counts]
    captions = []
    if options.captions_n:
        log(f"with captions every {CAPTION_EVERY_S} s per stream, N = {', '.join(map(str, options.captions_n))}")
    for n in options.captions_n:
        off = next((p for p in points if p["n"] == n), None) or measure_point(n, options, log)
        on = measure_point(n, options, log, captions=True)
        captions.append({"n": n, **{k: on[k] for k in ("captions_per_min", "llm_steps", "llm_share_since_start")},
                         "goodput_on_vs_off": round(on["goodput_fps"] / off["goodput_fps"], 3),
                         "high_attainment_on_vs_off": round(on["high_attainment"] / off["high_attainment"], 3)
                         if on["high_attainment"] and off["high_attainment"] else None})
    return {"device": options.device, "detector": options.detector, "slo_ms": SLO_MS, "window_s": options.window_s,
            "engine_bound_fps": bound, "engine_bound_steal": bound_steal, "points": points,
            "served_vs_bound": round(best / bound, 3) if bound else None,
            "overload_retention": round(points[-1]["goodput_fps"] / best, 3) if best else None,
            "captions": captions, "allocators": list(options.allocators),
            "by_allocator": by_allocator,
            "goodput_vs_first": {a: round(max(p["goodput_fps"] for p in ps) / best, 3) if best else None
                                 for a, ps in by_allocator.items()}}


def format_serve_report(result: dict) -> str:
    allocators = sorted({p.get("allocator", "unknown") for p in result["points"]})
    lines = [f"engine alone: {result['engine_bound_fps']} frames/s (steal {result.get('engine_bound_steal')}); "
             f"served/bound {result['served_vs_bound']}, "
             f"overload retention {result['overload_retention']}; server allocator: {', '.join(allocators)}",
             "| N | goodput fps | high att. | low att. | p99 all (high) | RSS MB (growth) | CPU % | steal "
             "| allocator (asked: in use) |",
             "|---|---|---|---|---|---|---|---|---|"]
    rows = [(result.get("allocators", ["auto"])[0], p) for p in result["points"]]
    rows += [(a, p) for a, ps in result.get("by_allocator", {}).items() for p in ps]
    for asked, p in rows:
        lines.append(f"| {p['n']} | {p['goodput_fps']} | {p['high_attainment']} | {p['low_attainment']} | "
                     f"{p['p99_all_ms']} | {p['rss_mb']} ({p['rss_growth']}) | {p['cpu_pct']} | "
                     f"{p.get('cpu_steal')} | {asked}: {p.get('allocator')} |")
    for a, ratio in result.get("goodput_vs_first", {}).items():
        lines.append(f"goodput with {a} over {result['allocators'][0]}: {ratio}")
    if result.get("captions"):
        lines += ["", "| N | captions/min | LLM steps (share, slack) | goodput on/off | high att. on/off |",
                  "|---|---|---|---|---|"]
        for c in result["captions"]:
            lines.append(f"| {c['n']} | {c['captions_per_min']} | {c['llm_steps']['guest_steps_by_share']}, "
                         f"{c['llm_steps']['guest_steps_in_slack']} | {c['goodput_on_vs_off']} | "
                         f"{c['high_attainment_on_vs_off']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(json.dumps(run_serve_bench(ServeBenchOptions()), indent=2))
