"""`vigil run`: one video through its apps, offline, writing summary, events and video.

The stream is decoded once (on the source's thread) and cut into blocks. Each app
samples its frames from every block; apps whose detector is a model send one request
per sampled frame to the engine, all apps' requests for a block in one submission, so
a backbone shared by several apps runs once per frame. Host detectors (motion) run
beside the apps. Blocks are pipelined: the engine works on the next block while the
apps track and count the previous one.

A file is not a camera: by default every sampled frame is analysed, however long the
machine takes (the decoder waits for the engine; nothing is dropped for a deadline),
so the counts and events are the same on an idle machine and a busy one. Latency
against each app's SLO is still measured. `realtime` paces the file at its frame rate
and lets the engine drop late frames, as on a live stream.

Latency and SLO attainment in the summary come from the engine's metrics (host
detectors report into the same metrics). They depend on the machine: what other
processes took of it during the run, and while each model was profiled, is in the
summary, and where an app fell short of its SLO the summary says why in words
(runtime/busy_machine.py).
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TextIO

from apps.annotate import draw_overlays, overlay
from apps.app import FrameResult
from apps.spec import AppSpec
from core.clock import monotonic_ms
from core.detections import Detections
from core.events import Event
from core.frames import FrameBlock
from engine.device import resolve_device
from engine.engine import Engine
from engine.lanes import MAX_LANES
from engine.machine_load import others_cores, reading
from models.repository import MODELS_DIR, ModelRepository
from runtime.busy_machine import BusyProfile, machine_cores, notes
from runtime.event_clips import FileClips
from runtime.pipeline import (AppRunner, BlockPipeline, InFlight, RunError, build_runners, crowd_warning, observe_block,
                              submit_block)
from runtime.run_inputs import check_inputs
from runtime.snapshots import SnapshotWriter
from runtime.video import VideoWriter
from sample_videos.range import from_the_range
from streams import SourceError, SourceInfo, StreamOptions, cut_blocks, open_source

log = logging.getLogger("vigil.run")
REAL_APPS = ("people-counter", "vehicle-counter", "motion")  # on the pretrained COCO detector
RANGE_APPS = ("people-counter-scenedet", "vehicle-counter-scenedet", "motion")  # the synthetic range's


def default_apps(source: str) -> tuple[str, ...]:
    """The built-in apps a run uses unless told: the synthetic range's, on SceneDet, for
    the range's own footage (sample_videos/range.py); the COCO detector's for any other."""
    return RANGE_APPS if from_the_range(source) else REAL_APPS


@dataclass(frozen=True)
class RunOptions:
    out_dir: Path
    video: bool = True
    max_frames: int | None = None
    device: str = "auto"
    block_frames: int = 8
    progress: bool = False
    repository: Path = MODELS_DIR
    policy: str = "nexus"
    lanes: int | None = None  # batches run at once; None: what suits the device (engine/lanes.py)
    # pace the file at its frame rate, as a live camera would deliver it, and let the
    # engine drop what cannot meet its deadline; otherwise every sampled frame is
    # analysed however long it takes, and the results never depend on the machine's speed
    realtime: bool = False
    # also write what each app's model gave for every analysed frame (detections.jsonl)
    detections: bool = False
    # also write each event's frame with its box, and a crop, under snapshots/ (runtime/snapshots.py)
    snapshots: bool = False
    # also cut each event's stretch of the file (clip_pre_s before, clip_post_s after) under
    # clips/, remuxed (runtime/event_clips.py); a video file only
    clips: bool = False
    clip_pre_s: float = 5.0
    clip_post_s: float = 5.0

    def __post_init__(self) -> None:
        if self.max_frames is not None and self.max_frames < 1:
            raise ValueError(f"max_frames must be >= 1; was {self.max_frames}")
        if self.block_frames < 1:
            raise ValueError(f"block_frames must be >= 1; was {self.block_frames}")
        if self.lanes is not None and not 1 <= self.lanes <= MAX_LANES:
            raise ValueError(f"lanes must be in 1..{MAX_LANES}; was {self.lanes}")
        for name in ("clip_pre_s", "clip_post_s"):
            value = getattr(self, name)
            if not 0.0 <= value <= 300.0:  # also refuses NaN
                raise ValueError(f"{name} must be in 0..300 s; was {value}")


def run_offline(source: str, specs: list[AppSpec], options: RunOptions,
                clock: Callable[[], float] = monotonic_ms) -> dict:
    """Runs to the end of the source (or max_frames). Returns the summary, which has an
    `error` when the source failed part-way; outputs are written either way."""
    _check_run(source, specs, options)
    try:
        device = resolve_device(options.device)
        src = open_source(source, options=StreamOptions(realtime=options.realtime), clock=clock)
    except (ValueError, SourceError) as exc:
        raise RunError(str(exc)) from None
    info = src.info
    size = (info.width, info.height)
    engine = Engine(ModelRepository(options.repository), device, policy=options.policy, clock=clock,
                    lanes=options.lanes)
    try:
        runners = build_runners(specs, engine, src.stream_id, size, info.fps, source=source)
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
    detections_path = out / "detections.jsonl"
    shots = SnapshotWriter(out / "snapshots", retain_days=3650.0, max_mb=10_000_000.0) if options.snapshots else None
    clips = FileClips(Path(source), out / "clips", options.clip_pre_s, options.clip_post_s) if options.clips else None
    warnings = _domain_warnings(runners)

    def emit(events: list[Event], frames: FrameBlock | None) -> None:
        events = shots.attach(events, frames) if shots else events
        _write_events(events_file, clips.attach(events) if clips else events)

    with open(out / "events.jsonl", "w") as events_file, \
            open(detections_path, "w") if options.detections else nullcontext() as detections_file:
        def complete(done: InFlight) -> None:
            per_frame = observe_block(done, runners, engine, emit)
            for r in runners:
                _, warning = crowd_warning(r)
                if warning:
                    warnings.setdefault(r.app.name, {})["crowd"] = warning
            if detections_file is not None:
                _write_detections(detections_file, runners, per_frame)
            if writer:
                _annotate(done.block, runners, per_frame, last_seen, writer)
            progress.update(len(done.block))

        pipeline: BlockPipeline[InFlight] = BlockPipeline(complete)
        load_before = reading()  # and after: what other processes took of the machine while it ran
        try:
            for block in cut_blocks(_limited(src.frames(), options.max_frames), options.block_frames):
                frames_decoded += len(block)
                pipeline.push(submit_block(block, runners, engine, clock, exact=not options.realtime))
        except SourceError as exc:
            error = str(exc)
        finally:
            src.close()
            pipeline.drain()
            others = others_cores(load_before, reading())
            for r in runners:
                emit(r.app.finish(), None)
            if writer:
                writer.close()
            progress.close()
            profiled = _profiled_busy(runners, engine)
            engine.close()
    summary = _summary(info, device, options, runners, engine, warnings, frames_decoded,
                       time.perf_counter() - started, error, others, profiled)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def _check_run(source: str, specs: list[AppSpec], options: RunOptions) -> None:
    """RunError for a run that cannot start: no apps, two apps of one name, or what
    runtime/run_inputs.py finds (the source, clips of no file, a detector that does not
    exist, an output folder that cannot be written)."""
    if not specs:
        raise RunError("no apps to run")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise RunError(f"app names must be unique; got {names}")
    try:
        check_inputs(source, specs, options.out_dir, options.repository, clips=options.clips)
    except ValueError as exc:
        raise RunError(str(exc)) from None


def _domain_warnings(runners: list[AppRunner]) -> dict[str, dict[str, str]]:
    """app -> kind -> what it warns of (its model's domain; a crowd it reports at any time
    is added as the run goes): at the start, each app whose model was trained on other
    footage than this source's, logged once here."""
    warnings = {r.app.name: {"domain": r.domain_warning} for r in runners if r.domain_warning}
    for name, said in warnings.items():
        log.warning("app %s: %s", name, said["domain"])
    return warnings


