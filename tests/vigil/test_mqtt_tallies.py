"""The MQTT sink's retained counts and zone occupancy, kept between messages: each
value is the one storage gives up to that event, storage is asked once per count (not
per message), and a publish that fails counts nothing. The broker is a recording fake
(this is the sink's logic; tests/vigil/test_mqtt.py runs it against Mosquitto)."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Counter

from vigil.services.mqtt import MqttSink
from vigil.settings import Mqtt
from vigil.storage import Storage


class Published:
    def __init__(self, ok: bool) -> None:
        self.ok = ok

    def wait_for_publish(self, timeout: float) -> None:
        pass

    def is_published(self) -> bool:
        return self.ok


class Broker:
    def __init__(self) -> None:
        self.retained: dict[str, str] = {}
        self.fail = False

    def is_connected(self) -> bool:
        return True

    def publish(self, topic: str, payload: str, qos: int, retain: bool) -> Published:
        if retain and not self.fail:
            self.retained[topic] = payload
        return Published(not self.fail)


class Asked:
    """Storage, counting the queries the sink makes."""

    def __init__(self, storage: Storage) -> None:
        self.storage, self.queries = storage, 0

    def count_crossings(self, *args):
        self.queries += 1
        return self.storage.count_crossings(*args)

    def zone_tracks(self, *args):
        self.queries += 1
        return self.storage.zone_tracks(*args)


def events(rng: random.Random, n: int) -> list[dict]:
    out, inside = [], set()
    for i in range(n):
        track = rng.randrange(12)
        base = {"app": "counter", "stream": "gate", "t_ms": 100.0 * i, "track_id": track,
                "class": rng.choice(["person", "car"]), "run": 1}
        if rng.random() < 0.5:
            out.append({**base, "type": "line_cross", "line": rng.choice(["a", "b"]),
                        "direction": rng.choice(["in", "out"])})
        else:
            kind = "zone_exit" if track in inside else "zone_enter"
            inside ^= {track}
            out.append({**base, "type": kind, "zone": "lot"})
    return out


def test_counts_and_occupancy_equal_storage_and_storage_is_asked_once_per_count(tmp_path):
    storage = Storage(tmp_path / "v.db")
    stored = storage.add_events(events(random.Random(3), 300))
    counter = Counter("t_deliveries", "tries", ["sink", "target", "outcome"], registry=CollectorRegistry())
    sink = MqttSink(Mqtt(host="127.0.0.1", discovery_prefix=None), storage, counter)
    sink.storage = asked = Asked(storage)
    sink._client = broker = Broker()
    for k, event in enumerate(stored):
        if k in (40, 41, 200):  # the broker refuses it once; the retry must not count it twice
            broker.fail = True
            assert sink._send(event)[0] == "failed"
            broker.fail = False
        assert sink._send(event) == ("delivered", None)
        if event["type"] == "line_cross":
            topic = f"vigil/gate/counter/{event['line']}/{event['class']}/{event['direction']}"
            want = storage.count_crossings("gate", "counter", 1, event["line"], event["class"], event["direction"],
                                           event["id"])
            assert broker.retained[topic] == str(want), (k, event)
        else:
            inside = storage.zone_tracks("gate", "counter", 1, "lot", event["id"])
            for cls in ("person", "car"):
                topic = f"vigil/gate/counter/zone/lot/{cls}"
                if topic in broker.retained:
                    want = sum(1 for c in inside.values() if c == cls)
                    assert broker.retained[topic] == str(want), (k, event)
    # 2 lines x 2 classes x 2 ways, and one zone (the refused tries ask too)
    assert asked.queries <= 2 * 2 * 2 + 1 + 3
    storage.close()
