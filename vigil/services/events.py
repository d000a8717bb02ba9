"""Events as stored (the sink assigns ids), and the dashboard's overview of every app
and stream."""

from __future__ import annotations

from pathlib import Path

from core.events import EVENT_TYPES
from runtime.snapshots import SnapshotWriter
from vigil.services.apps import AppService
from vigil.services.errors import Invalid, NotFound
from vigil.services.streams import StreamService
from vigil.settings import Limits
from vigil.storage import EventQuery, Storage

STREAM_FIELDS = ("name", "status", "last_error", "reconnects", "frames_decoded", "frames_dropped")


class EventService:
    def __init__(self, storage: Storage, limits: Limits, snapshots: SnapshotWriter | None = None) -> None:
        self.storage = storage
        self.limits = limits
        self.snapshots = snapshots

    def snapshot(self, event_id: int, crop: bool = False) -> Path:
        """The JPEG of an event's snapshot (the frame with its box, or the crop)."""
        event = self.storage.event(event_id)
        if event is None:
            raise NotFound(f"no event {event_id}")
        if self.snapshots is None:
            raise NotFound("snapshots are off (snapshots: {enabled: true} in the server config)")
        key = event.get("snapshot")
        if key is None:
            raise NotFound(f"event {event_id} ({event['type']}) has no snapshot: it has no box on a frame "
                           "analysed while snapshots were on")
        path = self.snapshots.path(key, crop)
        if path is None or not path.is_file():
            raise NotFound(f"event {event_id}'s snapshot is gone (retention: snapshots.retain_days, max_mb)")
        return path

    def query(self, app: str | None = None, stream: str | None = None, type: str | None = None,
              since_ms: float | None = None, until_ms: float | None = None, after_id: int = 0,
              limit: int = 100, before_id: int | None = None, newest_first: bool = False) -> dict:
        """One page of events, oldest first: the next page starts after `next_after_id`;
        or newest first: the next (older) page ends before `next_before_id`."""
        if type is not None and type not in EVENT_TYPES:
            raise Invalid(f"type: must be one of {list(EVENT_TYPES)}; was {type!r}")
        limit = max(1, min(limit, self.limits.max_page_size))
        items = self.storage.events(EventQuery(app, stream, type, since_ms, until_ms, after_id, limit, before_id,
                                               newest_first))
        more = items[-1]["id"] if len(items) == limit else None
        return {"events": items, "next_after_id": None if newest_first else more,
                "next_before_id": more if newest_first else None}


def overview(streams: StreamService, apps: AppService, ready: bool, device: dict, cluster: bool = False) -> dict:
    """Every app's card (status, SLO attainment, latency, load, counts, its stream) and
    every stream, as the dashboard shows them; `cluster`: whether /v1/cluster has a plan
    to show."""
    cards = []
    streams_now = streams.list()
    for a in apps.list():
        m = apps.metrics(a["name"])
        watched = [s for s in streams_now if s["name"] == a["spec"]["source"]]
        cards.append({"name": a["name"], "status": a["status"], "error": a["error"], "warning": a["warning"],
                      "detector": a["spec"]["detector"], "slo_ms": m["slo_ms"],
                      "attainment_1m": m["slo_attainment_1m"], "attainment_1h": m["slo_attainment_1h"],
                      "latency_ms": m["latency_ms"], "latency_all_ms": m["latency_all_ms"], "load": m["load"],
                      "throughput_fps": m["throughput_fps"],
                      "dropped": m["dropped"], "batch_size": m["batch_size"], "counts": a["counts"],
                      "streams": [{k: s[k] for k in STREAM_FIELDS} for s in watched]})
    return {"apps": cards, "streams": streams_now, "ready": ready, "device": device, "cluster": cluster}
