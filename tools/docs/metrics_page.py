"""The metrics reference: every series `/metrics` serves, from the collectors the server
registers (the engine's, the LLM engine's, the sinks' and the service's own)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from engine.metrics import EngineMetrics
from llm.metrics import LLMSeries
from tools.docs.markdown import GENERATED_NOTE, code, table
from vigil import prom
from vigil.services.sinks import delivery_counter

SUFFIX = {"counter": "_total", "histogram": " (_bucket, _sum, _count)"}


def series() -> list[tuple[str, str, str, list[str], str]]:
    """(name, type, help, labels, owner) of every series, in the order the owners register them."""
    registry = CollectorRegistry()
    EngineMetrics(registry)
    LLMSeries(registry)
    delivery_counter(registry)
    out = []
    for collector in list(registry._collector_to_names):  # the registry lists its collectors nowhere public
        if isinstance(collector, MetricWrapperBase):
            family = collector.describe()[0]
            out.append((family.name, family.type, family.documentation, list(collector._labelnames),
                        owner(family.name)))
    for family in prom.families().values():
        labels = prom.STREAM_SERIES.get(family.name, prom.APP_SERIES.get(family.name))[2]
        out.append((family.name, family.type, family.documentation, labels, "server"))
    return out


def owner(name: str) -> str:
    if name.startswith("vigil_llm_"):
        return "LLM engine"
    if name.startswith("vigil_sink_"):
        return "event sinks"
    return "engine"


def scraped_name(name: str, kind: str) -> str:
    return name + SUFFIX.get(kind, "")


def metrics_page() -> str:
    rows = [[code(scraped_name(name, kind)), kind, ", ".join(code(label) for label in labels), owner, text]
            for name, kind, text, labels, owner in series()]
    return "\n".join([
        "# Metrics\n", GENERATED_NOTE.format(source="the collectors the server registers"),
        "`GET /metrics` serves these in Prometheus' text format; each counter and histogram also has its "
        "`_created` time. A Grafana dashboard over them is in "
        "`configs/grafana/vigil-dashboard.json`.\n",
        table(["series", "type", "labels", "from", "meaning"], rows)])