def _summary(info: SourceInfo, device: str, options: RunOptions, runners: list[AppRunner], engine: Engine,
             warnings: dict[str, dict[str, str]], frames_decoded: int, wall_s: float, error: str | None,
             others: float | None, profiled: list[BusyProfile]) -> dict:
    """summary.json: the run, each app's counts and metrics, the machine's load (what other
    processes took of it during the run, and while each model was profiled) with notes
    on what it did to latency, and where the outputs are."""
    out = options.out_dir
    apps = {r.app.name: {**_app_summary(r, engine), "warnings": list(warnings.get(r.app.name, {}).values())}
            for r in runners}
    return {
        "source": info.url,
        "device": device,
        "policy": options.policy,
        "realtime": options.realtime,
        "frames_decoded": frames_decoded,
        "wall_s": round(wall_s, 3),
        "fps": round(frames_decoded / wall_s, 2) if wall_s > 0 else 0.0,
        "video": {"width": info.width, "height": info.height, "fps": info.fps},
        "apps": apps,
        "batch_sizes": engine.metrics.batch_histograms(),
        "machine": {"cores": machine_cores(), "others_cores": None if others is None else round(others, 2),
                    "profiled_others_cores": {p.model: p.others_cores for p in profiled}},
        "notes": notes(apps, profiled, others, machine_cores(), options.realtime),
        "outputs": {"summary": str(out / "summary.json"), "events": str(out / "events.jsonl"),
                    "video": str(out / "annotated.mp4") if options.video else None,
                    "detections": str(out / "detections.jsonl") if options.detections else None,
                    "snapshots": str(out / "snapshots") if options.snapshots else None,
                    "clips": str(out / "clips") if options.clips else None},
        "error": error,
    }


