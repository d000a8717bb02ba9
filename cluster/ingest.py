"""Ingest actors: a stream of `vigil serve --cluster` decoded in a Ray actor of its own.

`IngestActor` runs the stream's `ManagedStream` (its decoder thread, reconnects and
bounded buffer) in a Ray worker process, so decoding takes neither the front door's
CPU nor its GIL. `RemoteStream` is what the front door's stream worker reads in place
of a `ManagedStream`, with the same verbs (frames, status, set_demand, stop): it takes
frames in batches (`pull`), and they come through Ray's object store (on the actor's
node an array is read where it lies, not copied).

The actor is started with `max_restarts=-1`: when its process dies Ray starts it again
and the new one opens the stream again. The front door sees a new incarnation, counts
a reconnect and goes on:
- a stream analysed in full (a file with `realtime: false`) goes on from the frame
  after the last one taken: the new actor decodes the file again from its start and
  drops what was taken (as fast as it decodes, since such a file is not paced), so
  every frame is analysed once, as in one process (by stream time: a file's times do
  not depend on what was decoded before, its frame ids do);
- a live or paced stream goes on as after a reconnect, from what the source gives
  now; its frame ids, and a paced file's times, go on from where they stopped.

Capture times run on the front door's clock: a frame's age at the actor (the actor's
clock at its reply less the frame's capture) is taken from the front door's clock when
the reply arrives, so hosts' clocks need not agree (the time on the wire is not counted).
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from typing import Callable, Iterator

from core.clock import monotonic_ms
from core.frames import Frame
from streams.live import ManagedStream, StreamStats
from streams.options import StreamOptions
from streams.recording import RecordingStore
from streams.urls import is_live_url, redact_url

log = logging.getLogger("vigil.cluster.ingest")

PULL_FRAMES = 8  # the most frames one pull takes: a block and a half at 15 frames/s
PULL_TIMEOUT_S = 60.0  # a pull not answered in this long counts as a lost actor
RETRY_S = 0.5  # between pulls to an actor that is being restarted
_UNSET = object()


class IngestActor:
    """One stream's decoder on the cluster (a Ray actor; module docstring)."""

    def __init__(self, name: str, url: str, options: dict, start_ms: float, shown_url: str,
                 recording: dict | None = None) -> None:
        """`recording`: the server's recording store (`RecordingStore.config`), at the same
        path on this node, to write the stream's segments into."""
        import ray

        recorder = None
        if recording is not None:
            store = RecordingStore.from_config(recording)
            store.sweep(name)  # the segment a lost actor left open, if this one replaces it
            recorder = store.recorder(name)
        self.stream = ManagedStream(name, url, StreamOptions.model_validate(options), start_ms=start_ms,
                                    shown_url=shown_url, recorder=recorder).start()
        self.incarnation = uuid.uuid4().hex  # a restarted actor has a new one
        self.where = {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def pull(self, after_ms: float | None, most: int, wait_s: float) -> dict:
        """Frames in order, up to `most`, waiting at most `wait_s` for them; with
        `after_ms`, none at or before that stream time (those were taken before a restart)."""
        frames, ended = self.stream.take(most, wait_s)
        while after_ms is not None and frames and frames[-1].pts_ms <= after_ms and not ended:
            frames, ended = self.stream.take(most, wait_s)  # catching up: the frames were taken
        now = self.stream.clock()
        kept = [(f.frame_id, f.pts_ms, now - f.capture_ms, f.image) for f in frames
                if after_ms is None or f.pts_ms > after_ms]
        return {"incarnation": self.incarnation, "frames": kept, "ended": ended, "status": self.stream.status(),
                "where": self.where}

    def set_demand(self, fps: float | None) -> None:
        self.stream.set_demand(fps)

    def stop(self) -> None:
        self.stream.stop()


class RemoteStream:
    """The front door's view of an ingest actor: a `ManagedStream`'s verbs, read by the
    stream's worker. `placement`: the Ray scheduling strategy for the actor;
    `recording`: as `IngestActor`'s."""

    native_id = None  # no thread here decodes (runtime/cpu_priority.py skips it)

    def __init__(self, name: str, url: str, options: StreamOptions, start_ms: float = 0.0,
                 shown_url: str | None = None, placement: object = "DEFAULT",
                 clock: Callable[[], float] = monotonic_ms, recording: dict | None = None) -> None:
        self.name = name
        self.url = url
        self.options = options
        self.live = is_live_url(url)
        self.paced = self.live or options.realtime  # as ManagedStream's
        self.redacted = redact_url(shown_url or url)
        self.clock = clock
        self.stats = StreamStats()  # as the actor last reported it, with this side's reconnects
        self.restarts = 0  # of the actor, as seen here
        self._start_ms = start_ms
        self._recording = recording
        self._placement = placement
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._demand: object = _UNSET  # the rate the actor last heard
        self._where: dict = {}  # the actor's node and process, as it last said
        self._actor = None

    def start(self) -> "RemoteStream":
        import ray

        self._actor = ray.remote(IngestActor).options(
            num_cpus=0, max_restarts=-1, max_task_retries=0, max_concurrency=4,
            scheduling_strategy=self._placement).remote(self.name, self.url, self.options.model_dump(),
                                                        self._start_ms, self.redacted, self._recording)
        return self

    def set_demand(self, fps: float | None) -> None:
        if fps != self._demand and self._actor is not None:
            self._demand = fps
            self._actor.set_demand.remote(fps)  # not waited for: the next pulls follow it

    def status(self) -> dict:
        with self._lock:
            return {"url": self.redacted, "live": self.live, **vars(self.stats),
                    "ingest": {**self._where, "restarts": self.restarts}}

    def stop(self, timeout_s: float = 5.0) -> None:
        import ray

        self._stop.set()
        if self._actor is not None:
            try:
                ray.get(self._actor.stop.remote(), timeout=timeout_s)
            except Exception:  # gone already: nothing to stop
                pass
            ray.kill(self._actor, no_restart=True)

    def frames(self, poll_s: float = 0.2) -> Iterator[Frame | None]:
        """As `ManagedStream.frames`: frames in order, None when none came within
        `poll_s`; ends after a file's last frame or on stop()."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        last_id, last_pts = -1, None  # as delivered here
        incarnation, fresh = None, False  # fresh: a restarted actor, none of its frames seen yet
        lost_since = False  # a pull failed since the last reply: that restart is counted
        shift_id, shift_ms = 0, 0.0  # a restarted actor's ids (and a paced file's times) to here's

        def ask():
            # a file's times do not depend on what was decoded before: an exact one
            # resumes after the last time taken (its ids do, with the apps' demand)
            return self._actor.pull.remote(last_pts if not self.paced else None, PULL_FRAMES, poll_s)

        asked = None  # the next pull, asked for before this one's frames are handed on
        while not self._stop.is_set():
            if asked is None:
                asked = ask()
            try:
                reply = ray.get(asked, timeout=PULL_TIMEOUT_S)
            except (RayActorError, GetTimeoutError) as exc:
                asked, lost_since = None, True
                self._lost(exc)
                self._stop.wait(RETRY_S)
                yield None
                continue
            now = self.clock()
            if incarnation is not None and reply["incarnation"] != incarnation:
                fresh = True
                self._demand = _UNSET  # the new actor has not heard it
                if not lost_since:  # killed between two pulls: Ray held the next for the new actor
                    with self._lock:
                        self.restarts += 1
            incarnation, lost_since = reply["incarnation"], False
            self._mirror(reply["status"], reply["where"], reply["ended"])
            frames = []
            for frame_id, pts_ms, age_ms, image in reply["frames"]:
                if fresh:
                    fresh = False
                    shift_id = last_id + 1 - frame_id
                    if self.paced and not self.live and last_pts is not None:
                        shift_ms = last_pts + 1000.0 / (self.stats.fps or 15.0) - pts_ms
                last_id, last_pts = frame_id + shift_id, pts_ms + shift_ms
                frames.append(Frame(self.name, last_id, last_pts, now - age_ms, image))
            # the actor takes the next frames while the worker analyses these: its round
            # trip is not added to every frame's latency
            asked = None if reply["ended"] else ask()
            yield from frames
            if reply["ended"]:
                return
            if not frames:
                yield None

    def _lost(self, exc: Exception) -> None:
        """The actor died or did not answer: Ray restarts it; the next pull waits for it."""
        with self._lock:
            self.restarts += 1
            self.stats.status = "reconnecting"
            self.stats.last_error = f"ingest actor lost ({type(exc).__name__}); Ray restarts it"
        log.warning("stream %s: its ingest actor was lost (%s); Ray restarts it and the stream goes on",
                    self.name, type(exc).__name__)

    def _mirror(self, status: dict, where: dict, taken_all: bool) -> None:
        """The actor's status as here: a file has not ended until its last frame is taken."""
        with self._lock:
            for k, v in status.items():
                if hasattr(self.stats, k) and k != "reconnects" and (k != "status" or taken_all or v != "ended"):
                    setattr(self.stats, k, v)
            self.stats.reconnects = status["reconnects"] + self.restarts
            self._where = where
