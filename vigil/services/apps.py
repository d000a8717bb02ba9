"""Apps: camera app specs, each attached to the worker of the stream it watches, with
its status, SLO metrics, metric windows and latest annotated frame. Registered specs
are written to storage before they attach, so a restart brings them back.
"""

from __future__ import annotations

import logging
from typing import Any

from apps.spec import LIVE_FIELDS, AppSpec, SpecError, parse_spec
from engine.engine import Engine
from runtime.load import LoadGovernor
from vigil.rollups import Rollups
from vigil.services.errors import Conflict, Invalid, NotFound, ServiceError
from vigil.services.models import ModelService
from vigil.services.streams import StreamService
from vigil.settings import Limits
from vigil.storage import Storage

log = logging.getLogger("vigil.services.apps")


class AppService:
    def __init__(self, limits: Limits, storage: Storage, streams: StreamService, models: ModelService,
                 engine: Engine, rollups: Rollups, governor: LoadGovernor) -> None:
        self.limits = limits
        self.storage = storage
        self.streams = streams
        self.models = models
        self.engine = engine
        self.rollups = rollups
        self.governor = governor
        self.lock = streams.lock  # an app lives on its stream's worker: one lock keeps both tables consistent
        self.specs: dict[str, AppSpec] = {}

    def restore(self) -> None:
        """Attach the apps storage holds (after the streams); one that cannot is logged and skipped."""
        for data in self.storage.apps():
            try:
                spec = parse_spec(data, origin=f"stored app {data.get('name')!r}")
                with self.lock:
                    self._attach(spec)
            except (SpecError, ServiceError) as exc:
                log.warning("%s", exc)

    def add(self, data: Any) -> dict:
        spec = parse_app(data)
        with self.lock:
            if spec.name in self.specs:
                raise Conflict(f"app {spec.name!r} exists; PATCH it, or DELETE it first")
            if len(self.specs) >= self.limits.max_apps:
                raise Conflict(f"at most {self.limits.max_apps} apps (limits.max_apps); delete one first")
            self._check(spec)
            self.storage.put_app(spec.name, spec.model_dump(mode="json"))
            self._attach(spec)
        return self.get(spec.name)

    def get(self, name: str) -> dict:
        with self.lock:
            spec = self.specs.get(name)
            if spec is None:
                raise NotFound(f"no app {name!r}")
            worker = self.streams.workers.get(spec.source or "")
        status = worker.app_status.get(name) if worker else None
        return {"name": name, "spec": spec.model_dump(mode="json"),
                "status": status.status if status else "failed",
                "error": self.models.shown(status.error) if status else "its stream is gone",
                "warning": worker.app_warning(name) if worker else None,
                "load": self.governor.state(name),
                "counts": worker.app_counts(name) if worker else None}

    def names(self) -> list[str]:
        with self.lock:
            return list(self.specs)

    def list(self) -> list[dict]:
        return [self.get(n) for n in self.names()]

    def patch(self, name: str, changes: Any) -> dict:
        if not isinstance(changes, dict):
            raise Invalid(f"body: send a mapping of fields to change ({', '.join(LIVE_FIELDS)})")
        unknown = sorted(set(changes) - set(AppSpec.model_fields))
        if unknown:
            raise Invalid(_unknown_fields(unknown))
        fixed = sorted(set(changes) - set(LIVE_FIELDS))
        if fixed:
            raise Invalid(f"{fixed[0]}: cannot change while running (live fields: {', '.join(LIVE_FIELDS)}); "
                          "DELETE and POST the app instead")
        with self.lock:
            old = self.specs.get(name)
            if old is None:
                raise NotFound(f"no app {name!r}")
            spec = parse_app({**old.model_dump(mode="json"), **changes})
            self.storage.put_app(name, spec.model_dump(mode="json"))
            self._attach(spec)
        return self.get(name)

    def delete(self, name: str) -> None:
        with self.lock:
            spec = self.specs.pop(name, None)
            if spec is None:
                raise NotFound(f"no app {name!r}")
            self.storage.delete_app(name)
            worker = self.streams.workers.get(spec.source or "")
        if worker:
            worker.remove_app(name)
        self.rollups.forget(name)
        self.governor.forget(name)

    def metrics(self, name: str) -> dict:
        with self.lock:
            spec = self._spec(name)
            worker = self.streams.workers.get(spec.source or "")
        total = self.engine.metrics.app_summary(name)
        minute = self.rollups.summary(name, 60.0)
        hour = self.rollups.summary(name, 3600.0)
        # only the batch histograms: a snapshot would take percentiles of every app
        batches = self.engine.metrics.batch_histograms()
        return {"app": name, "slo_ms": spec.slo_ms, "slo_attainment": total["slo_attainment"],
                "slo_attainment_1m": minute["slo_attainment"], "slo_attainment_1h": hour["slo_attainment"],
                "latency_ms": total["latency_ms"], "latency_all_ms": total["latency_all_ms"],
                "throughput_fps": minute["throughput_fps"], "load": self.governor.state(name),
                "arrived": total["arrived"], "completed": total["completed"], "within_slo": total["within_slo"],
                "skipped": total["skipped"],
                "dropped": total["dropped"],
                "batch_size": {k: v for k, v in batches.items() if k.startswith(f"{spec.detector}/")},
                "counts": worker.app_counts(name) if worker else None}

    def series(self, name: str, since_s: float = 3600.0) -> list[dict]:
        self._spec(name)
        return self.rollups.series(name, since_s)

    def snapshot(self, name: str) -> bytes:
        """The app's latest annotated frame, JPEG."""
        with self.lock:
            spec = self._spec(name)
            worker = self.streams.workers.get(spec.source or "")
        jpeg = worker.live.jpeg(name) if worker else None
        if jpeg is None:
            raise NotFound(f"app {name!r} has no frame yet")
        return jpeg

    def lines_and_zones(self) -> tuple[list[str], list[str]]:
        """The names of every app's counting lines and zones (the words a question may use)."""
        with self.lock:
            specs = list(self.specs.values())
        return (sorted({n for s in specs for n in s.lines}), sorted({n for s in specs for n in s.zones}))

    def _spec(self, name: str) -> AppSpec:
        with self.lock:
            spec = self.specs.get(name)
        if spec is None:
            raise NotFound(f"no app {name!r}")
        return spec

    def _check(self, spec: AppSpec) -> None:
        if spec.source is None:
            raise Invalid("source: name the stream this app watches (POST /v1/streams first)")
        if spec.source not in self.streams.workers:
            raise NotFound(f"source: no stream {spec.source!r}; streams: {sorted(self.streams.workers)}")
        if not spec.host_detector:
            self.models.check_detector(spec.detector, spec.named_classes)

    def _attach(self, spec: AppSpec) -> None:
        """Under the lock."""
        worker = self.streams.workers.get(spec.source or "")
        if worker is None:
            raise Invalid(f"source: no stream {spec.source!r}")
        self.specs[spec.name] = spec
        worker.set_app(spec)


def _unknown_fields(unknown: list[str]) -> str:
    """What a PATCH naming fields no app spec has is told: each, its likely spelling, and
    the fields that exist."""
    from difflib import get_close_matches

    said = []
    for field in unknown:
        close = get_close_matches(field, LIVE_FIELDS, n=1, cutoff=0.5) or \
            get_close_matches(field, list(AppSpec.model_fields), n=1, cutoff=0.6)
        said.append(f"{field}: unknown field" + (f" (did you mean {close[0]}?)" if close else ""))
    fixed = [f for f in AppSpec.model_fields if f not in LIVE_FIELDS]
    return (f"{'; '.join(said)}. Fields that change while the app runs: {', '.join(LIVE_FIELDS)}; the other "
            f"fields of an app spec ({', '.join(fixed)}) change by DELETE and POST of the app")


def parse_app(data: Any) -> AppSpec:
    """An app spec as a request body: Invalid naming the field when it is wrong."""
    try:
        return parse_spec(data)
    except SpecError as exc:
        raise Invalid(str(exc).replace("app spec: ", "", 1)) from None
