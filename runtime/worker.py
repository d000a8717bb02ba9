"""One stream in `vigil serve`: its managed source, its apps, and the thread that cuts
its frames into blocks, sends them through the engine and hands results to the apps.

Apps are attached, changed and detached while the stream runs; changes take effect
at the next block (the worker thread is the only one that touches `App` objects). An
app that cannot start (its model fails to load), or that raises while it runs, gets
status `failed` with the error, and the stream's other apps go on. An app whose every
frame of a block was dropped because its model is not there (unloaded) is `degraded`
with the reason until frames come back. A block goes to the engine as soon as it is
cut; the apps observe blocks in order as their results come in (`BLOCKS_IN_FLIGHT`).
After each block the load governor (`runtime.load`) hears what was shed, and an app
with `min_fps` samples at the rate it gives back.

The latest annotated frame of each app is kept as JPEG (at most one a second) for the
dashboard.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np

from apps.annotate import overlay
from apps.app import App, FrameResult
from apps.spec import AppSpec
from core.events import Event
from runtime.boundaries import EngineVerbs, EventSink, SinkFull, Stream
from runtime.cpu_priority import ThreadLevel
from runtime.live_frames import LiveFrames
from runtime.load import LoadGovernor
from runtime.pipeline import (AppRunner, BlockPipeline, InFlight, MakeApp, RunError, build_runners, crowd_warning,
                              observe_block, submit_block)
from streams import FrameBlock
from streams.blocks import BlockCutter, FrameSampler

WARNING_KINDS = ("domain", "crowd", "quiet")  # an app's warnings, in the order they are shown
log = logging.getLogger("vigil.worker")

LIVE_FRAME_EVERY_MS = 1000.0
# A stream's blocks in the engine before its worker waits for the oldest one's results:
# more than a 1 s SLO's worth of 300 ms blocks. Fewer held the next block's frames back
# in the stream's buffer, late before the engine saw them, whenever the device was busy.
BLOCKS_IN_FLIGHT = 5


@dataclass
class AppStatus:
    status: str = "waiting"  # waiting (no frames yet) | loading | running | degraded | failed
    error: str | None = None


class StreamWorker:
    def __init__(self, stream: Stream, engine: EngineVerbs, emit: EventSink,
                 block_frames: int, block_ms: float, clock: Callable[[], float],
                 on_block: Callable[[str, float, list[dict], dict[str, dict[str, int]]], None] | None = None,
                 governor: LoadGovernor | None = None, quiet_after_s: float = 300.0,
                 make_app: MakeApp = App, on_stop: Callable[[], None] | None = None) -> None:
        """`make_app` builds each app (the apps' state may live elsewhere: cluster/app_host.py);
        `on_stop` runs once the worker has finished its apps."""
        self.stream = stream
        self.make_app = make_app
        self.on_stop = on_stop
        self.governor = governor or LoadGovernor()
        self.engine = engine
        self.emit = emit
        self.on_block = on_block  # (stream, t_ms, events, app -> class -> in view): scene facts for captions
        self._block_events: list[dict] = []  # the latest block's events, as stored
        self.clock = clock
        self.cutter = BlockCutter(block_frames, block_ms)
        self.block_ms = block_ms
        self._lock = threading.Lock()
        self._wanted: dict[str, AppSpec] = {}  # what the API asked for
        self._changed = True
        self.app_status: dict[str, AppStatus] = {}
        # an app whose model has found none of its classes for quiet_after_s of analysed
        # stream time: most often a model whose output does not fit its labels or kind
        self.quiet_after_ms = quiet_after_s * 1000.0
        self.app_warnings: dict[str, dict[str, str]] = {}  # app -> kind (domain, quiet, crowd) -> warning
        self.live = LiveFrames()  # each app's latest analysed frame, for frame.jpg
        self._live_kept_ms: dict[str, float] = {}
        self._runners: dict[str, AppRunner] = {}  # the worker thread's own, as are their apps
        # each app's counts as of its last block, published by the worker thread (under
        # the lock) for readers on other threads: an App is never read off that thread
        self._counts: dict[str, dict] = {}
        self._cpu = ThreadLevel(stream.name)
        self._stopping = threading.Event()
        self._has_app = threading.Event()  # an app was ever attached
        self._thread = threading.Thread(target=self._run, name=f"worker-{stream.name}", daemon=True)

    @property
    def name(self) -> str:
        return self.stream.name

    def start(self) -> "StreamWorker":
        self.stream.start()
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        """Still taking frames or finishing them (its thread has not ended)."""
        return self._thread.is_alive()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop decoding, finish the blocks in flight and end every open track."""
        self._stopping.set()
        self.stream.stop()
        self._thread.join(timeout_s)

    def set_app(self, spec: AppSpec) -> None:
        with self._lock:
            self._wanted[spec.name] = spec
            self.app_status.setdefault(spec.name, AppStatus())
            self._changed = True
        self._has_app.set()

    def remove_app(self, name: str) -> None:
        with self._lock:
            self._wanted.pop(name, None)
            self.app_status.pop(name, None)
            self._counts.pop(name, None)
            self.live.forget(name)
            self.app_warnings.pop(name, None)
            self._changed = True

    def app_warning(self, name: str) -> str | None:
        """The app's warnings, most lasting first, as one line (None: none)."""
        with self._lock:
            said = self.app_warnings.get(name) or {}
            return "; ".join(said[k] for k in WARNING_KINDS if k in said) or None

    def _warn(self, name: str, kind: str, warning: str | None) -> bool:
        """Set (or with None clear) one kind of the app's warnings; whether it changed."""
        with self._lock:
            said = self.app_warnings.setdefault(name, {})
            if said.get(kind) == warning:
                return False
            if warning is None:
                said.pop(kind, None)
            else:
                said[kind] = warning
            return True

    def app_names(self) -> list[str]:
        with self._lock:
            return list(self._wanted)

    # -- the worker thread --------------------------------------------------------------------------
    def _run(self) -> None:
        pipeline: BlockPipeline[tuple[InFlight, list[AppRunner]]] = BlockPipeline(
            lambda done: self._complete(*done), BLOCKS_IN_FLIGHT, lambda done: done[0].ready())
        try:
            # a file analysed in full (not paced) holds its frames for its first app: the
            # app added a moment after the stream would otherwise miss the first ones,
            # and which it missed would depend on the machine's speed
            while not self.stream.paced and not self._has_app.wait(0.2):
                if self._stopping.is_set():
                    return
            for frame in self.stream.frames():
                pipeline.poll()
                block = None
                if frame is None:  # quiet source: do not hold a partial block forever
                    block = self.cutter.flush()
                else:
                    block = self.cutter.add(frame)
                if block is None:
                    continue
                self._process(block, pipeline)
            block = self.cutter.flush()
            if block is not None:
                self._process(block, pipeline)
        except Exception:  # a bug here must not take the server down; say so loudly
            log.exception("stream %s: worker failed", self.name)
        finally:
            pipeline.drain()
            for runner in self._runners.values():
                self._finish(runner)
            if self.on_stop is not None:
                self.on_stop()

    def _finish(self, runner: AppRunner) -> None:
        """End the app's open tracks (its last events); a failure there is the app's alone."""
        try:
            self._emit(runner.app.finish())
        except Exception:
            log.exception("stream %s: app %s could not finish", self.name, runner.app.name)

    def _process(self, block: FrameBlock, pipeline: BlockPipeline) -> None:
        runners = self._sync_apps(block)
        pipeline.push((submit_block(block, runners, self.engine, self.clock, self._app_failed,
                                    exact=not self.stream.paced), runners))

    def _app_failed(self, runner: AppRunner, exc: Exception) -> None:
        name = runner.app.name
        if self._runners.pop(name, None) is None:
            return  # failed already, in an earlier block still in flight
        log.error("app %s on stream %s failed: %s: %s (the stream's other apps go on)", name, self.name,
                  type(exc).__name__, exc, exc_info=exc)
        self._set_status(name, "failed", f"{type(exc).__name__}: {exc}"[:500])
        with self._lock:
            self._wanted.pop(name, None)  # not restarted at every block; PATCH or re-add it
            self._counts.pop(name, None)

    def _complete(self, flight: InFlight, runners: list[AppRunner]) -> None:
        self._block_events = []
        runners = [r for r in runners if self._runners.get(r.app.name) is r]  # not those failed since
        per_frame = observe_block(flight, runners, self.engine, self._emit, self._app_failed)
        span_s = self._span_s(flight.block)
        for r in runners:
            self._publish_counts(r)
            self._health(r)
            self._watch_quiet(r, span_s)
            self._watch_crowd(r)
            self._govern(r, len(flight.sampled[r.app.name]), span_s)
        self.stream.set_demand(self._demand(runners))
        self._cpu_level(runners)
        self._keep_live_frames(flight.block, runners, per_frame)
        if self.on_block is not None:
            in_view = {}
            for r in runners:
                frames = per_frame.get(r.app.name)
                if frames:
                    tracked = frames[max(frames)].tracked
                    counts: dict[str, int] = {}
                    for cid in tracked.class_id.tolist():
                        counts[r.app.labels[cid]] = counts.get(r.app.labels[cid], 0) + 1
                    in_view[r.app.name] = counts
            try:
                self.on_block(self.name, float(flight.block.pts_ms[-1]), list(self._block_events),
                              in_view)
            except Exception:
                log.exception("stream %s: scene facts failed", self.name)

    def _health(self, runner: AppRunner) -> None:
        """running <-> degraded, from the block just observed: degraded when no frame
        got a result because the model is not there."""
        name = runner.app.name
        with self._lock:
            current = self.app_status.get(name)
        if current is None or current.status not in ("running", "degraded"):
            return
        missing = runner.block_results == 0 and runner.block_drops.get("unavailable")
        if missing and current.status == "running":
            log.warning("app %s on stream %s is degraded: every frame is dropped: %s", name, self.name, missing)
            self._set_status(name, "degraded", f"every frame dropped: {missing}")
        elif runner.block_results and current.status == "degraded":
            log.info("app %s on stream %s gets results again", name, self.name)
            self._set_status(name, "running")

    def _watch_quiet(self, runner: AppRunner, span_s: float) -> None:
        name, found = runner.app.name, runner.app.num_found
        if found > runner.seen_found:
            runner.seen_found, runner.quiet_ms = found, 0.0
            if self._warn(name, "quiet", None):
                log.info("app %s on stream %s detects its classes again", name, self.name)
        elif runner.block_results:
            runner.quiet_ms += span_s * 1000.0
            if runner.quiet_ms >= self.quiet_after_ms:
                classes = runner.app.spec.classes or "any class"
                warning = (f"no detections of {classes} in the last {self.quiet_after_ms / 1000.0:.0f} s of "
                           f"analysed frames (does the model's output fit its kind and labels?)")
                if self._warn(name, "quiet", warning):
                    log.warning("app %s on stream %s: %s", name, self.name, warning)

    def _watch_crowd(self, runner: AppRunner) -> None:
        """Warn while the app's model reports more of its classes a frame, over a window of
        analysed frames, than footage is likely to hold: a model that does not fit the
        footage (SceneDet on real grass and paving) finds objects everywhere."""
        closed, warning = crowd_warning(runner)
        if closed and self._warn(runner.app.name, "crowd", warning) and warning:
            log.warning("app %s on stream %s: %s", runner.app.name, self.name, warning)

    def _span_s(self, block: FrameBlock) -> float:
        """Stream time a block covers (its last frame's period included)."""
        period_ms = 1000.0 / (self.stream.stats.fps or 15.0)
        return (float(block.pts_ms[-1] - block.pts_ms[0]) + period_ms) / 1000.0

    def _govern(self, runner: AppRunner, sampled: int, span_s: float) -> None:
        """Report the block's shed frames; an app with min_fps samples at the rate the
        governor gives back, and the frames it no longer samples are counted as shed."""
        spec = runner.app.spec
        if runner.host is not None:  # host detectors run beside the engine: nothing of theirs is shed
            self.governor.note(spec.name, spec.priority)
            return
        full = spec.fps or self.stream.stats.fps or 15.0
        rate = self.governor.report(spec.name, spec.priority, full, spec.min_fps, sampled, runner.block_shed)
        if spec.min_fps is not None:
            runner.sampler.set_fps(rate)
            runner.rate_shed += (full - rate) * span_s
            whole = int(runner.rate_shed)
            runner.rate_shed -= whole
            self.engine.metrics.shed(spec.name, "rate", whole)

    def _cpu_level(self, runners: list[AppRunner]) -> None:
        """Below the top priority in use, the stream's threads take the CPU the rest
        leave (runtime/cpu_priority.py)."""
        top = self.governor.top_priority()
        mine = max((r.app.spec.priority for r in runners), default=None)
        self._cpu.background(top is not None and mine is not None and mine < top,
                             [self._thread.native_id, self.stream.native_id])

    @staticmethod
    def _demand(runners: list[AppRunner]) -> float | None:
        """The most frames per second any app samples now (None: every frame)."""
        rates = [r.sampler.fps for r in runners]
        return None if not rates or None in rates else max(rates)

    def _emit(self, events: list[Event], frames: FrameBlock | None = None) -> None:
        """Store the events (`frames`: those they were seen on, for snapshots); the
        block's listeners then take them as stored (with ids)."""
        if not events:
            return
        stored = None
        try:
            stored = self.emit(events, frames)
        except SinkFull:
            pass  # said once by storage; the counts and the live views go on
        except Exception:
            log.exception("stream %s: could not store %d events", self.name, len(events))
        self._block_events += stored if stored is not None else [e.to_dict() for e in events]

    def _sync_apps(self, block: FrameBlock) -> list[AppRunner]:
        """Bring the running apps in line with the wanted ones (only between blocks)."""
        with self._lock:
            if not self._changed:
                return list(self._runners.values())
            wanted = dict(self._wanted)
            self._changed = False
        for name in [n for n in self._runners if n not in wanted]:
            self._finish(self._runners.pop(name))
        fps = self.stream.stats.fps or 15.0
        for name, spec in wanted.items():
            runner = self._runners.get(name)
            if runner is not None:
                if runner.app.spec != spec:
                    try:
                        runner.app.reconfigure(spec)
                        runner.sampler, runner.rate_shed = FrameSampler(spec.fps), 0.0
                        self._publish_counts(runner)
                    except Exception as exc:  # this app only
                        self._app_failed(runner, exc)
                continue
            self._set_status(name, "loading")
            try:
                runner = self._runners[name] = build_runners([spec], self.engine, self.name, block.size, fps,
                                                             self.make_app, source=self.stream.url)[0]
                self._set_status(name, "running")
                self._publish_counts(runner)
                if runner.domain_warning and self._warn(name, "domain", runner.domain_warning):
                    log.warning("app %s on stream %s: %s", name, self.name, runner.domain_warning)
            except Exception as exc:  # a RunError (its model does not load), or anything else: this app only
                reason = str(exc) if isinstance(exc, (RunError, ValueError)) else f"{type(exc).__name__}: {exc}"
                log.warning("app %s on stream %s cannot start: %s", name, self.name, reason)
                self._set_status(name, "failed", reason[:500])
                with self._lock:
                    self._wanted.pop(name, None)  # do not retry on every block
        return list(self._runners.values())

    def _set_status(self, name: str, status: str, error: str | None = None) -> None:
        with self._lock:
            if name in self.app_status:
                self.app_status[name] = AppStatus(status, error)

    def _keep_live_frames(self, block: FrameBlock, runners: list[AppRunner],
                          per_frame: dict[str, dict[int, FrameResult]]) -> None:
        now = self.clock()
        for k, runner in enumerate(runners):
            name = runner.app.name
            if now - self._live_kept_ms.get(name, -LIVE_FRAME_EVERY_MS) < LIVE_FRAME_EVERY_MS:
                continue
            results = per_frame.get(name)
            if not results:
                continue
            frame_id = max(results)
            i = int(np.flatnonzero(block.frame_ids == frame_id)[0])
            drawn = overlay(runner.app, results[frame_id].tracked)
            with self._lock:
                if name in self.app_status:  # not removed meanwhile
                    self.live.keep(name, block.pixels[i], drawn, k)
            self._live_kept_ms[name] = now

    def _publish_counts(self, runner: AppRunner) -> None:
        if self._runners.get(runner.app.name) is not runner:
            return  # failed while it observed the block
        counts = runner.app.counts()  # a new dict each time: what readers hold never changes
        with self._lock:
            if runner.app.name in self.app_status:  # not removed meanwhile
                self._counts[runner.app.name] = counts

    def app_counts(self, name: str) -> dict | None:
        """The app's counts as of its last block (None: not running)."""
        with self._lock:
            return self._counts.get(name)
