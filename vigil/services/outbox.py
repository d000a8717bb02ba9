"""A sink's delivery loop over the events table, which is every sink's outbox.

Each sink keeps its place in the events table (the last event id it delivered) in
SQLite, so a receiver that is down, or a Vigil that restarts, loses nothing: delivery
resumes from that place. Events go one at a time in id order, so each stream's events
arrive in the order they happened. A sink configured for the first time starts at the
newest event: history is not replayed.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from prometheus_client import Counter

from vigil.storage import EventQuery, Storage, StorageError

log = logging.getLogger("vigil.sinks")

PAGE = 100  # events read from the outbox at a time
IDLE_S = 0.2  # how often an idle sink looks for new events
FIRST_BACKOFF_S = 0.5


@dataclass
class SinkState:
    delivered: int = 0
    rejected: int = 0
    failures: int = 0  # tries that failed and will be made again
    last_id: int = 0
    last_error: str | None = None
    retrying: bool = False
    stats_lock: threading.Lock = field(default_factory=threading.Lock)


class OutboxSink:
    """One sink's delivery loop over the events table: `_send` one event, and on
    "delivered" or "rejected" move this sink's cursor past it; on "failed" wait (0.5 s,
    doubling up to `max_backoff_s`) and send it again."""

    kind = "sink"

    def __init__(self, key: str, shown: str, types: tuple[str, ...] | None, max_backoff_s: float,
                 storage: Storage, counter: Counter) -> None:
        self.key, self.shown, self.types, self.max_backoff_s = key, shown, types, max_backoff_s
        self.storage, self.counter = storage, counter
        self.state = SinkState()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.kind, daemon=True)

    def _open(self) -> None:
        """Before the first event (a client, a connection)."""

    def _close(self) -> None:
        """After the last."""

    def _send(self, event: dict) -> tuple[str, str | None]:
        """("delivered" | "rejected" | "failed", what went wrong)."""
        raise NotImplementedError

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
            return {"kind": self.kind, "target": self.shown, "delivered": s.delivered, "rejected": s.rejected,
                    "failures": s.failures, "last_id": s.last_id, "retrying": s.retrying,
                    "last_error": s.last_error, "backlog": max(0, self.storage.max_event_id() - s.last_id)}

    def _run(self) -> None:
        self._open()
        try:
            while not self._stop.is_set():
                try:
                    page = self.storage.events(EventQuery(after_id=self.state.last_id, limit=PAGE))
                except StorageError as exc:
                    log.warning("%s %s: cannot read events: %s", self.kind, self.shown, exc)
                    page = []
                if not page:
                    self._stop.wait(IDLE_S)
                    continue
                for event in page:
                    if self._stop.is_set() or not self._deliver(event):
                        break
        finally:
            self._close()

    def _deliver(self, event: dict) -> bool:
        """Until it is delivered (or rejected, or the sink stops: False); then the cursor moves."""
        wanted = self.types is None or event["type"] in self.types
        wait = FIRST_BACKOFF_S
        while wanted:
            outcome, error = self._send(event)
            if outcome in ("delivered", "rejected"):
                self._count(outcome, error)
                break
            self._count("failed", error)
            if self._stop.wait(wait):
                return False
            wait = min(wait * 2, self.max_backoff_s)
        self.storage.set_sink_cursor(self.key, event["id"])
        with self.state.stats_lock:
            self.state.last_id = event["id"]
        return True

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
        self.counter.labels(self.kind, self.shown, outcome).inc()
        if s.retrying and not was_retrying:
            log.warning("%s %s: failing (%s); trying again with backoff, nothing is skipped", self.kind, self.shown,
                        error)
        elif was_retrying and not s.retrying:
            log.info("%s %s: delivering again", self.kind, self.shown)
        elif outcome == "rejected":
            log.warning("%s %s rejected an event (%s); passed", self.kind, self.shown, error)


