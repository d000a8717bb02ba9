"""A stream's block loop: the one thread (`blocks-<stream>`) that pulls the stream's
frames, cuts them into blocks, sends each through the engine and hands the results to
the stream's apps (runtime/app_supervisor.py), which it alone drives.

A block goes to the engine as soon as it is cut; the apps observe blocks in order as
their results come in (`BLOCKS_IN_FLIGHT`). After each block the loop
- tells the load governor (runtime/load.py) what was shed, and an app with `min_fps`
  samples at the rate it gives back;
- tells the stream the highest rate any app samples, so it decodes no more;
- puts the stream's threads in the CPU's background while a higher-priority stream
  runs (runtime/cpu_priority.py);
- keeps each app's latest annotated frame for the dashboard, at most one a second;
- hands the block's scene facts (its events, what each app has in view) to `on_block`.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

import numpy as np

from apps.annotate import overlay
from apps.app import FrameResult
from core.events import Event
from core.frames import FrameBlock
from runtime.app_supervisor import AppSupervisor
from runtime.boundaries import EngineVerbs, EventSink, SinkFull, Stream
from runtime.cpu_priority import ThreadLevel
from runtime.load import LoadGovernor
from runtime.pipeline import AppRunner, BlockPipeline, InFlight, observe_block, submit_block
from streams.blocks import BlockCutter

log = logging.getLogger("vigil.worker")

LIVE_FRAME_EVERY_MS = 1000.0
# A stream's blocks in the engine before its loop waits for the oldest one's results:
# more than a 1 s SLO's worth of 300 ms blocks, so that a busy device does not hold the
# next block's frames back in the stream's buffer, late before the engine sees them.
BLOCKS_IN_FLIGHT = 5
# (stream, t_ms, the block's events as stored, app -> class -> number in view)
OnBlock = Callable[[str, float, list[dict], dict[str, dict[str, int]]], None]


class BlockEvents:
    """Stores events, and keeps those of the block being observed, as stored (with ids),
    for the block's listeners. The block loop's thread alone uses it."""

    def __init__(self, stream_name: str, sink: EventSink) -> None:
        self.stream_name = stream_name
        self.sink = sink
        self.latest: list[dict] = []

    def begin_block(self) -> None:
        self.latest = []

    def emit(self, events: list[Event], frames: FrameBlock | None = None) -> None:
        """Store the events (`frames`: those they were seen on, for snapshots)."""
        if not events:
            return
        stored = None
        try:
            stored = self.sink(events, frames)
        except SinkFull:
            pass  # said once by storage; the counts and the live views go on
        except Exception:
            log.exception("stream %s: could not store %d events", self.stream_name, len(events))
        self.latest += stored if stored is not None else [e.to_dict() for e in events]


class BlockLoop:
    """`on_stop` runs once the loop has finished its apps; `on_block` takes each block's
    scene facts (for captions)."""

    def __init__(self, stream: Stream, engine: EngineVerbs, apps: AppSupervisor, events: BlockEvents,
                 cutter: BlockCutter, clock: Callable[[], float], governor: LoadGovernor,
                 on_block: OnBlock | None = None, on_stop: Callable[[], None] | None = None) -> None:
        self.stream = stream
        self.engine = engine
        self.apps = apps
        self.events = events
        self.cutter = cutter
        self.clock = clock
        self.governor = governor
        self.on_block = on_block
        self.on_stop = on_stop
        self._live_kept_ms: dict[str, float] = {}  # app -> clock when its live frame was last kept
        self._cpu = ThreadLevel(stream.name)
        self._stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"blocks-{stream.name}", daemon=True)

    @property
    def name(self) -> str:
        return self.stream.name

    def start(self) -> None:
        self.stream.start()
        self.thread.start()

    def stop(self, timeout_s: float) -> None:
        """Stop decoding, finish the blocks in flight and end every open track."""
        self._stopping.set()
        self.stream.stop()
        self.thread.join(timeout_s)

    def _run(self) -> None:
        pipeline: BlockPipeline[tuple[InFlight, list[AppRunner]]] = BlockPipeline(
            lambda done: self._complete(*done), BLOCKS_IN_FLIGHT, lambda done: done[0].ready())
        try:
            # a file analysed in full (not paced) holds its frames for its first app: the
            # app added a moment after the stream would otherwise miss the first ones,
            # and which it missed would depend on the machine's speed
            while not self.stream.paced and not self.apps.wait_for_app(0.2):
                if self._stopping.is_set():
                    return
            for frame in self.stream.frames():
                pipeline.poll()
                # a quiet source (None) does not hold a partial block forever
                block = self.cutter.flush() if frame is None else self.cutter.add(frame)
                if block is not None:
                    self._process(block, pipeline)
            block = self.cutter.flush()
            if block is not None:
                self._process(block, pipeline)
        except Exception:  # a bug here must not take the server down; say so loudly
            log.exception("stream %s: worker failed", self.name)
        finally:
            pipeline.drain()
            self.apps.finish_all()
            if self.on_stop is not None:
                self.on_stop()

    def _process(self, block: FrameBlock, pipeline: BlockPipeline) -> None:
        runners = self.apps.sync(block)
        pipeline.push((submit_block(block, runners, self.engine, self.clock, self.apps.failed,
                                    exact=not self.stream.paced), runners))

    def _complete(self, flight: InFlight, runners: list[AppRunner]) -> None:
        self.events.begin_block()
        runners = self.apps.current(runners)
        per_frame = observe_block(flight, runners, self.engine, self.events.emit, self.apps.failed)
        span_s = self._span_s(flight.block)
        for r in runners:
            self.apps.observed(r, span_s)
            self._govern(r, len(flight.sampled[r.app.name]), span_s)
        self.stream.set_demand(self._demand(runners))
        self._cpu_level(runners)
        self._keep_live_frames(flight.block, runners, per_frame)
        if self.on_block is not None:
            self._scene_facts(flight.block, runners, per_frame)

    def _scene_facts(self, block: FrameBlock, runners: list[AppRunner],
                     per_frame: dict[str, dict[int, FrameResult]]) -> None:
        """The block's events and, per app, how many of each class it tracks on its last
        analysed frame, to `on_block`."""
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
            self.on_block(self.name, float(block.pts_ms[-1]), list(self.events.latest), in_view)
        except Exception:
            log.exception("stream %s: scene facts failed", self.name)

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
                             [self.thread.native_id, self.stream.native_id])

    @staticmethod
    def _demand(runners: list[AppRunner]) -> float | None:
        """The most frames per second any app samples now (None: every frame)."""
        rates = [r.sampler.fps for r in runners]
        return None if not rates or None in rates else max(rates)

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
            self.apps.keep_live(name, block.pixels[i], overlay(runner.app, results[frame_id].tracked), k)
            self._live_kept_ms[name] = now
