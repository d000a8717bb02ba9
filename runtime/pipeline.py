"""Apps on one stream: a block's frames go to the engine for every app at once, and
the results come back to each app in order. `vigil run` and `vigil serve` both use it.

Apps whose detector is a model send one request per sampled frame, all apps' requests
for a block in one submission, so a backbone shared by several apps runs once per
frame. Host detectors (motion) run on the submitting thread and report into the same
metrics. Static-frame skipping reuses an app's last result for frames that did not
change.

One app's failure is that app's alone: given `on_error`, an exception while one app
detects or observes goes there (the server marks that app failed) and the block goes
on for the others; without it (offline runs) it propagates.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Generic, TypeVar

import numpy as np

from apps.app import App, FrameResult
from apps.detectors import HOST_DETECTORS, Detector, build_host_detector
from apps.skipping import StaticFrameFilter
from apps.spec import AppSpec, unknown_classes
from core.classes import Classes
from core.detections import Detections
from core.events import Event
from core.frames import FrameBlock
from engine.engine import Engine
from engine.metrics import SHED_REASONS
from engine.requests import Dropped, Request
from models.repository import RepositoryError
from sample_videos.range import from_the_range
from streams import FrameSampler


class RunError(Exception):
    """An app cannot run (bad source, bad app, bad model); the message says which and why."""


@dataclass
class AppRunner:
    """One app with its sampler and, for host detectors, its detector."""

    app: App
    sampler: FrameSampler
    host: Detector | None = None
    skip: StaticFrameFilter | None = None
    last: Detections = field(default_factory=Detections.empty)  # latest result, reused by skipped frames
    last_classes: Classes | None = None  # a classifier's, likewise
    # the latest observed block: frames with a result, and why the others were dropped (reason -> detail)
    block_results: int = 0
    block_drops: dict[str, str] = field(default_factory=dict)
    block_shed: int = 0  # frames of the latest block the engine shed (deadline, overloaded)
    rate_shed: float = 0.0  # frames not sampled since load control lowered the rate, not yet counted
    seen_found: int = 0  # the app's num_found when it last grew
    quiet_ms: float = 0.0  # analysed stream time since its model last found one of its classes
    domain_warning: str | None = None  # its model was trained on other footage than this source's
    crowd_mark: tuple[int, int] = (0, 0)  # the app's analysed frames and detections when its crowd window began


OnError = Callable[[AppRunner, Exception], None]
# (spec, stream id, frame size, stream fps, the detector's labels) -> the app: an `App`
# here, or one whose state lives elsewhere with the same verbs (cluster/app_host.py)
MakeApp = Callable[[AppSpec, str, tuple[int, int], float, tuple[str, ...]], App]


@dataclass
class InFlight:
    block: FrameBlock
    sampled: dict[str, FrameBlock]  # app -> the frames its sampler kept
    futures: dict[str, list[Future | None]] = field(default_factory=dict)  # None: skipped, reuse the last
    host_results: dict[str, list[Detections]] = field(default_factory=dict)

    def ready(self) -> bool:
        """Has the engine answered every frame of the block?"""
        return all(f is None or f.done() for slots in self.futures.values() for f in slots)


def _labels_of(spec: AppSpec, engine: Engine) -> tuple[str, ...]:
    if spec.host_detector:
        return HOST_DETECTORS[spec.detector].labels
    return engine.labels(spec.detector, spec.model_version)


def domain_warning(spec: AppSpec, engine: Engine, source: str) -> str | None:
    """A warning for an app whose model was trained on the synthetic range only, on any
    other footage: its detections there are not to be trusted, and nothing else says so."""
    if spec.host_detector or from_the_range(source):
        return None
    if engine.domain(spec.detector, spec.model_version) != "synthetic":
        return None
    return (f"{spec.detector} was trained on the synthetic range's renders only: on this footage its detections "
            "are not to be trusted (use a model trained on real footage, such as detector: coco)")


CROWD_PER_FRAME = 40  # detections of an app's classes a frame, on average, past which it warns
CROWD_WINDOW = 50  # analysed frames it averages over


def crowd_warning(runner: AppRunner) -> tuple[bool, str | None]:
    """(whether a window of analysed frames has closed, and if so the warning it gives):
    one when the app's model found CROWD_PER_FRAME or more of its classes a frame over
    the window, else None."""
    app = runner.app
    frames, found = app.num_frames - runner.crowd_mark[0], app.num_detections - runner.crowd_mark[1]
    if frames < CROWD_WINDOW:
        return False, None
    runner.crowd_mark = (app.num_frames, app.num_detections)
    per_frame = found / frames
    if per_frame < CROWD_PER_FRAME:
        return True, None
    classes = ", ".join(app.spec.classes) if app.spec.classes else "objects"
    return True, (f"reports {per_frame:.0f} {classes} a frame over its last {frames} analysed frames: if the scene "
                  "does not hold that many, its model does not fit this footage")


def build_runners(specs: list[AppSpec], engine: Engine, stream_id: str, size: tuple[int, int],
                  fps: float, make_app: MakeApp = App, *, source: str) -> list[AppRunner]:
    """Load the apps' models and check their classes; RunError names the app and problem.
    `source`: the footage's URL or path, against which each model's domain is checked."""
    models = sorted({s.detector for s in specs if not s.host_detector})
    for name in models:
        if name not in engine.repository.model_names():
            raise RunError(f"detector {name!r} is neither a host detector ({', '.join(HOST_DETECTORS)}) nor a "
                           f"model in {engine.repository.root}")
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
        wrong = unknown_classes(spec.named_classes, spec.detector, labels)
        if wrong:
            raise RunError(f"app {spec.name!r}: {wrong}")
        host = None
        if spec.host_detector:
            try:
                host = build_host_detector(spec.detector, spec.detector_options)
            except ValueError as exc:
                raise RunError(f"app {spec.name!r}: {exc}") from None
        skip = StaticFrameFilter(spec.skip_static) if spec.skip_static and not spec.host_detector else None
        runners.append(AppRunner(make_app(spec, stream_id, size, fps, labels), FrameSampler(spec.fps), host, skip,
                                 domain_warning=domain_warning(spec, engine, source)))
    return runners


def _guarded(on_error: OnError | None, runner: AppRunner, work: Callable, *args):
    """`work(*args)`, or None when it raised and `on_error` took the exception."""
    if on_error is None:
        return work(*args)
    try:
        return work(*args)
    except Exception as exc:  # this app's failure, not the stream's
        on_error(runner, exc)
        return None


def submit_block(block: FrameBlock, runners: list[AppRunner], engine: Engine, clock: Callable[[], float],
                 on_error: OnError | None = None, exact: bool = False) -> InFlight:
    """`exact`: every sampled frame is analysed, however late (an offline run); otherwise
    the engine drops what cannot meet its deadline."""
    flight = InFlight(block, {r.app.name: block.select(r.sampler.mask(block)) for r in runners})
    requests, owners = [], []
    for r in runners:
        sub = flight.sampled[r.app.name]
        spec = r.app.spec
        if r.host is not None:
            engine.metrics.arrived(spec.name, spec.detector, "host", len(sub))
            if len(sub):
                dets = _guarded(on_error, r, r.host.detect, sub)
                if dets is None:
                    flight.sampled[spec.name] = sub.select(np.zeros(len(sub), bool))  # nothing to observe
                    continue
                flight.host_results[spec.name] = dets
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
                                    (sub.stream_id, int(sub.frame_ids[i])), may_drop=not exact))
            owners.append((spec.name, len(slots)))
            slots.append(None)
    for (name, slot), fut in zip(owners, engine.submit_many(requests)):
        flight.futures[name][slot] = fut
    return flight


def observe_block(flight: InFlight, runners: list[AppRunner], engine: Engine,
                  emit: Callable[[list[Event], FrameBlock | None], None],
                  on_error: OnError | None = None) -> dict[str, dict[int, FrameResult]]:
    """Wait for a block's results and let each app track and count them: app -> frame id
    -> what the app made of that frame. Events go to `emit` with the frames they were
    seen on (for snapshots)."""
    per_frame: dict[str, dict[int, FrameResult]] = {}
    for r in runners:
        sub = flight.sampled[r.app.name]
        r.block_results, r.block_drops, r.block_shed = 0, {}, 0
        results = _guarded(on_error, r, _observe, r, sub, flight, emit) if len(sub) else None
        if results is not None:
            per_frame[r.app.name] = results
    return per_frame


def _observe(r: AppRunner, sub: FrameBlock, flight: InFlight,
             emit: Callable[[list[Event], FrameBlock | None], None]) -> dict[int, FrameResult]:
    name = r.app.name
    if r.host is not None:
        keep, dets, classes = np.ones(len(sub), bool), flight.host_results[name], None
    else:
        keep, dets, classes = np.zeros(len(sub), bool), [], []
        for i, fut in enumerate(flight.futures[name]):
            selected = None
            try:
                if fut is not None:
                    result = fut.result()
                    r.last, r.last_classes, selected = result.detections, result.classes, result.selected
                dets.append(r.last)  # a skipped frame reuses the last result
                classes.append(r.last_classes)
                keep[i] = True
            except Dropped as exc:  # counted by the engine; the tracker coasts over the gap
                r.block_drops[exc.reason] = str(exc)
                r.block_shed += exc.reason in SHED_REASONS
                selected = exc.selected
            if selected is not None:  # an adaptive switch, stamped with the frame that saw it
                emit([Event("model_selected", name, sub.stream_id, float(sub.pts_ms[i]), -1, "",
                            {k: selected[k] for k in ("model", "from_version", "to_version", "rate_per_s")})],
                     None)
    r.block_results = int(keep.sum())
    observed = sub.select(keep)
    events, results = r.app.observe(observed, dets, classes)
    emit(events, observed)
    return {res.frame_id: res for res in results}


PIPELINE_DEPTH = 2  # blocks in flight in the engine while the apps observe an earlier one
T = TypeVar("T")


class BlockPipeline(Generic[T]):
    """Blocks in flight, oldest first, for `vigil run` and `vigil serve` alike: `push`
    adds a submitted block and, once `depth` are in flight, completes the oldest, so
    the engine works on the newer ones while the apps observe it; `drain` completes
    the rest, in order. With `ready` (is a block's work done?), `push` and `poll` also
    complete, in order, the oldest blocks that are ready, without waiting."""

    def __init__(self, complete: Callable[[T], None], depth: int = PIPELINE_DEPTH,
                 ready: Callable[[T], bool] | None = None) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1; was {depth}")
        self._complete = complete
        self.depth = depth
        self._ready = ready
        self._flights: deque[T] = deque()

    def __len__(self) -> int:
        return len(self._flights)

    def push(self, flight: T) -> None:
        self._flights.append(flight)
        self.poll()
        if len(self._flights) >= self.depth:
            self._complete(self._flights.popleft())

    def poll(self) -> None:
        while self._ready is not None and self._flights and self._ready(self._flights[0]):
            self._complete(self._flights.popleft())

    def drain(self) -> None:
        while self._flights:
            self._complete(self._flights.popleft())
