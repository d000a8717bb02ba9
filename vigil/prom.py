"""Prometheus series the service adds beside the engine's: per-stream status and
counters, and per-app SLO attainment over the last minute and hour. Read at scrape
time from the service, so they are never stale."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from vigil.service import Vigil

STATUSES = ("connecting", "live", "reconnecting", "ended", "failed")
# name -> (family, help, labels, the stream listing's field it reads)
STREAM_SERIES = {
    "vigil_stream_status": (GaugeMetricFamily, "1 for the stream's current status", ["stream", "status"], "status"),
    "vigil_stream_frames_decoded": (CounterMetricFamily, "Frames decoded and delivered to the apps", ["stream"],
                                    "frames_decoded"),
    "vigil_stream_frames_dropped": (CounterMetricFamily, "Frames dropped from a full live buffer", ["stream"],
                                    "frames_dropped"),
    "vigil_stream_frames_skipped": (CounterMetricFamily, "Frames decoded that no app samples", ["stream"],
                                    "frames_skipped"),
    "vigil_stream_frames_not_decoded": (CounterMetricFamily, "Frames no app samples that nothing refers to, "
                                        "left undecoded", ["stream"], "frames_not_decoded"),
    "vigil_stream_reconnects": (CounterMetricFamily, "Reconnect attempts", ["stream"], "reconnects"),
    "vigil_stream_gaps": (CounterMetricFamily, "Gaps in frames after a reconnect", ["stream"], "gaps"),
}
APP_SERIES = {
    "vigil_app_slo_attainment": (GaugeMetricFamily, "Requests within SLO / arrived, over a window",
                                 ["app", "window"]),
    "vigil_app_throughput_fps": (GaugeMetricFamily, "Frames completed per second, last minute", ["app"]),
}
WINDOWS = (("1m", 60.0), ("1h", 3600.0))


def families() -> dict[str, Metric]:
    """Every series this collector yields, without samples."""
    out = {name: kind(name, text, labels=labels) for name, (kind, text, labels, _) in STREAM_SERIES.items()}
    out.update({name: kind(name, text, labels=labels) for name, (kind, text, labels) in APP_SERIES.items()})
    return out


class ServiceCollector:
    def __init__(self, service: "Vigil") -> None:
        self.service = service

    def describe(self) -> list[Metric]:
        return list(families().values())

    def collect(self) -> Iterator[Metric]:
        found = families()
        for s in self.service.streams.list():
            for name, (*_, field) in STREAM_SERIES.items():
                if field == "status":
                    for st in STATUSES:
                        found[name].add_metric([s["name"], st], 1.0 if s["status"] == st else 0.0)
                else:
                    found[name].add_metric([s["name"]], s[field])
        for name in self.service.apps.names():
            for label, seconds in WINDOWS:
                value = self.service.rollups.summary(name, seconds)["slo_attainment"]
                if value is not None:
                    found["vigil_app_slo_attainment"].add_metric([name, label], value)
            throughput = self.service.rollups.summary(name, 60.0)["throughput_fps"]
            found["vigil_app_throughput_fps"].add_metric([name], throughput)
        yield from found.values()
