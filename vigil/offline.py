"""`vigil run`: one video through its apps, offline, writing summary, events and video.

The stream is decoded once (on the source's thread) and cut into blocks. Each app
samples its frames from every block; apps whose detector is a model send one request
per sampled frame to the engine, all apps' requests for a block in one submission, so
a backbone shared by several apps runs once per frame. Host detectors (motion) run
beside the apps. Blocks are pipelined: the engine works on the next block while the
apps track and count the previous one.

Latency and SLO attainment in the summary come from the engine's metrics (host
detectors report into the same metrics).
"""

from __future__ import annotations

import json
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

import numpy as np

from apps.annotate import draw_app
from apps.app import App
from apps.detectors import HOST_DETECTORS, Detector, build_host_detector
from apps.events import Event
from apps.skipping import StaticFrameFilter
from apps.spec import AppSpec
from engine.detections import Detections
from engine.device import resolve_device
from engine.engine import Dropped, Engine, Request
from engine.repository import ModelRepository, RepositoryError
from streams import FrameBlock, FrameSampler, SourceError, cut_blocks, open_source
from streams.source import monotonic_ms
from vigil.video import VideoWriter

DEFAULT_REPOSITORY = Path(__file__).resolve().parents[1] / "configs" / "models"
PIPELINE_DEPTH = 2  # blocks in flight in the engine while the apps work on an earlier one


@dataclass(frozen=True)
class RunOptions:
    out_dir: Path
    video: bool = True
    max_frames: int | None = None
    device: str = "auto"
    block_frames: int = 8
    progress: bool = False
    repository: Path = DEFAULT_REPOSITORY
    policy: str = "nexus"

    def __post_init__(self) -> None:
        if self.max_frames is not None and self.max_frames < 1:
            raise ValueError(f"max_frames must be >= 1; was {self.max_frames}")
        if self.block_frames < 1:
            raise ValueError(f"block_frames must be >= 1; was {self.block_frames}")


class RunError(Exception):
    """The run could not start (bad source, bad app, bad model); nothing was written."""


@dataclass
class AppRunner:
    """One app with its sampler and, for host detectors, its detector."""

    app: App
    sampler: FrameSampler
    host: Detector | None = None
    skip: StaticFrameFilter | None = None
    last: Detections = field(default_factory=Detections.empty)  # latest result, reused by skipped frames


@dataclass
class InFlight:
    block: FrameBlock
    picks: dict[str, FrameBlock]  # app -> its sampled frames
    futures: dict[str, list[Future | None]] = field(default_factory=dict)  # None: skipped, reuse the last
    host_results: dict[str, list[Detections]] = field(default_factory=dict)


def _labels_of(spec: AppSpec, engine: Engine) -> tuple[str, ...]:
    if spec.host_detector:
        return HOST_DETECTORS[spec.detector].labels
    with engine.manager.lock:
        servable = engine.manager.resolve(spec.detector, spec.model_version)
        return tuple(servable.model.spec.labels)


def build_runners(specs: list[AppSpec], engine: Engine, stream_id: str, size: tuple[int, int],
                  fps: float) -> list[AppRunner]:
    models = sorted({s.detector for s in specs if not s.host_detector})
    for name in models:
        if name not in engine.manager.repository.model_names():
            raise RunError(f"detector {name!r} is neither a host detector ({', '.join(HOST_DETECTORS)}) nor a "
                           f"model in {engine.manager.repository.root}")
        try:
            engine.load(name)
        except RepositoryError as exc:
            raise RunError(str(exc)) from None
    runners = []
    for spec in specs:
        try:
            labels = _labels_of(spec, engine)
        except LookupError as exc:
            raise RunError(f"app {spec.name!r}: {exc}") from None
        unknown = [c for c in spec.classes or [] if c not in labels]
        if unknown:
            raise RunError(f"app {spec.name!r}: classes {unknown} are not labels of {spec.detector!r} ({list(labels)})")
        host = None
        if spec.host_detector:
            try:
                host = build_host_detector(spec.detector, spec.detector_options)
            except ValueError as exc:
                raise RunError(f"app {spec.name!r}: {exc}") from None
        skip = StaticFrameFilter(spec.skip_static) if spec.skip_static and not spec.host_detector else None
        runners.append(AppRunner(App(spec, stream_id, size, fps, labels), FrameSampler(spec.fps), host, skip))
    return runners


