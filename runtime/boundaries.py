"""What the runtime takes from outside it, declared: a stream, an app and the engine,
each of which the cluster swaps for a stand-in (cluster/ingest.py's `RemoteStream`,
cluster/app_host.py's `ActorApp`, cluster/front.py's `ClusterEngine`), and the sink its
events go to (vigil/storage.py in `vigil serve`). tests/runtime/test_boundaries.py
checks that both sides of each implement its protocol."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Callable, Iterator, Protocol

from apps.app import FrameResult
from apps.spec import AppSpec
from core.classes import Classes
from core.detections import Detections
from core.events import Event
from core.frames import Frame, FrameBlock
from engine.arbiter import DeviceArbiter
from engine.metrics import EngineMetrics
from engine.profiles import Profile
from engine.requests import Request
from models.repository import ModelRepository
from streams.live import StreamStats


class Stream(Protocol):
    """A source of frames a worker cuts into blocks (streams/live.py's `ManagedStream`)."""

    name: str
    url: str
    paced: bool  # frames come at the source's own rate (a camera, a paced file)
    stats: StreamStats

    @property
    def native_id(self) -> int | None:
        """The OS id of the thread that decodes here (None: none does)."""

    def start(self) -> "Stream": ...

    def stop(self, timeout_s: float = 5.0) -> None: ...

    def status(self) -> dict: ...

    def frames(self) -> Iterator[Frame | None]:
        """Frames as they come; None when the source is quiet for a while."""

    def set_demand(self, fps: float | None) -> None:
        """The highest rate the stream's apps sample (None: every frame); any thread."""


class RunningApp(Protocol):
    """An app as the pipeline drives it (apps/app.py's `App`)."""

    spec: AppSpec
    labels: tuple[str, ...]

    @property
    def name(self) -> str: ...

    @property
    def num_found(self) -> int: ...

    def observe(self, block: FrameBlock, detections: list[Detections],
                classes: list[Classes | None] | None = None) -> tuple[list[Event], list[FrameResult]]: ...

    def reconfigure(self, spec: AppSpec) -> None: ...

    def finish(self) -> list[Event]: ...

    def counts(self) -> dict: ...


class EngineVerbs(Protocol):
    """What the pipeline asks of the device engine (engine/engine.py's `Engine`)."""

    metrics: EngineMetrics
    repository: ModelRepository

    def load(self, name: str, versions: list[int] | None = None) -> list[int]: ...

    def labels(self, name: str, version: int | str | None = None) -> tuple[str, ...]: ...

    def domain(self, name: str, version: int | str | None = None) -> str | None: ...

    def submit_many(self, requests: list[Request]) -> list[Future]: ...

    def close(self, drain: bool = True, timeout_s: float = 30.0) -> None: ...


class EngineBoundary(EngineVerbs, Protocol):
    """The rest of what the server takes from the engine: the model verbs of the REST
    and gRPC APIs, reports, and the device its guest (the LLM) takes turns on."""

    arbiter: DeviceArbiter
    clock: Callable[[], float]

    @property
    def ready(self) -> bool:
        """No load is in progress."""

    def submit(self, request: Request) -> Future: ...

    def ensure_loaded(self, name: str) -> None: ...

    def unload(self, name: str, version: int | None = None) -> list[int]: ...

    def reload(self, name: str) -> dict[str, list[int]]: ...

    def set_label(self, name: str, label: str, version: int) -> None: ...

    def versions(self, name: str) -> list[int]: ...

    def fragment_profiles(self, name: str, version: int | str | None = None) -> list[Profile]: ...

    def profiles(self) -> dict[str, dict]: ...

    def models(self) -> dict: ...

    def selections(self) -> list[dict]: ...

    def load_report(self) -> dict: ...


class SinkFull(Exception):
    """The store behind an event sink is full: the events are not kept, and the counts
    and live views go on. Said once by the store, not by each caller."""


# stores a block's events (with the frames they were seen on, for snapshots) and
# returns them as stored, each with its id; may raise SinkFull
EventSink = Callable[[list[Event], FrameBlock | None], list[dict]]
