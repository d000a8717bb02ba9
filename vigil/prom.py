"""Prometheus series the service adds beside the engine's: per-stream status and
counters, and per-app SLO attainment over the last minute and hour. Read at scrape
time from the service, so they are never stale."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from vigil.service import Vigil

STATUSES = ("connecting", "live", "reconnecting", "ended", "failed")


class ServiceCollector:
    def __init__(self, service: "Vigil") -> None:
        self.service = service

    def describe(self) -> list[Metric]:
        return []  # collected only at scrape time

    def collect(self) -> Iterator[Metric]:
        status = GaugeMetricFamily("vigil_stream_status", "1 for the stream's current status", labels=["stream", "status"])
        decoded = CounterMetricFamily("vigil_stream_frames_decoded", "Frames decoded and delivered to the apps",
                                      labels=["stream"])
        dropped = CounterMetricFamily("vigil_stream_frames_dropped", "Frames dropped from a full live buffer",
                                      labels=["stream"])
        skipped = CounterMetricFamily("vigil_stream_frames_skipped", "Frames decoded that no app samples",
                                      labels=["stream"])
        not_decoded = CounterMetricFamily("vigil_stream_frames_not_decoded",
                                          "Frames no app samples that nothing refers to, left undecoded",
                                          labels=["stream"])
        reconnects = CounterMetricFamily("vigil_stream_reconnects", "Reconnect attempts", labels=["stream"])
        gaps = CounterMetricFamily("vigil_stream_gaps", "Gaps in frames after a reconnect", labels=["stream"])
        for s in self.service.streams.list():
            for st in STATUSES:
                status.add_metric([s["name"], st], 1.0 if s["status"] == st else 0.0)
            decoded.add_metric([s["name"]], s["frames_decoded"])
            dropped.add_metric([s["name"]], s["frames_dropped"])
            skipped.add_metric([s["name"]], s["frames_skipped"])
            not_decoded.add_metric([s["name"]], s["frames_not_decoded"])
            reconnects.add_metric([s["name"]], s["reconnects"])
            gaps.add_metric([s["name"]], s["gaps"])
        yield from (status, decoded, dropped, skipped, not_decoded, reconnects, gaps)
        attainment = GaugeMetricFamily("vigil_app_slo_attainment", "Requests within SLO / arrived, over a window",
                                       labels=["app", "window"])
        throughput = GaugeMetricFamily("vigil_app_throughput_fps", "Frames completed per second, last minute",
                                       labels=["app"])
        for name in self.service.apps.names():
            for label, seconds in (("1m", 60.0), ("1h", 3600.0)):
                value = self.service.rollups.summary(name, seconds)["slo_attainment"]
                if value is not None:
                    attainment.add_metric([name, label], value)
            throughput.add_metric([name], self.service.rollups.summary(name, 60.0)["throughput_fps"])
        yield attainment
        yield throughput
