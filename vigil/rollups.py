"""Per-app metric windows for the dashboard and the API: attainment over the last
minute and hour, latency percentiles, throughput and drops, in fixed windows of
`interval_s` (kept in memory for an hour, and written to storage as they close).

Fed by the engine's metrics listener hook; the clock is injected (wall seconds).
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

HOUR_S = 3600.0


@dataclass
class Window:
    t_s: float
    arrived: int = 0
    completed: int = 0
    within_slo: int = 0
    dropped: Counter = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)

    def to_row(self, app: str, window_s: float) -> dict:
        lat = np.array(self.latencies_ms) if self.latencies_ms else None
        return {"app": app, "t_s": self.t_s, "window_s": window_s, "arrived": self.arrived,
                "completed": self.completed, "within_slo": self.within_slo, "dropped": dict(self.dropped),
                "p50_ms": round(float(np.percentile(lat, 50)), 2) if lat is not None else None,
                "p99_ms": round(float(np.percentile(lat, 99)), 2) if lat is not None else None}


class Rollups:
    def __init__(self, interval_s: float, clock: Callable[[], float]) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._lock = threading.Lock()
        self._open: dict[str, Window] = {}
        self._closed: dict[str, deque[dict]] = {}
        self._unsaved: list[dict] = []

    def _window(self, app: str) -> Window:
        start = self.clock() // self.interval_s * self.interval_s
        w = self._open.get(app)
        if w is None or w.t_s != start:
            if w is not None:
                self._close(app, w)
            w = self._open[app] = Window(start)
        return w

    def _close(self, app: str, w: Window) -> None:
        row = w.to_row(app, self.interval_s)
        self._closed.setdefault(app, deque(maxlen=int(HOUR_S / self.interval_s) + 1)).append(row)
        self._unsaved.append(row)

    # listener verbs (called from engine and pipeline threads)
    def arrived(self, app: str, n: int) -> None:
        with self._lock:
            self._window(app).arrived += n

    def completed(self, app: str, latency_ms: float, within_slo: bool) -> None:
        with self._lock:
            w = self._window(app)
            w.completed += 1
            w.within_slo += int(bool(within_slo))
            w.latencies_ms.append(float(latency_ms))

    def dropped(self, app: str, reason: str) -> None:
        with self._lock:
            self._window(app).dropped[reason] += 1

    def tick(self) -> list[dict]:
        """Close windows whose time is over; returns the closed rows not yet saved."""
        with self._lock:
            for app in list(self._open):
                self._window(app)
            rows, self._unsaved = self._unsaved, []
            return rows

    def forget(self, app: str) -> None:
        with self._lock:
            self._open.pop(app, None)
            self._closed.pop(app, None)

    def series(self, app: str, since_s: float = HOUR_S) -> list[dict]:
        """Closed windows of the last `since_s` seconds, oldest first."""
        with self._lock:
            horizon = self.clock() - since_s
            return [r for r in self._closed.get(app, ()) if r["t_s"] >= horizon]

    def summary(self, app: str, window_s: float) -> dict:
        """Totals over the closed windows of the last `window_s` seconds plus the open one."""
        with self._lock:
            horizon = self.clock() - window_s
            rows = [r for r in self._closed.get(app, ()) if r["t_s"] + self.interval_s > horizon]
            w = self._open.get(app)
            arrived = sum(r["arrived"] for r in rows) + (w.arrived if w else 0)
            within = sum(r["within_slo"] for r in rows) + (w.within_slo if w else 0)
            completed = sum(r["completed"] for r in rows) + (w.completed if w else 0)
            dropped: Counter = Counter(w.dropped if w else {})
            for r in rows:
                dropped.update(r["dropped"])
            span = min(window_s, max(self.interval_s, self.clock() - (rows[0]["t_s"] if rows else
                                                                       (w.t_s if w else self.clock()))))
            # requests that arrived just before the window may complete inside it
            settled = max(arrived, completed + sum(dropped.values()))
            return {"window_s": window_s, "arrived": arrived, "completed": completed,
                    "slo_attainment": round(within / settled, 4) if settled else None,
                    "throughput_fps": round(completed / span, 2) if span > 0 else 0.0,
                    "dropped": dict(dropped)}