def run_offline(source: str, specs: list[AppSpec], options: RunOptions,
                clock: Callable[[], float] = monotonic_ms) -> dict:
    """Runs to the end of the source (or max_frames). Returns the summary, which has an
    `error` when the source failed part-way; outputs are written either way."""
    if not specs:
        raise RunError("no apps to run")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise RunError(f"app names must be unique; got {names}")
    try:
        device = resolve_device(options.device)
        src = open_source(source, clock=clock)
    except (ValueError, SourceError) as exc:
        raise RunError(str(exc)) from None
    info = src.info
    size = (info.width, info.height)
    engine = Engine(ModelRepository(options.repository), device, policy=options.policy, clock=clock)
    try:
        runners = build_runners(specs, engine, src.stream_id, size, info.fps)
    except RunError:
        engine.close()
        src.close()
        raise
    out = options.out_dir
    out.mkdir(parents=True, exist_ok=True)
    progress = _progress(options.max_frames or info.expected_frames, options.progress)
    writer = VideoWriter(out / "annotated.mp4", info.fps, size) if options.video else None
    last_seen: dict[str, Detections] = {r.app.name: Detections.empty() for r in runners}
    frames_decoded, error = 0, None
    started = time.perf_counter()
    pipeline: deque[InFlight] = deque()
    with open(out / "events.jsonl", "w") as events_file:
        def complete_oldest() -> None:
            done = pipeline.popleft()
            per_frame = _observe(done, runners, engine, events_file)
            if writer:
                _annotate(done.block, runners, per_frame, last_seen, writer)
            progress.update(len(done.block))

        try:
            for block in cut_blocks(_limited(src.frames(), options.max_frames), options.block_frames):
                frames_decoded += len(block)
                pipeline.append(_submit(block, runners, engine, clock))
                if len(pipeline) >= PIPELINE_DEPTH:
                    complete_oldest()
        except SourceError as exc:
            error = str(exc)
        finally:
            src.close()
            while pipeline:
                complete_oldest()
            for r in runners:
                _write_events(events_file, r.app.finish())
            if writer:
                writer.close()
            progress.close()
            engine.close()
    wall_s = time.perf_counter() - started
    summary = {
        "source": info.url,
        "device": device,
        "policy": options.policy,
        "frames_decoded": frames_decoded,
        "wall_s": round(wall_s, 3),
        "fps": round(frames_decoded / wall_s, 2) if wall_s > 0 else 0.0,
        "video": {"width": info.width, "height": info.height, "fps": info.fps},
        "apps": {r.app.name: _app_summary(r, engine) for r in runners},
        "batch_sizes": engine.metrics.snapshot()["batch_sizes"],
        "outputs": {"summary": str(out / "summary.json"), "events": str(out / "events.jsonl"),
                    "video": str(out / "annotated.mp4") if options.video else None},
        "error": error,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _app_summary(runner: AppRunner, engine: Engine) -> dict:
    app = runner.app
    m = engine.metrics.app_summary(app.name)
    return {"detector": app.spec.detector, "frames": app.num_frames, **app.counts(),
            "latency_ms": m["latency_ms"], "slo_ms": app.spec.slo_ms, "slo_attainment": m["slo_attainment"],
            "inferences": m["arrived"], "skipped": m["skipped"], "dropped": m["dropped"]}


def _submit(block: FrameBlock, runners: list[AppRunner], engine: Engine, clock: Callable[[], float]) -> InFlight:
    flight = InFlight(block, {r.app.name: block.select(r.sampler.mask(block)) for r in runners})
    requests, owners = [], []
    for r in runners:
        sub = flight.picks[r.app.name]
        spec = r.app.spec
        if r.host is not None:
            engine.metrics.arrived(spec.name, spec.detector, "host", len(sub))
            if len(sub):
                flight.host_results[spec.name] = r.host.detect(sub)
            now = clock()
            for capture in sub.capture_ms:
                engine.metrics.completed(spec.name, spec.detector, "host", now - capture, spec.slo_ms)
            continue
        slots = flight.futures.setdefault(spec.name, [])
        for i in range(len(sub)):
            if r.skip is not None and r.skip.should_skip(sub.pixels[i], float(sub.pts_ms[i])):
                engine.metrics.skipped(spec.name, spec.detector)
                slots.append(None)
                continue
            version = "adaptive" if spec.select == "adaptive" else spec.model_version
            requests.append(Request(spec.name, spec.detector, sub.pixels[i], float(sub.capture_ms[i]), spec.slo_ms,
                                    version, spec.priority,
                                    tuple(spec.classes) if spec.classes is not None else None,
                                    (sub.stream_id, int(sub.frame_ids[i]))))
            owners.append((spec.name, len(slots)))
            slots.append(None)
    for (name, slot), fut in zip(owners, engine.submit_many(requests)):
        flight.futures[name][slot] = fut
    return flight


def _observe(flight: InFlight, runners: list[AppRunner], engine: Engine,
             events_file: TextIO) -> dict[str, dict[int, Detections]]:
    """Wait for a block's results and let each app track and count them."""
    per_frame: dict[str, dict[int, Detections]] = {}
    for r in runners:
        name = r.app.name
        sub = flight.picks[name]
        if len(sub) == 0:
            continue
        if r.host is not None:
            keep, dets = np.ones(len(sub), bool), flight.host_results[name]
        else:
            keep, dets = np.zeros(len(sub), bool), []
            for i, fut in enumerate(flight.futures[name]):
                try:
                    if fut is not None:
                        r.last = fut.result().detections
                    dets.append(r.last)  # a skipped frame reuses the last result
                    keep[i] = True
                except Dropped:
                    pass  # counted by the engine; the tracker coasts over the gap
        events, results = r.app.observe(sub.select(keep), dets)
        _write_events(events_file, events)
    while engine.selection_events:  # adaptive selection switches, stamped with this block's time
        e = engine.selection_events.popleft()
        _write_events(events_file, [Event("model_selected", e["app"], flight.block.stream_id,
                                          float(flight.block.pts_ms[0]), -1, "",
                                          {k: e[k] for k in ("model", "from_version", "to_version", "rate_per_s")})])
        per_frame[name] = {res.frame_id: res.tracked for res in results}
    return per_frame


def _annotate(block: FrameBlock, runners: list[AppRunner], per_frame: dict[str, dict[int, Detections]],
              last_seen: dict[str, Detections], writer: VideoWriter) -> None:
    for i, frame_id in enumerate(block.frame_ids.tolist()):
        img = block.pixels[i].copy()
        for k, r in enumerate(runners):
            tracked = per_frame.get(r.app.name, {}).get(frame_id)
            if tracked is not None:
                last_seen[r.app.name] = tracked
            draw_app(img, r.app, last_seen[r.app.name], k)
        writer.write(img)


def _write_events(f: TextIO, events: list[Event]) -> None:
    for e in events:
        f.write(json.dumps(e.to_dict()) + "\n")


def _limited(frames, max_frames: int | None):
    for i, frame in enumerate(frames):
        if max_frames is not None and i >= max_frames:
            return
        yield frame


def _progress(total: int | None, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="frame", disable=not enabled, dynamic_ncols=True, leave=False)
