"""The service behind the server: one object that composes the per-resource services
(vigil/services/) over one storage, model repository and engine, and owns their
lifecycle. The REST routers, the gRPC servicer and the CLI all call the same services:

    streams   StreamService   registered streams, each a worker
    apps      AppService      camera apps on the streams' workers, their metrics and frames
    models    ModelService    the repository's vision models: versions, labels, uploads
    events    EventService    stored events, paged
    llm       LLMService      the LLM engine, scene captions, questions

Mistakes are `ServiceError`s with a status and a message for the user
(vigil/services/errors.py). Everything registered is written to storage first, so
`start()` brings the same labels, streams and apps back; `close()` stops every thread
it started and joins it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from cluster.actors import StreamActors
from cluster.front import ClusterEngine, connect
from core.clock import monotonic_ms
from engine.device import resolve_device
from engine.engine import Engine
from llm.metrics import LLMSeries
from models.repository import ModelRepository
from runtime.load import LoadGovernor
from runtime.snapshots import SnapshotWriter
from streams.recording import RecordingStore
from vigil.rollups import Rollups
from vigil.services.apps import AppService
from vigil.services.cameras import CameraService
from vigil.services.captions import Captions
from vigil.services.clips import ClipService
from vigil.services.errors import Conflict, Invalid, NotFound
from vigil.services.events import EventService, overview
from vigil.services.llm import LLMService
from vigil.services.models import ModelService
from vigil.services.sinks import SinkService
from vigil.services.streams import StreamService
from vigil.settings import Settings, SettingsError
from vigil.storage import Storage, StorageFull

log = logging.getLogger("vigil.service")


class Vigil:
    def __init__(self, settings: Settings, clock: Callable[[], float] = monotonic_ms,
                 wall_s: Callable[[], float] = time.time,
                 reread: Callable[[], Settings] | None = None) -> None:
        self.settings = settings
        self.reread = reread  # the config file read again (POST /v1/config/reload, SIGHUP)
        self.storage = Storage(settings.data_dir / "vigil.db")
        self.repository = ModelRepository(settings.model_repository)
        self.device = resolve_device(settings.device)
        self.engine = _engine(settings, self.repository, self.device, clock)
        self.rollups = Rollups(settings.rollup_interval_s, wall_s)
        self.engine.metrics.listeners.append(self.rollups)
        governor = LoadGovernor()  # every stream's apps under one view of the shared engine
        captions = Captions(self.storage, settings.caption_every_s)
        self.models = ModelService(self.repository, self.engine, self.storage, settings.limits)
        shots = settings.snapshots
        self.snapshots = SnapshotWriter(settings.data_dir / "snapshots", shots.retain_days, shots.max_mb, wall_s) \
            if shots.enabled else None
        rec = settings.recording
        recordings = RecordingStore(settings.data_dir / "recordings", rec.segment_s, rec.retain_days, rec.max_gb,
                                    wall_s) if rec.enabled else None
        actors = StreamActors(self.engine.nodes) if isinstance(self.engine, ClusterEngine) and \
            settings.cluster is not None and settings.cluster.actors else None
        self.streams = StreamService(settings, self.storage, self.engine, governor, clock, on_block=captions.observe,
                                     snapshots=self.snapshots, recordings=recordings, actors=actors)
        self.clips = ClipService(recordings, rec, self.storage)
        self.apps = AppService(settings.limits, self.storage, self.streams, self.models, self.engine, self.rollups,
                               governor)
        self.events = EventService(self.storage, settings.limits, self.snapshots)
        self.cameras = CameraService(self.streams, self.apps)
        self.sinks = SinkService(settings.sinks, self.storage, self.engine.metrics.registry)
        self.llm = LLMService(settings, self.device, self.engine.arbiter, LLMSeries(self.engine.metrics.registry),
                              self.storage, captions, self.streams, self.apps)
        self._restoring = True
        self._stop = threading.Event()
        self._rollups_thread = threading.Thread(target=self._save_rollups, name="rollups", daemon=True)

    def start(self) -> None:
        """Bring back what storage holds (labels, streams, apps), load the LLM, then serve."""
        self.sinks.start()
        self.models.restore()
        self.streams.restore()
        self.apps.restore()
        self.cameras.apply(self.settings.cameras)
        self.llm.load()
        self._restoring = False
        self._rollups_thread.start()

    def patch_stream(self, name: str, url: str | None, options: dict) -> dict:
        """PATCH /v1/streams/{name}: the url, or some options, changed; its apps stay."""
        stored = self.streams.stored(name)
        if stored is None:
            raise NotFound(f"no stream {name!r}")
        return self.cameras.replace_stream(name, url or stored[0], {**stored[1], **options})

    def reload_config(self) -> dict:
        """Read the config file again and apply its cameras (and their apps); every other
        setting takes a restart. SettingsError when the file is wrong: nothing changes."""
        if self.reread is None:
            raise Conflict("this server was not started from a config file it can read again")
        try:
            settings = self.reread()
        except SettingsError as exc:
            raise Invalid(f"config: {exc}") from None
        report = self.cameras.apply(settings.cameras)
        log.info("config reloaded: %s", {k: v for k, v in report.items() if v})
        return report

    @property
    def ready(self) -> bool:
        return not self._restoring and self.engine.ready

    def overview(self) -> dict:
        """The dashboard's view of every app and stream."""
        return overview(self.streams, self.apps, self.ready, self.engine.load_report(), self.clustered)

    @property
    def clustered(self) -> bool:
        """Whether the engine runs on a Ray cluster (`--cluster`) rather than in this process."""
        return isinstance(self.engine, ClusterEngine)

    def close(self) -> None:
        """Graceful: stop the streams, finish their blocks in flight, flush events and
        metric windows, then the LLM, the engine and the database."""
        self._stop.set()
        self.sinks.stop()  # what is not delivered yet goes at the next start
        self.streams.stop_all()
        self.llm.close()
        self.engine.close(drain=True)
        if self._rollups_thread.is_alive():
            self._rollups_thread.join()
        try:
            self.storage.add_rollups(self.rollups.tick())
        except StorageFull:
            pass  # said in the log already; the events written before are safe
        self.storage.close()

    def cluster_plan(self) -> dict:
        """GET /v1/cluster: the global scheduler's plan and each backend's report."""
        if not self.clustered:
            raise NotFound("this server runs its engine in its own process (start it with --cluster)")
        return self.engine.plan()

    def _save_rollups(self) -> None:
        while not self._stop.wait(self.settings.rollup_interval_s):
            try:
                self.storage.add_rollups(self.rollups.tick())
            except StorageFull:
                pass  # said once by storage
            except Exception:
                log.exception("could not save metric windows")


def _engine(settings: Settings, repository: ModelRepository, device: str, clock: Callable[[], float]) -> Engine:
    """In this process, or the front door's engine of a Ray cluster (cluster/front.py)."""
    if settings.cluster is None:
        return Engine(repository, device, policy=settings.policy, clock=clock, lanes=settings.lanes)
    c = settings.cluster
    return connect(c.address, repository, c.cpus_per_backend, c.beacon_s, clock)
