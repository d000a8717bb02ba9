"""Engine metrics: per (app, model, version) and per session, as Prometheus series
(`vigil_*`) and as a plain object the CLI and API read.

SLO attainment = requests completed within their SLO / requests arrived; a dropped
request counts as arrived and not completed. Latency percentiles come two ways:
`latency_ms` over completed requests, and `latency_all_ms` over every arrival, where a
dropped request counts as an infinite latency (a percentile that falls on drops reads
"inf"): under overload the first stays near the SLO while the second shows the misses.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from prometheus_client import CollectorRegistry, Counter as PromCounter, Gauge, Histogram

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
RECENT = 20000  # latencies kept per app for percentiles
SHED_REASONS = ("deadline", "overloaded")  # engine drops that are load shed (not errors or missing models)


def percentiles(values, qs=(50, 95, 99)) -> dict:
    """{"p50": ..} of finite or infinite values; an infinite percentile reads "inf"."""
    if not len(values):
        return {f"p{q}": None for q in qs}
    arr = np.sort(np.asarray(values, dtype=float))
    out = {}
    for q in qs:
        v = float(np.percentile(arr, q, method="higher"))
        out[f"p{q}"] = "inf" if v == float("inf") else round(v, 2)
    return out


@dataclass
class AppModelStats:
    arrived: int = 0
    completed: int = 0
    within_slo: int = 0
    skipped: int = 0
    dropped: Counter = field(default_factory=Counter)
    latencies_ms: deque = field(default_factory=lambda: deque(maxlen=RECENT))
    outcomes_ms: deque = field(default_factory=lambda: deque(maxlen=RECENT))  # every arrival; inf: dropped

    def to_dict(self, slo_ms: float | None = None) -> dict:
        lat = np.array(self.latencies_ms) if self.latencies_ms else None
        pct = {f"p{q}": round(float(np.percentile(lat, q)), 2) if lat is not None else None for q in (50, 95, 99)}
        admitted = self.arrived - sum(self.dropped.values())
        return {"arrived": self.arrived, "completed": self.completed, "within_slo": self.within_slo,
                "dropped": dict(self.dropped), "skipped": self.skipped,
                "slo_attainment": round(self.within_slo / self.arrived, 4) if self.arrived else None,
                "admitted_attainment": round(self.within_slo / admitted, 4) if admitted > 0 else None,
                "latency_ms": pct, "latency_all_ms": percentiles(self.outcomes_ms)}


class MetricsListener(Protocol):
    """Sees every request outcome as it happens (the server's per-app time windows)."""

    def arrived(self, app: str, n: int) -> None: ...

    def completed(self, app: str, latency_ms: float, within_slo: bool) -> None: ...

    def dropped(self, app: str, reason: str) -> None: ...


class EngineMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.listeners: list[MetricsListener] = []
        self.registry = registry or CollectorRegistry()
        r = self.registry
        labels = ["app", "model", "version"]
        self._arrived = PromCounter("vigil_requests_arrived", "Requests submitted to the engine", labels, registry=r)
        self._completed = PromCounter("vigil_requests_completed", "Requests completed", labels, registry=r)
        self._within = PromCounter("vigil_requests_within_slo", "Requests completed within their SLO", labels,
                                   registry=r)
        self._dropped = PromCounter("vigil_requests_dropped", "Requests dropped, by reason", labels + ["reason"],
                                    registry=r)
        self._latency = Histogram("vigil_request_latency_seconds", "Capture-to-result latency", labels,
                                  buckets=LATENCY_BUCKETS_S, registry=r)
        self._batch = Histogram("vigil_batch_size", "Batch sizes run per fragment", ["model", "fragment"],
                                buckets=BATCH_BUCKETS, registry=r)
        self._probes = PromCounter("vigil_probe_batches", "Batches run although the profile said they would miss, "
                                   "to see whether it is wrong (nothing else would use the device)",
                                   ["model", "fragment"], registry=r)
        self.profile_factor = Gauge("vigil_profile_factor", "What plans scale a fragment session's stored profile "
                                    "by: the 0.9 quantile of its recent batches' observed/profiled latency",
                                    ["session"], registry=r)
        self.queue_depth = Gauge("vigil_queue_depth", "Items waiting per fragment session", ["session"], registry=r)
        self._shed = PromCounter("vigil_app_shed", "An app's frames shed under load, by reason: deadline and "
                                 "overloaded (dropped by the engine), rate (not sampled: its rate was lowered "
                                 "toward min_fps)", ["app", "reason"], registry=r)
        self._skipped = PromCounter("vigil_frames_skipped", "Frames not sent for inference because they did not "
                                    "change (static-frame skipping)", ["app", "model"], registry=r)
        self._selected = Gauge("vigil_model_selected_version", "Version adaptive selection serves an app",
                               ["app", "model"], registry=r)
        self._selections = PromCounter("vigil_model_selection_changes", "Adaptive selection switches",
                                       ["app", "model", "to_version"], registry=r)
        self.device_seconds = PromCounter("vigil_device_busy_seconds", "Device time, by tenant: vision batches and "
                                          "the guest's steps (the LLM)", ["tenant"], registry=r)
        self.random_weights = Gauge("vigil_model_random_weights",
                                    "1 when a loaded model version has random weights (benchmarks only)",
                                    ["model", "version"], registry=r)
        self._lock = threading.Lock()
        self.by_app: dict[tuple[str, str, str], AppModelStats] = {}
        self.batch_sizes: dict[str, Counter] = {}
        self.probes: Counter = Counter()  # model/fragment -> probe batches

    def _stats(self, app: str, model: str, version: str) -> AppModelStats:
        key = (app, model, version)
        if key not in self.by_app:
            self.by_app[key] = AppModelStats()
        return self.by_app[key]

    def arrived(self, app: str, model: str, version: str, n: int = 1) -> None:
        with self._lock:
            self._stats(app, model, version).arrived += n
        for listener in self.listeners:
            listener.arrived(app, n)
        self._arrived.labels(app, model, version).inc(n)

    def completed(self, app: str, model: str, version: str, latency_ms: float, slo_ms: float) -> None:
        latency_ms = float(latency_ms)  # callers may pass numpy scalars; JSON needs plain numbers
        within = bool(latency_ms <= slo_ms)
        with self._lock:
            s = self._stats(app, model, version)
            s.completed += 1
            s.within_slo += within
            s.latencies_ms.append(latency_ms)
            s.outcomes_ms.append(latency_ms)
        for listener in self.listeners:
            listener.completed(app, latency_ms, within)
        self._completed.labels(app, model, version).inc()
        if within:
            self._within.labels(app, model, version).inc()
        self._latency.labels(app, model, version).observe(latency_ms / 1000.0)

    def dropped(self, app: str, model: str, version: str, reason: str) -> None:
        with self._lock:
            s = self._stats(app, model, version)
            s.dropped[reason] += 1
            s.outcomes_ms.append(float("inf"))
        for listener in self.listeners:
            listener.dropped(app, reason)
        self._dropped.labels(app, model, version, reason).inc()
        if reason in SHED_REASONS:
            self._shed.labels(app, reason).inc()

    def shed(self, app: str, reason: str, n: int = 1) -> None:
        """Frames shed before they became requests (load control)."""
        if n > 0:
            self._shed.labels(app, reason).inc(n)

    def selection(self, app: str, model: str, version: int) -> None:
        self._selected.labels(app, model).set(version)
        self._selections.labels(app, model, str(version)).inc()

    def skipped(self, app: str, model: str, n: int = 1) -> None:
        with self._lock:
            self._stats(app, model, "skip").skipped += n
        self._skipped.labels(app, model).inc(n)

    def batch(self, model: str, fragment: str, size: int) -> None:
        with self._lock:
            self.batch_sizes.setdefault(f"{model}/{fragment}", Counter())[size] += 1
        self._batch.labels(model, fragment).observe(size)

    def probe(self, model: str, fragment: str) -> None:
        with self._lock:
            self.probes[f"{model}/{fragment}"] += 1
        self._probes.labels(model, fragment).inc()

    def app_summary(self, app: str) -> dict:
        """All of one app's traffic, summed over models and versions."""
        with self._lock:
            merged = AppModelStats()
            for (a, _, _), s in self.by_app.items():
                if a != app:
                    continue
                merged.arrived += s.arrived
                merged.completed += s.completed
                merged.within_slo += s.within_slo
                merged.skipped += s.skipped
                merged.dropped.update(s.dropped)
                merged.latencies_ms.extend(s.latencies_ms)
                merged.outcomes_ms.extend(s.outcomes_ms)
            return merged.to_dict()

    def batch_histograms(self) -> dict[str, dict[str, int]]:
        """`model/fragment` -> {batch size: batches run}."""
        with self._lock:
            return {k: {str(b): n for b, n in sorted(c.items())} for k, c in self.batch_sizes.items()}

    def snapshot(self) -> dict:
        with self._lock:
            apps = {f"{a}|{m}|{v}": s.to_dict() for (a, m, v), s in sorted(self.by_app.items())}
            probes = dict(self.probes)
        return {"apps": apps, "batch_sizes": self.batch_histograms(), "probe_batches": probes}
