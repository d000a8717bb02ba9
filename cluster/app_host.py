"""App actors: the apps of a stream of `vigil serve --cluster` (their tracks, counts and
events) held in a Ray actor, with their state checkpointed after every block.

`AppHost` is the actor: one per stream, holding each of its apps (`apps.app.App`).
`ActorApp` is what the front door's stream worker holds in place of an `App`: the same
verbs (observe, finish, reconfigure, counts), each a call to the host. The worker
still samples frames, sends them to the engine and stores the events the host returns
(with snapshots from the frames it holds), so a host gets only each block's detections
and times, never pixels; for an app that tracks by colour, the worker measures its
boxes' colours (apps/appearance.py) and sends those.

Checkpoints. With each block's answer the host returns the app's state, pickled (a few
kB: its tracks, counters and zones), and the front door keeps the latest one per app.
The host is started with `max_restarts=-1`. When a call fails because the actor died
(or did not answer), the front door waits for Ray to start it again, gives it every
app's latest checkpoint and sends the block again: the block is applied once to the
state before it, so tracks go on and nothing is counted twice, and the events of the
failed call, never received, are not stored twice either. A call that fails that way
`ATTEMPTS` times raises, and the worker marks the app failed.

Attributes the worker reads besides those verbs (the lines, zones and latest class the
live view draws) come from the latest checkpoint, unpickled when first read after it
changed (at most once a second per app, as the live view is drawn).
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
import uuid

from apps.app import App, FrameResult
from apps.appearance import colours as box_colours
from apps.filters import DetectionFilter
from apps.spec import AppSpec
from core.classes import Classes
from core.detections import Detections
from core.events import Event
from core.frames import FrameBlock

log = logging.getLogger("vigil.cluster.apps")

ATTEMPTS = 4  # calls to a host lost this many times in a row fail the app
CALL_TIMEOUT_S = 60.0  # a call not answered in this long counts as a lost actor
RETRY_S = 0.5  # before calling a host that is being restarted again


class AppHost:
    """A stream's apps on the cluster (a Ray actor; module docstring)."""

    def __init__(self) -> None:
        self.apps: dict[str, App] = {}
        self.incarnation = uuid.uuid4().hex

    def _state(self, name: str) -> bytes:
        return pickle.dumps(self.apps[name], protocol=pickle.HIGHEST_PROTOCOL)

    def restore(self, checkpoints: dict[str, bytes]) -> str:
        """Every app as checkpointed (a restarted host starts empty)."""
        self.apps = {name: pickle.loads(state) for name, state in checkpoints.items()}
        return self.incarnation

    def where(self) -> dict:
        import os

        import ray

        return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def add(self, spec: AppSpec, stream_id: str, frame_size: tuple[int, int], fps: float,
            labels: tuple[str, ...]) -> bytes:
        self.apps[spec.name] = App(spec, stream_id, frame_size, fps, labels)
        return self._state(spec.name)

    def observe(self, name: str, frame_ids, pts_ms, detections: list[Detections],
                classes: list[Classes | None] | None,
                colours: list | None = None) -> tuple[list[Event], list[FrameResult], bytes, dict, int]:
        app = self.apps[name]
        events, results = app.observe(_Times(frame_ids, pts_ms), detections, classes, colours)
        return events, results, self._state(name), app.counts(), app.num_found

    def reconfigure(self, name: str, spec: AppSpec) -> bytes:
        self.apps[name].reconfigure(spec)
        return self._state(name)

    def finish(self, name: str) -> tuple[list[Event], dict]:
        app = self.apps.pop(name)
        return app.finish(), app.counts()


class _Times:
    """What `App.observe` reads of a block: its frames' ids and times (len, frame_ids, pts_ms)."""

    def __init__(self, frame_ids, pts_ms) -> None:
        self.frame_ids, self.pts_ms = frame_ids, pts_ms

    def __len__(self) -> int:
        return len(self.frame_ids)


