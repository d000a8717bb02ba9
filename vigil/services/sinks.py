"""Where events go besides storage: webhooks (vigil/services/webhooks.py) and an MQTT
broker (vigil/services/mqtt.py), each with its own place in the events table."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from vigil.services.mqtt import MqttSink
from vigil.services.outbox import OutboxSink
from vigil.services.webhooks import WebhookSink
from vigil.settings import Sinks
from vigil.storage import Storage


def delivery_counter(registry: CollectorRegistry) -> Counter:
    return Counter("vigil_sink_deliveries", "tries to deliver an event to a sink, by outcome "
                   "(delivered, rejected, failed: to be tried again)", ["kind", "sink", "outcome"], registry=registry)


class SinkService:
    def __init__(self, sinks: Sinks, storage: Storage, registry: CollectorRegistry) -> None:
        counter = delivery_counter(registry)
        self.sinks: list[OutboxSink] = [WebhookSink(h, storage, counter) for h in sinks.webhooks]
        if sinks.mqtt is not None:
            self.sinks.append(MqttSink(sinks.mqtt, storage, counter))

    def start(self) -> None:
        for sink in self.sinks:
            sink.start()

    def stop(self) -> None:
        for sink in self.sinks:
            sink.stop()

    def status(self) -> list[dict]:
        return [s.status() for s in self.sinks]
