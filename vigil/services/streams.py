"""Streams: each registered stream is a `StreamWorker` (its managed source and the
thread that cuts blocks and runs its apps). Registered streams are written to storage
before they start, so a restart brings them back.

`lock` guards the table of workers; the apps service takes the same lock, since an app
lives on its stream's worker.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Any, Callable

from pydantic import ValidationError

from apps.app import App
from apps.spec import NAME_RULE, format_errors, valid_name
from cluster.actors import StreamActors
from cluster.app_host import HostClient
from core.events import Event
from core.frames import FrameBlock
from engine.engine import Engine
from runtime.load import LoadGovernor
from runtime.snapshots import SnapshotWriter
from runtime.worker import StreamWorker
from streams.live import ManagedStream
from streams.options import StreamOptions
from streams.recording import RecordingStore
from streams.urls import NoSuchFile, NotAllowed, check_url, is_live_url, redact_url
from vigil.services.errors import Conflict, Forbidden, Invalid, NotFound, ServiceError
from vigil.settings import Settings
from vigil.storage import Storage

log = logging.getLogger("vigil.services.streams")

# (stream, t_ms, events, app -> class -> in view) after each block: scene facts for captions
OnBlock = Callable[[str, float, list[dict], dict[str, dict[str, int]]], None]


def stream_options(options: Any) -> StreamOptions:
    try:
        return StreamOptions.model_validate(options)
    except ValidationError as exc:
        raise Invalid(format_errors(exc.errors(), "options", StreamOptions)) from None


class StreamService:
    def __init__(self, settings: Settings, storage: Storage, engine: Engine, governor: LoadGovernor,
                 clock: Callable[[], float], on_block: OnBlock | None = None,
                 snapshots: SnapshotWriter | None = None, recordings: RecordingStore | None = None,
                 actors: StreamActors | None = None) -> None:
        """`actors`: on a Ray cluster, where streams decode and their apps run (cluster/actors.py);
        without, in this process."""
        self.settings = settings
        self.actors = actors
        self.snapshots = snapshots
        self.recordings = recordings
        self.storage = storage
        self.engine = engine
        self.governor = governor
        self.clock = clock
        self.on_block = on_block
        self.policy = settings.limits.source_policy()
        self.lock = threading.RLock()
        self.workers: dict[str, StreamWorker] = {}
        self.hosts: dict[str, HostClient] = {}  # stream -> its app actor, on a cluster

    def restore(self) -> None:
        """Start the streams storage holds; one that cannot start is logged and skipped."""
        for name, url, options in self.storage.streams():
            try:
                self._start(name, self._checked_url(url), stream_options(options))
            except ServiceError as exc:
                log.warning("stream %s not restored: %s", name, exc)

    def add(self, name: str, url: str, options: StreamOptions | dict[str, Any] | None = None) -> dict:
        if not valid_name(name):
            raise Invalid(f"name: must be {NAME_RULE}; was {name!r}"[:300])
        urls = self._checked_url(url)
        opts = options if isinstance(options, StreamOptions) else stream_options(options or {})
        limits = self.settings.limits
        with self.lock:
            if name in self.workers:
                raise Conflict(f"stream {name!r} exists; DELETE it first or use another name")
            if len(self.workers) >= limits.max_streams:
                raise Conflict(f"at most {limits.max_streams} streams (limits.max_streams); delete one first")
            self.storage.put_stream(name, url, opts.model_dump())
            self._start(name, urls, opts)
        log.info("stream %s added (%s)", name, redact_url(url))
        return self.get(name)

    def check(self, url: str, options: StreamOptions | dict[str, Any]) -> None:
        """What `add` would refuse in a url or options, without adding anything."""
        self._checked_url(url)
        if not isinstance(options, StreamOptions):
            stream_options(options)

    def stored(self, name: str) -> tuple[str, dict] | None:
        """The url and options `name` was added with, as stored (the url not redacted)."""
        return next(((url, opts) for n, url, opts in self.storage.streams() if n == name), None)

    def get(self, name: str) -> dict:
        with self.lock:
            worker = self.workers.get(name)
            if worker is None:
                raise NotFound(f"no stream {name!r}")
        s = worker.stream.status()
        host = self.hosts.get(name)
        # on a cluster: where the stream decodes and its apps run, and how often each actor was lost
        actors = None if host is None else {"ingest": s["ingest"], "apps": host.where()}
        # a file has ended once its last frames are analysed and its apps finished, not decoded
        status = "live" if s["status"] == "ended" and worker.running else s["status"]
        return {"name": name, "url": s["url"], "status": status, "last_error": s["last_error"],
                "frames_decoded": s["frames_decoded"], "frames_dropped": s["frames_dropped"],
                "frames_skipped": s["frames_skipped"], "frames_not_decoded": s["frames_not_decoded"],
                "reconnects": s["reconnects"], "gaps": s["gaps"], "last_gap_ms": s["last_gap_ms"],
                "decode_errors": s["decode_errors"], "live": s["live"], "apps": worker.app_names(),
                "overloaded": any(self.governor.state(a)["overloaded"] for a in worker.app_names()),
                "options": worker.stream.options.model_dump(), "actors": actors}

    def list(self) -> list[dict]:
        with self.lock:
            names = list(self.workers)
        return [self.get(n) for n in names]

    def names(self) -> list[str]:
        with self.lock:
            return list(self.workers)

    def delete(self, name: str) -> None:
        with self.lock:
            worker = self.workers.get(name)
            if worker is None:
                raise NotFound(f"no stream {name!r}")
            users = worker.app_names()
            if users:
                raise Conflict(f"stream {name!r} is used by apps {users}; delete them first")
            del self.workers[name]
            self.hosts.pop(name, None)
            self.storage.delete_stream(name)
        worker.stop()

    def stop_all(self) -> None:
        """Stop every stream, finishing its blocks in flight (they stay registered in storage)."""
        with self.lock:
            workers = list(self.workers.values())
        for w in workers:
            w.stop()

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

    def _start(self, name: str, urls: tuple[str, str], opts: StreamOptions) -> None:
        """A new run of the stream: its events carry the run's number, and a file's
        time goes on after the times of earlier runs, so windows never mix them."""
        opened, given = urls
        run = self.storage.start_run(name)
        start_ms = 0.0
        if not is_live_url(opened):
            ends = [self.storage.last_event_ms(name)]
            if self.recordings is not None:  # nor over its earlier footage
                ends += [s.end_ms for s in self.recordings.segments(name)]
            last = max((e for e in ends if e is not None), default=None)
            start_ms = 0.0 if last is None else (math.floor(last / 1000.0) + 1) * 1000.0
        make_app, on_stop = App, None
        if self.actors is not None:
            stream, host = self.actors.start(name, opened, opts, start_ms, given, self.clock,
                                             None if self.recordings is None else self.recordings.config())
            make_app, on_stop = host.app, host.close
            self.hosts[name] = host
        else:
            recorder = None if self.recordings is None else self.recordings.recorder(name)
            stream = ManagedStream(name, opened, opts, clock=self.clock, start_ms=start_ms, shown_url=given,
                                   recorder=recorder)
        s = self.settings
        worker = StreamWorker(stream, self.engine, lambda events, frames: self._store_events(events, run, frames),
                              s.block_frames, s.block_ms, self.clock, on_block=self.on_block, governor=self.governor,
                              quiet_after_s=s.quiet_after_s, make_app=make_app, on_stop=on_stop)
        self.workers[name] = worker.start()

    def _store_events(self, events: list[Event], run: int, frames: FrameBlock | None) -> list[dict]:
        if self.snapshots is not None:  # written first: a stored event's snapshot is there
            events = self.snapshots.attach(events, frames)
        return self.storage.add_events([{**e.to_dict(), "run": run} for e in events])