class HostClient:
    """The front door's side of one stream's `AppHost`: calls that survive the actor's
    restarts, and the checkpoints that make them safe (module docstring). Only the
    stream's worker thread calls it."""

    def __init__(self, stream: str, placement: object = "DEFAULT") -> None:
        import ray

        self.stream = stream
        self.checkpoints: dict[str, bytes] = {}
        self.restarts = 0
        self._lock = threading.Lock()
        self._where: dict = {}  # the actor's last answer to `where`
        self._asked = None  # its next answer, asked for
        self._closed = False
        self._actor = ray.remote(AppHost).options(num_cpus=0, max_restarts=-1, max_task_retries=0,
                                                  scheduling_strategy=placement).remote()

    def call(self, method: str, *args):
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        lost: Exception | None = None
        for attempt in range(ATTEMPTS):
            try:
                if lost is not None:  # a new actor, or one that may have applied the call: from the checkpoints
                    ray.get(self._actor.restore.remote(dict(self.checkpoints)), timeout=CALL_TIMEOUT_S)
                return ray.get(getattr(self._actor, method).remote(*args), timeout=CALL_TIMEOUT_S)
            except (RayActorError, GetTimeoutError) as exc:
                lost = exc
                with self._lock:
                    self.restarts += 1
                log.warning("stream %s: its app actor was lost (%s, attempt %d of %d); Ray restarts it and it "
                            "goes on from the last block's checkpoint", self.stream, type(exc).__name__,
                            attempt + 1, ATTEMPTS)
                time.sleep(RETRY_S)
        raise RuntimeError(f"the app actor of stream {self.stream!r} was lost {ATTEMPTS} times in a row: "
                           f"{type(lost).__name__}: {lost}")

    def app(self, spec: AppSpec, stream_id: str, frame_size: tuple[int, int], stream_fps: float,
            labels: tuple[str, ...]) -> "ActorApp":
        """An app of the stream, held by this host (runtime/pipeline.py's `MakeApp`)."""
        return ActorApp(self, spec, stream_id, frame_size, stream_fps, labels)

    def where(self) -> dict:
        """The actor's node and process as it last said, and how often calls found it
        lost. Never waits (the API asks it for every stream): the answer asked for last
        time is taken if it has come, and the next is asked for."""
        import ray

        with self._lock:
            asked, self._asked = self._asked, None
            if asked is not None:
                if ray.wait([asked], timeout=0)[0]:
                    try:
                        self._where = ray.get(asked)
                    except Exception as exc:  # lost, or being restarted: the status says so
                        self._where = {"error": type(exc).__name__}
                else:
                    self._asked = asked
            if self._asked is None and not self._closed:
                self._asked = self._actor.where.remote()
            return {**self._where, "restarts": self.restarts}

    def close(self) -> None:
        import ray

        with self._lock:
            self._closed = True
            self._where = {"error": "closed: its stream's worker has ended"}
        ray.kill(self._actor, no_restart=True)


class ActorApp:
    """An `App` held by a stream's `AppHost` (module docstring)."""

    def __init__(self, host: HostClient, spec: AppSpec, stream_id: str, frame_size: tuple[int, int],
                 stream_fps: float, labels: tuple[str, ...]) -> None:
        self.host = host
        self.spec = spec
        self.stream_id = stream_id
        self.frame_size = frame_size
        self.stream_fps = stream_fps
        self.labels = labels
        self.num_found = 0
        # the boxes whose colours the host's app needs: those its filter keeps (its
        # tracker is built once, so whether it tracks by colour is fixed here too)
        self._measured = DetectionFilter(spec, labels, frame_size) if spec.tracker.appearance is not None else None
        self._checkpointed(host.call("add", spec, stream_id, frame_size, stream_fps, labels))
        self._counts = self._shadow().counts()

    @property
    def name(self) -> str:
        return self.spec.name

    def _checkpointed(self, state: bytes) -> None:
        self.host.checkpoints[self.spec.name] = state
        self._seen: App | None = None

    def _shadow(self) -> App:
        """The app as of its latest checkpoint (read only: the host's is the live one)."""
        if self._seen is None:
            self._seen = pickle.loads(self.host.checkpoints[self.spec.name])
        return self._seen

    def __getattr__(self, attr: str):
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self._shadow(), attr)

    def observe(self, block: FrameBlock, detections: list[Detections],
                classes: list[Classes | None] | None = None) -> tuple[list[Event], list[FrameResult]]:
        colours = None if self._measured is None else \
            [box_colours(pixels, d.xyxy[self._measured.keep(d)]) for pixels, d in zip(block.pixels, detections)]
        events, results, state, self._counts, self.num_found = self.host.call(
            "observe", self.spec.name, block.frame_ids, block.pts_ms, detections, classes, colours)
        self._checkpointed(state)
        return events, results

    def reconfigure(self, spec: AppSpec) -> None:
        self._checkpointed(self.host.call("reconfigure", self.spec.name, spec))
        self.spec = spec
        if self._measured is not None:
            self._measured = DetectionFilter(spec, self.labels, self.frame_size)

    def finish(self) -> list[Event]:
        events, self._counts = self.host.call("finish", self.spec.name)
        self.host.checkpoints.pop(self.spec.name, None)
        return events

    def counts(self) -> dict:
        return self._counts