def _profiled_busy(runners: list[AppRunner], engine: Engine) -> list[BusyProfile]:
    """Each model the apps ran, once, with what other processes took while its profiles
    were measured (the most over its fragments); those not known are left out."""
    found: dict[str, float] = {}
    for r in runners:
        spec = r.app.spec
        if spec.host_detector or spec.detector in found:
            continue
        try:
            cores = [p.others_cores for p in engine.fragment_profiles(spec.detector, spec.model_version)
                     if p.others_cores is not None]
        except LookupError:  # no version of it loaded
            continue
        if cores:
            found[spec.detector] = max(cores)
    return [BusyProfile(model, cores) for model, cores in found.items()]


def _app_summary(runner: AppRunner, engine: Engine) -> dict:
    app = runner.app
    m = engine.metrics.app_summary(app.name)
    return {"detector": app.spec.detector, "frames": app.num_frames, **app.counts(),
            "latency_ms": m["latency_ms"], "slo_ms": app.spec.slo_ms, "slo_attainment": m["slo_attainment"],
            "inferences": m["arrived"], "skipped": m["skipped"], "dropped": m["dropped"]}


def _annotate(block: FrameBlock, runners: list[AppRunner], per_frame: dict[str, dict[int, FrameResult]],
              last_seen: dict[str, Detections], writer: VideoWriter) -> None:
    for i, frame_id in enumerate(block.frame_ids.tolist()):
        img = block.pixels[i].copy()
        drawn = []
        for k, r in enumerate(runners):
            result = per_frame.get(r.app.name, {}).get(frame_id)
            if result is not None:
                last_seen[r.app.name] = result.tracked
            drawn.append((overlay(r.app, last_seen[r.app.name]), k))
        draw_overlays(img, drawn)  # every app's labels placed together, none over another
        writer.write(img)


def _write_detections(f: TextIO, runners: list[AppRunner], per_frame: dict[str, dict[int, FrameResult]]) -> None:
    """One line per app and analysed frame: the model's boxes in frame pixels (before
    the app's own filters) and a classifier's best classes."""
    for r in runners:
        labels = r.app.labels
        for frame_id, res in sorted(per_frame.get(r.app.name, {}).items()):
            d = res.detections
            row = {"app": r.app.name, "frame_id": frame_id, "pts_ms": round(res.pts_ms, 3),
                   "detections": [{"box": [round(float(v), 2) for v in box], "score": round(float(c), 5),
                                   "label": labels[k] if 0 <= k < len(labels) else str(k)}
                                  for box, c, k in zip(d.xyxy, d.confidence, d.class_id.tolist())]}
            if res.classes:
                row["classes"] = [list(t) for t in res.classes]
            f.write(json.dumps(row) + "\n")


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
