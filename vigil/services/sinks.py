"""Webhooks: every stored event, POSTed as JSON, in order, none lost.

The events table is the outbox. Each webhook keeps its place in it (the last event id
it delivered) in SQLite, so a receiver that is down, or a Vigil that restarts, loses
nothing: delivery resumes from that place. Events go one at a time in id order, so
each stream's events arrive in the order they happened. A failed POST (no answer, a
5xx, 408 or 429) is tried again with exponential backoff (0.5 s doubling, up to the
webhook's `max_backoff_s`), never skipped; an answer the receiver means for good (any
other 4xx) is counted as rejected and passed. A receiver sees an event again only when
its answer was lost: the `Idempotency-Key` header (the event's id) lets it drop the
copy. With a secret, `X-Vigil-Signature: sha256=HEX` is the HMAC-SHA256 of the body.

A webhook configured for the first time starts at the newest event: history is not
replayed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
from dataclasses import dataclass, field

import httpx
from prometheus_client import CollectorRegistry, Counter

from streams.urls import redact_url
from vigil.settings import Webhook
from vigil.storage import EventQuery, Storage, StorageError

log = logging.getLogger("vigil.sinks")

PAGE = 100  # events read from the outbox at a time
IDLE_S = 0.2  # how often an idle webhook looks for new events
FIRST_BACKOFF_S = 0.5


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass
class WebhookState:
    delivered: int = 0
    rejected: int = 0
    failures: int = 0  # tries that failed and will be made again
    last_id: int = 0
    last_error: str | None = None
    retrying: bool = False
    stats_lock: threading.Lock = field(default_factory=threading.Lock)


class WebhookSink:
    def __init__(self, hook: Webhook, storage: Storage, counter: Counter) -> None:
        self.hook, self.storage, self.counter = hook, storage, counter
        self.key = f"webhook:{hook.url}"
        self.shown = redact_url(hook.url)  # credentials never in status, metrics or logs
        self.state = WebhookState()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="webhook", daemon=True)

    def start(self) -> None:
        cursor = self.storage.sink_cursor(self.key)
        if cursor is None:  # new: from now on, not the history
            cursor = self.storage.max_event_id()
            self.storage.set_sink_cursor(self.key, cursor)
        self.state.last_id = cursor
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def status(self) -> dict:
        s = self.state
        with s.stats_lock:
            return {"kind": "webhook", "url": self.shown, "delivered": s.delivered, "rejected": s.rejected,
                    "failures": s.failures, "last_id": s.last_id, "retrying": s.retrying,
                    "last_error": s.last_error, "backlog": max(0, self.storage.max_event_id() - s.last_id)}

    def _run(self) -> None:
        with httpx.Client(timeout=self.hook.timeout_s) as client:
            while not self._stop.is_set():
                try:
                    page = self.storage.events(EventQuery(after_id=self.state.last_id, limit=PAGE))
                except StorageError as exc:
                    log.warning("webhook %s: cannot read events: %s", self.shown, exc)
                    page = []
                if not page:
                    self._stop.wait(IDLE_S)
                    continue
                for event in page:
                    if self._stop.is_set() or not self._deliver(client, event):
                        break

    def _deliver(self, client: httpx.Client, event: dict) -> bool:
        """Until it is delivered (or rejected, or the sink stops: False); then the cursor moves."""
        wanted = self.hook.events is None or event["type"] in self.hook.events
        body = json.dumps(event, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "Idempotency-Key": str(event["id"]),
                   "X-Vigil-Event-Id": str(event["id"])}
        if self.hook.secret:
            headers["X-Vigil-Signature"] = signature(self.hook.secret, body)
        wait = FIRST_BACKOFF_S
        while wanted:
            outcome, error = self._post(client, body, headers)
            if outcome in ("delivered", "rejected"):
                self._count(outcome, error)
                break
            self._count("failed", error)
            if self._stop.wait(wait):
                return False
            wait = min(wait * 2, self.hook.max_backoff_s)
        self.storage.set_sink_cursor(self.key, event["id"])
        with self.state.stats_lock:
            self.state.last_id = event["id"]
        return True

    def _post(self, client: httpx.Client, body: bytes, headers: dict) -> tuple[str, str | None]:
        try:
            r = client.post(self.hook.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return "failed", f"{type(exc).__name__}: {exc}"[:300]
        if r.is_success:
            return "delivered", None
        if r.status_code in (408, 429) or r.status_code >= 500:
            return "failed", f"HTTP {r.status_code}"
        return "rejected", f"HTTP {r.status_code}"

    def _count(self, outcome: str, error: str | None) -> None:
        s = self.state
        with s.stats_lock:
            if outcome == "delivered":
                s.delivered += 1
            elif outcome == "rejected":
                s.rejected += 1
            else:
                s.failures += 1
            was_retrying, s.retrying = s.retrying, outcome == "failed"
            s.last_error = error or s.last_error
        self.counter.labels("webhook", self.shown, outcome).inc()
        if s.retrying and not was_retrying:
            log.warning("webhook %s: failing (%s); trying again with backoff, nothing is skipped", self.shown, error)
        elif was_retrying and not s.retrying:
            log.info("webhook %s: delivering again", self.shown)
        elif outcome == "rejected":
            log.warning("webhook %s rejected an event (%s); passed", self.shown, error)


class SinkService:
    def __init__(self, webhooks: tuple[Webhook, ...], storage: Storage, registry: CollectorRegistry) -> None:
        counter = Counter("vigil_sink_deliveries", "tries to deliver an event to a sink, by outcome "
                          "(delivered, rejected, failed: to be tried again)", ["kind", "sink", "outcome"],
                          registry=registry)
        self.sinks = [WebhookSink(h, storage, counter) for h in webhooks]

    def start(self) -> None:
        for sink in self.sinks:
            sink.start()

    def stop(self) -> None:
        for sink in self.sinks:
            sink.stop()

    def status(self) -> list[dict]:
        return [s.status() for s in self.sinks]
