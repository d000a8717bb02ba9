"""The service behind `vigil serve`: streams, apps, models and events, as plain
functions that the REST routers, the gRPC servicer and the CLI all call.

Mistakes are exceptions with a message for the user: `Forbidden` (403: the limits do
not allow it), `NotFound` (404, also for a name in a body that names nothing),
`Conflict` (409), `Invalid` (422, naming the field), `Overloaded` (503). Everything registered is
written to storage first, so a restart brings the same streams and apps back.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from pydantic import ValidationError

from apps.events import EVENT_TYPES, Event
from apps.spec import LIVE_FIELDS, NAME_RULE, AppSpec, SpecError, format_errors, parse_spec, valid_name
from engine.device import resolve_device
from engine.engine import Engine
from engine.repository import ModelRepository, RepositoryError
from llm.captions import FactsCollector
from llm.engine import EngineConfig, EngineFull
from llm.facts import caption_prompt, facts_text
from llm.metrics import LLMMetrics
from llm.qa import Embedder, answer
from llm.sampling import SamplingParams
from llm.serving import load_llm
from streams.live import ManagedStream, StreamOptions
from streams.source import monotonic_ms
from streams.urls import NoSuchFile, NotAllowed, check_url, is_live_url, redact_url
from vigil.load import LoadGovernor
from vigil.rollups import Rollups
from vigil.settings import Settings
from vigil.storage import EventQuery, Storage, StorageFull
from vigil.worker import StreamWorker

log = logging.getLogger("vigil.service")

# what PATCH /v1/apps/{name} may change while the app runs


class ServiceError(Exception):
    status = 400
    headers: dict[str, str] | None = None


class Unauthorized(ServiceError):
    status = 401
    headers = {"WWW-Authenticate": "Bearer"}


class Forbidden(ServiceError):
    status = 403


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    status = 409


class Invalid(ServiceError):
    status = 422


class TooLarge(ServiceError):
    status = 413


class Overloaded(ServiceError):
    status = 503
    headers = {"Retry-After": "1"}


def _stream_options(options: Any) -> StreamOptions:
    try:
        return StreamOptions.model_validate(options)
    except ValidationError as exc:
        raise Invalid(format_errors(exc.errors(), "options", StreamOptions)) from None


ASK_THREADS = 4  # questions answered at once (each waits on the LLM); the rest queue, up to the LLM's bound


class Vigil:
    def __init__(self, settings: Settings, clock: Callable[[], float] = monotonic_ms,
                 wall_s: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.clock = clock
        self.storage = Storage(settings.data_dir / "vigil.db")
        self.repository = ModelRepository(settings.model_repository)
        self.device = resolve_device(settings.device)
        self.engine = Engine(self.repository, self.device, policy=settings.policy, clock=clock)
        self.rollups = Rollups(settings.rollup_interval_s, wall_s)
        self.engine.metrics.listeners.append(self.rollups)
        self.load = LoadGovernor()  # every stream's apps under one view of the shared engine
        self.llm_metrics = LLMMetrics(self.engine.metrics.registry)
        self.llm = None  # the LLM engine, loaded by start()
        self._facts: dict[str, FactsCollector] = {}
        self._captions: queue.Queue = queue.Queue()
        self._embedder: Embedder | None = None
        self._embedder_lock = threading.Lock()
        self._lock = threading.RLock()
        self.workers: dict[str, StreamWorker] = {}
        self.apps: dict[str, AppSpec] = {}
        self.started_s = wall_s()
        self._restoring = True
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick_loop, name="rollups", daemon=True)
        self._asks = ThreadPoolExecutor(ASK_THREADS, thread_name_prefix="ask")
        self._asks_in_flight = 0
        self.policy = settings.limits.source_policy()

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Bring back what storage holds (labels, streams, apps), then serve."""
        for model, label, version in self.storage.labels():
            try:
                self.engine.load(model)
                self.engine.set_label(model, label, version)
            except (RepositoryError, LookupError, ValueError) as exc:
                log.warning("label %s=%s of %s not restored: %s", label, version, model, exc)
        for name, url, options in self.storage.streams():
            try:
                self._start_stream(name, self._checked_url(url), _stream_options(options))
            except ServiceError as exc:
                log.warning("stream %s not restored: %s", name, exc)
        for data in self.storage.apps():
            try:
                spec = parse_spec(data, origin=f"stored app {data.get('name')!r}")
                self._attach(spec)
            except (SpecError, ServiceError) as exc:
                log.warning("%s", exc)
        self._load_llm()
        self._restoring = False
        self._ticker.start()

    def _load_llm(self) -> None:
        name = self.settings.llm_model
        if not name:
            return
        try:
            config = EngineConfig(max_waiting=self.settings.limits.max_waiting_llm_requests,
                                  min_share=self.settings.llm_min_share)
            self.llm = load_llm(self.settings.model_repository, name, self.device, config, vision=self.engine,
                                metrics=self.llm_metrics).start()
            threading.Thread(target=self._caption_loop, name="captions", daemon=True).start()
            log.info("LLM %s loaded", name)
        except (FileNotFoundError, ValueError) as exc:
            log.warning("LLM %s not loaded: %s", name, exc)

    def llm_engine(self, model: str | None = None):
        if self.llm is None:
            raise Overloaded("the LLM is not loaded (yet); see /readyz and the server log")
        if model not in (None, self.llm.name):
            raise NotFound(f"model: no LLM {model!r}; served: {self.llm.name!r}")
        return self.llm

    # -- captions and questions ---------------------------------------------------------------------
    def _on_block(self, stream: str, t_ms: float, events: list[dict], in_view: dict[str, dict[str, int]]) -> None:
        if self.llm is None or not self.settings.caption_every_s:
            return
        collector = self._facts.get(stream)
        if collector is None:
            collector = self._facts[stream] = FactsCollector(stream, self.settings.caption_every_s * 1000.0)
        done = collector.observe(t_ms, events, in_view)
        if done is not None:
            try:
                handle = self.llm.add_request(caption_prompt(done), SamplingParams(max_tokens=96, stop=("\n",)),
                                              priority=0, stream=False)  # low priority: after questions, completions
            except EngineFull:
                log.warning("caption of %s skipped: the LLM has too many requests waiting", stream)
                return
            self._captions.put((done, handle))

    def _caption_loop(self) -> None:
        while not self._stop.is_set():
            try:
                facts, handle = self._captions.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                out = handle.result(timeout_s=300)
                if out.finish_reason in ("stop", "length"):
                    self.storage.add_caption(facts.stream, facts.t_start_ms, facts.t_end_ms, out.text.strip(),
                                             facts_text(facts), facts.event_ids)
            except Exception:
                log.exception("caption for %s failed", facts.stream)

    def submit_ask(self, question: str, stream: str | None = None, since_ms: float | None = None,
                   until_ms: float | None = None) -> Future:
        """`ask` on the service's own few threads (a question waits on the LLM: it must
        not hold a thread of the pool that serves every other route). Overloaded past
        `limits.max_waiting_llm_requests` questions in flight."""
        self.llm_engine()
        with self._lock:
            if self._asks_in_flight >= self.settings.limits.max_waiting_llm_requests:
                raise Overloaded(f"{self._asks_in_flight} questions are being answered already (the most allowed, "
                                 "limits.max_waiting_llm_requests); try again shortly")
            self._asks_in_flight += 1
        future = self._asks.submit(self.ask, question, stream, since_ms, until_ms)
        future.add_done_callback(self._ask_done)
        return future

    def _ask_done(self, _: Future) -> None:
        with self._lock:
            self._asks_in_flight -= 1

    def ask(self, question: str, stream: str | None = None, since_ms: float | None = None,
            until_ms: float | None = None) -> dict:
        engine = self.llm_engine()
        if stream is not None and stream not in self.workers:
            raise NotFound(f"no stream {stream!r}")
        lines = sorted({name for s in self.apps.values() for name in s.lines})
        zones = sorted({name for s in self.apps.values() for name in s.zones})
        def generate(prompt: str) -> str:
            try:
                handle = engine.add_request(prompt, SamplingParams(max_tokens=64, stop=("\n",)), priority=8,
                                            stream=False)
            except EngineFull as exc:
                raise Overloaded(str(exc)) from None
            return handle.result(120).text

        return answer(question, self.storage.all_events(stream), self.storage.captions(stream), generate,
                      lines, zones, self._sentence_embedder, stream, since_ms, until_ms)

    def _sentence_embedder(self) -> Embedder:
        """Loaded once, by the first question that has captions to rank (about 8 s on two
        cores): a question that is refused, or has no captions in its window, never waits
        for it."""
        with self._embedder_lock:
            if self._embedder is None:
                self._embedder = Embedder()
            return self._embedder

    @property
    def ready(self) -> bool:
        return not self._restoring and self.engine.ready

    def close(self) -> None:
        """Graceful: stop the streams, finish their blocks in flight, flush events and
        metric windows, then the engine and the database."""
        self._stop.set()
        with self._lock:
            workers = list(self.workers.values())
        for w in workers:
            w.stop()
        self._asks.shutdown(wait=False, cancel_futures=True)
        if self.llm is not None:
            self.llm.close()
        self.engine.close(drain=True)
        try:
            self.storage.add_rollups(self.rollups.tick())
        except StorageFull:
            pass  # said in the log already; the events written before are safe
        self.storage.close()

    def _tick_loop(self) -> None:
        while not self._stop.wait(self.settings.rollup_interval_s):
            try:
                self.storage.add_rollups(self.rollups.tick())
            except StorageFull:
                pass  # said once by storage
            except Exception:
                log.exception("could not save metric windows")

    # -- streams ------------------------------------------------------------------------------------
    def add_stream(self, name: str, url: str, options: StreamOptions | dict[str, Any] | None = None) -> dict:
        if not valid_name(name):
            raise Invalid(f"name: must be {NAME_RULE}; was {name!r}"[:300])
        urls = self._checked_url(url)
        opts = options if isinstance(options, StreamOptions) else _stream_options(options or {})
        with self._lock:
            if name in self.workers:
                raise Conflict(f"stream {name!r} exists; DELETE it first or use another name")
            if len(self.workers) >= self.settings.limits.max_streams:
                raise Conflict(f"at most {self.settings.limits.max_streams} streams (limits.max_streams); "
                               "delete one first")
            self.storage.put_stream(name, url, opts.model_dump())
            self._start_stream(name, urls, opts)
        log.info("stream %s added (%s)", name, redact_url(url))
        return self.stream(name)

    def _checked_url(self, url: str) -> tuple[str, str]:
        """(what to open, the URL as given) if the source policy allows it."""
        try:
            return check_url(url, self.policy), url
        except NotAllowed as exc:
            raise Forbidden(str(exc)) from None
        except NoSuchFile as exc:
            raise NotFound(str(exc)) from None
        except ValueError as exc:
            raise Invalid(str(exc)) from None

    def _start_stream(self, name: str, urls: tuple[str, str], opts: StreamOptions) -> None:
        """A new run of the stream: its events carry the run's number, and a file's
        time goes on after the times of earlier runs, so windows never mix them."""
        opened, given = urls
        run = self.storage.start_run(name)
        start_ms = 0.0
        if not is_live_url(opened):
            last = self.storage.last_event_ms(name)
            start_ms = 0.0 if last is None else (math.floor(last / 1000.0) + 1) * 1000.0
        stream = ManagedStream(name, opened, opts, clock=self.clock, start_ms=start_ms, shown_url=given)
        worker = StreamWorker(stream, self.engine, lambda events: self._store_events(events, run),
                              self.settings.block_frames, self.settings.block_ms, self.clock, on_block=self._on_block,
                              governor=self.load, quiet_after_s=self.settings.quiet_after_s)
        self.workers[name] = worker.start()

    def _store_events(self, events: list[Event], run: int) -> list[dict]:
        return self.storage.add_events([{**e.to_dict(), "run": run} for e in events])

    def stream(self, name: str) -> dict:
        with self._lock:
            worker = self.workers.get(name)
            if worker is None:
                raise NotFound(f"no stream {name!r}")
        s = worker.stream.status()
        return {"name": name, "url": s["url"], "status": s["status"], "last_error": s["last_error"],
                "frames_decoded": s["frames_decoded"], "frames_dropped": s["frames_dropped"],
                "reconnects": s["reconnects"], "gaps": s["gaps"], "last_gap_ms": s["last_gap_ms"],
                "decode_errors": s["decode_errors"], "live": s["live"], "apps": worker.app_names(),
                "overloaded": any(self.load.state(a)["overloaded"] for a in worker.app_names()),
                "options": worker.stream.options.model_dump()}

    def streams(self) -> list[dict]:
        with self._lock:
            names = list(self.workers)
        return [self.stream(n) for n in names]

    def delete_stream(self, name: str) -> None:
        with self._lock:
            if name not in self.workers:
                raise NotFound(f"no stream {name!r}")
            users = [a for a, s in self.apps.items() if s.source == name]
            if users:
                raise Conflict(f"stream {name!r} is used by apps {users}; delete them first")
            worker = self.workers.pop(name)
            self.storage.delete_stream(name)
        worker.stop()

    # -- apps ---------------------------------------------------------------------------------------
    def add_app(self, data: Any) -> dict:
        spec = self._parse(data)
        with self._lock:
            if spec.name in self.apps:
                raise Conflict(f"app {spec.name!r} exists; PATCH it, or DELETE it first")
            if len(self.apps) >= self.settings.limits.max_apps:
                raise Conflict(f"at most {self.settings.limits.max_apps} apps (limits.max_apps); delete one first")
            self._check_app(spec)
            self.storage.put_app(spec.name, spec.model_dump(mode="json"))
            self._attach(spec)
        return self.app(spec.name)

    def _parse(self, data: Any) -> AppSpec:
        try:
            return parse_spec(data)
        except SpecError as exc:
            raise Invalid(str(exc).replace("app spec: ", "", 1)) from None

    def _check_app(self, spec: AppSpec) -> None:
        if spec.source is None:
            raise Invalid("source: name the stream this app watches (POST /v1/streams first)")
        if spec.source not in self.workers:
            raise NotFound(f"source: no stream {spec.source!r}; streams: {sorted(self.workers)}")
        if spec.host_detector:
            return
        if spec.detector not in self.repository.model_names():
            raise NotFound(f"detector: {spec.detector!r} is neither a host detector nor a model in the "
                           f"repository ({', '.join(self.repository.model_names())})")
        try:
            versions = self.repository.versions(spec.detector)
            labels = self.repository.spec(spec.detector, max(versions)).labels
        except (RepositoryError, ValueError) as exc:
            raise Invalid(f"detector: {exc}") from None
        unknown = [c for c in spec.classes or [] if c not in labels]
        if unknown:
            raise Invalid(f"classes: {unknown} are not labels of {spec.detector!r} ({list(labels)})")

    def _attach(self, spec: AppSpec) -> None:
        worker = self.workers.get(spec.source or "")
        if worker is None:
            raise Invalid(f"source: no stream {spec.source!r}")
        self.apps[spec.name] = spec
        worker.set_app(spec)

    def app(self, name: str) -> dict:
        with self._lock:
            spec = self.apps.get(name)
            if spec is None:
                raise NotFound(f"no app {name!r}")
            worker = self.workers.get(spec.source or "")
        status = worker.app_status.get(name) if worker else None
        return {"name": name, "spec": spec.model_dump(mode="json"),
                "status": status.status if status else "failed",
                "error": self.shown(status.error) if status else "its stream is gone",
                "warning": worker.app_warning(name) if worker else None,
                "load": self.load.state(name),
                "counts": worker.app_counts(name) if worker else None}

    def list_apps(self) -> list[dict]:
        with self._lock:
            names = list(self.apps)
        return [self.app(n) for n in names]

    def patch_app(self, name: str, changes: Any) -> dict:
        if not isinstance(changes, dict):
            raise Invalid(f"body: send a mapping of fields to change ({', '.join(LIVE_FIELDS)})")
        fixed = sorted(set(changes) - set(LIVE_FIELDS))
        if fixed:
            raise Invalid(f"{fixed[0]}: cannot change while running (live fields: {', '.join(LIVE_FIELDS)}); "
                          "DELETE and POST the app instead")
        with self._lock:
            old = self.apps.get(name)
            if old is None:
                raise NotFound(f"no app {name!r}")
            spec = self._parse({**old.model_dump(mode="json"), **changes})
            self.storage.put_app(name, spec.model_dump(mode="json"))
            self._attach(spec)
        return self.app(name)

    def delete_app(self, name: str) -> None:
        with self._lock:
            spec = self.apps.pop(name, None)
            if spec is None:
                raise NotFound(f"no app {name!r}")
            self.storage.delete_app(name)
            worker = self.workers.get(spec.source or "")
        if worker:
            worker.remove_app(name)
        self.rollups.forget(name)
        self.load.forget(name)

    def app_metrics(self, name: str) -> dict:
        with self._lock:
            spec = self.apps.get(name)
            if spec is None:
                raise NotFound(f"no app {name!r}")
        total = self.engine.metrics.app_summary(name)
        minute = self.rollups.summary(name, 60.0)
        hour = self.rollups.summary(name, 3600.0)
        # only the batch histograms: a snapshot would take percentiles of every app
        batches = self.engine.metrics.batch_histograms()
        return {"app": name, "slo_ms": spec.slo_ms, "slo_attainment": total["slo_attainment"],
                "slo_attainment_1m": minute["slo_attainment"], "slo_attainment_1h": hour["slo_attainment"],
                "latency_ms": total["latency_ms"], "latency_all_ms": total["latency_all_ms"],
                "throughput_fps": minute["throughput_fps"], "load": self.load.state(name),
                "arrived": total["arrived"], "completed": total["completed"], "within_slo": total["within_slo"],
                "skipped": total["skipped"],
                "dropped": total["dropped"],
                "batch_size": {k: v for k, v in batches.items() if k.startswith(f"{spec.detector}/")}}

    def app_series(self, name: str, since_s: float = 3600.0) -> list[dict]:
        if name not in self.apps:
            raise NotFound(f"no app {name!r}")
        return self.rollups.series(name, since_s)

    def app_snapshot(self, name: str) -> bytes:
        with self._lock:
            spec = self.apps.get(name)
            if spec is None:
                raise NotFound(f"no app {name!r}")
            worker = self.workers.get(spec.source or "")
        jpeg = worker.snapshots.get(name) if worker else None
        if jpeg is None:
            raise NotFound(f"app {name!r} has no frame yet")
        return jpeg

    # -- models -------------------------------------------------------------------------------------
    def models(self) -> list[dict]:
        loaded = self.engine.models()
        out = []
        for name in self.repository.model_names():
            try:
                config = self.repository.config(name)
                on_disk = self.repository.versions(name)
                error = None
            except (RepositoryError, ValueError) as exc:
                config, on_disk, error = None, [], str(exc)
            live = loaded.get(name, {})
            labels = dict(config.labels) if config else {}
            labels.update(live.get("labels", {}))
            out.append({"name": name, "versions_on_disk": on_disk,
                        "loaded": sorted(int(v) for v in live.get("versions", {})),
                        "labels": labels, "error": self.shown(error)})
        return out

    def model(self, name: str) -> dict:
        for m in self.models():
            if m["name"] == name:
                return m
        raise NotFound(f"no model {name!r} in the model repository ({', '.join(self.repository.model_names())})")

    def _model_call(self, name: str, fn: Callable[[], Any]) -> Any:
        if name not in self.repository.model_names():
            raise NotFound(f"no model {name!r} in the model repository ({', '.join(self.repository.model_names())})")
        try:
            return fn()
        except RepositoryError as exc:
            raise Invalid(self.shown(str(exc))) from None
        except (LookupError, ValueError) as exc:
            raise Conflict(self.shown(str(exc))) from None

    def shown(self, text: str | None) -> str | None:
        """A message for a client: paths inside the model repository relative to it
        (the server's own folders are not the client's business)."""
        root = str(self.repository.root)
        return None if text is None else text.replace(root + "/", "").replace(root, "the model repository")

    def load_model(self, name: str, versions: list[int] | None = None) -> dict:
        self._model_call(name, lambda: self.engine.load(name, versions))
        return self.model(name)

    def unload_model(self, name: str, version: int | None = None) -> dict:
        self._model_call(name, lambda: self.engine.unload(name, version))
        return self.model(name)

    def add_model_version(self, name: str, archive: Path) -> dict:
        """An uploaded archive of a version folder becomes `name`'s next version, once it
        loads (vigil/model_upload.py); the server's own model files are never touched."""
        from engine.adapters import load_model
        from engine.repository import NAME, read_spec
        from vigil.model_upload import UploadError, add_version

        if not NAME.match(name):
            raise Invalid(f"name: a model name is lowercase letters, digits, - and _ (at most 64); was {name!r}")
        limits = self.settings.limits

        def check(folder: Path, version: int) -> None:
            spec = read_spec(folder / "model.yaml", name)
            model = load_model(spec, folder, version, "cpu")  # it must build and run before it is added
            del model

        try:
            version = add_version(self.repository.root, name, archive, limits.max_model_upload_bytes,
                                  limits.max_model_files, check)
        except UploadError as exc:
            raise Invalid(f"archive: {exc}") from None
        except RepositoryError as exc:
            raise Invalid(self.shown(str(exc)).replace(".upload-", "upload ")) from None
        log.info("model %s: version %d added from an upload", name, version)
        if name in self.engine.models():
            self._model_call(name, lambda: self.engine.reload(name))
        return {**self.model(name), "added_version": version}

    def reload_model(self, name: str) -> dict:
        self._model_call(name, lambda: self.engine.reload(name))
        return self.model(name)

    def set_label(self, name: str, label: str, version: int) -> dict:
        def apply() -> None:
            self.engine.ensure_loaded(name)  # a label points at a loaded version
            self.engine.set_label(name, label, version)

        self._model_call(name, apply)
        self.storage.put_label(name, label, version)
        return self.model(name)

    # -- events -------------------------------------------------------------------------------------
    def events(self, app: str | None = None, stream: str | None = None, type: str | None = None,
               since_ms: float | None = None, until_ms: float | None = None, after_id: int = 0,
               limit: int = 100) -> dict:
        if type is not None and type not in EVENT_TYPES:
            raise Invalid(f"type: must be one of {list(EVENT_TYPES)}; was {type!r}")
        limit = max(1, min(limit, self.settings.limits.max_page_size))
        items = self.storage.events(EventQuery(app, stream, type, since_ms, until_ms, after_id, limit))
        return {"events": items, "next_after_id": items[-1]["id"] if len(items) == limit else None}

    # -- overview (dashboard) -----------------------------------------------------------------------
    def overview(self) -> dict:
        apps = []
        streams_now = self.streams()
        for a in self.list_apps():
            m = self.app_metrics(a["name"])
            streams = [s for s in streams_now if s["name"] == a["spec"]["source"]]
            apps.append({"name": a["name"], "status": a["status"], "error": a["error"],
                         "detector": a["spec"]["detector"], "slo_ms": m["slo_ms"],
                         "attainment_1m": m["slo_attainment_1m"], "attainment_1h": m["slo_attainment_1h"],
                         "latency_ms": m["latency_ms"], "latency_all_ms": m["latency_all_ms"], "load": m["load"],
                         "throughput_fps": m["throughput_fps"],
                         "dropped": m["dropped"], "batch_size": m["batch_size"], "counts": a["counts"],
                         "streams": [{k: s[k] for k in ("name", "status", "last_error", "reconnects",
                                                         "frames_decoded", "frames_dropped")} for s in streams]})
        return {"apps": apps, "streams": streams_now, "ready": self.ready, "device": self.engine.load_report()}
