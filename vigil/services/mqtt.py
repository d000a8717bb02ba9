"""The MQTT sink: every stored event to a broker, with Frigate's topics.

- `PREFIX/events`: per event, `{"type": "new" | "update" | "end", "before", "after"}`;
  `new` for a track's start, `end` for its end, `update` for everything else (a line
  crossed, a zone entered or left, a stay past `loiter_s`, a class change). `after` is
  the event as stored (its `id` among the rest) with the track's `current_zones` and
  `entered_zones`; `before` is the track's previous `after` (null for its first, or
  the first after a restart). So a subscriber can account for every stored event.
- `PREFIX/CAMERA/APP/LINE/CLASS/in|out`: the run's count, retained, after each
  crossing (counted in storage up to that event the first time, so exact across
  restarts, then kept up to date here as the crossings go out in order).
- `PREFIX/CAMERA/APP/zone/ZONE/CLASS`: how many tracks of the class are in the zone,
  retained, after each enter and exit (from storage, then kept here, as the counts;
  a class seen in the zone gets its 0 when the last one leaves).
- `PREFIX/available`: `online` while Vigil is connected, `offline` as its last will.
- Home Assistant discovery (`DISCOVERY/sensor/.../config`, retained) for each count
  and occupancy.

Messages go with QoS 1, an event's only once the broker acknowledged the previous
event's: the events table is the outbox here too (vigil/services/outbox.py), so an
unreachable broker or a restart loses nothing.
"""

from __future__ import annotations

import json
import re
from collections import Counter as Tally
from typing import Any

import paho.mqtt.client as mqtt
from prometheus_client import Counter

from runtime.snapshots import with_links
from vigil.services.outbox import OutboxSink
from vigil.settings import Mqtt
from vigil.storage import Storage

# counts and zone contents kept between messages; past this many, all are forgotten and
# each is read from storage again when next needed
MAX_TALLIES = 10_000


def _object_id(*parts: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", "_".join(parts))


class MqttSink(OutboxSink):
    kind = "mqtt"

    def __init__(self, cfg: Mqtt, storage: Storage, counter: Counter) -> None:
        target = f"mqtt://{cfg.host}:{cfg.port}/{cfg.topic_prefix}"
        super().__init__(f"mqtt:{cfg.host}:{cfg.port}/{cfg.topic_prefix}", target, None, cfg.max_backoff_s, storage,
                         counter)
        self.cfg = cfg
        self.prefix = cfg.topic_prefix
        self._tracks: dict[tuple, dict] = {}  # (stream, app, track) -> its latest `after`
        self._announced: set[str] = set()  # discovery topics sent by this process
        self._zone_classes: dict[tuple, set[str]] = {}  # (camera, app, zone) -> classes seen in it
        self._crossings: dict[tuple, int] = {}  # (camera, app, run, line, class, way) -> count so far
        self._inside: dict[tuple, dict[int, str]] = {}  # (camera, app, run, zone) -> track -> class
        self._client: Any = None

    def _open(self) -> None:
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=self.cfg.client_id)
        if self.cfg.username is not None:
            client.username_pw_set(self.cfg.username, self.cfg.password)
        available = f"{self.prefix}/available"
        client.will_set(available, "offline", qos=1, retain=True)
        client.on_connect = lambda c, *_: c.publish(available, "online", qos=1, retain=True)
        client.reconnect_delay_set(0.5, max(1, int(self.cfg.max_backoff_s)))
        client.connect_async(self.cfg.host, self.cfg.port, keepalive=30)
        client.loop_start()
        self._client = client

    def _close(self) -> None:
        if self._client is None:
            return
        if self._client.is_connected():
            self._client.publish(f"{self.prefix}/available", "offline", qos=1, retain=True).wait_for_publish(2.0)
        self._client.disconnect()
        self._client.loop_stop()

    def _send(self, event: dict) -> tuple[str, str | None]:
        if not self._client.is_connected():
            return "failed", "not connected to the broker"
        key = (event["stream"], event["app"], event["track_id"])
        before = self._tracks.get(key)
        after = self._after(event, before)
        kind = {"track_start": "new", "track_end": "end"}.get(event["type"], "update")
        messages = [(f"{self.prefix}/events", json.dumps({"type": kind, "before": before, "after": after}), False)]
        tally = None  # (tallies, key, value): kept once the event's messages are acknowledged
        if event["type"] == "line_cross":
            tally, more = self._line_count(event)
            messages += more
        elif event["type"] in ("zone_enter", "zone_exit"):
            tally, more = self._occupancy(event)
            messages += more
        for topic, payload, retain in messages:
            info = self._client.publish(topic, payload, qos=1, retain=retain)
            try:
                info.wait_for_publish(self.cfg.publish_timeout_s)
            except (RuntimeError, ValueError) as exc:  # the connection went while it waited
                return "failed", f"publish to {topic}: {exc}"
            if not info.is_published():
                return "failed", f"publish to {topic} not acknowledged"
        if event["type"] == "track_end":
            self._tracks.pop(key, None)
        elif event["track_id"] >= 0:
            self._tracks[key] = after
        self._announced |= {t for t, _, _ in messages if t.startswith(f"{self.cfg.discovery_prefix}/")}
        if tally is not None:
            tallies, key, value = tally
            if len(tallies) >= MAX_TALLIES:
                tallies.clear()
            tallies[key] = value
        return "delivered", None

    @staticmethod
    def _after(event: dict, before: dict | None) -> dict:
        current = list(before["current_zones"]) if before else []
        entered = list(before["entered_zones"]) if before else []
        zone = event.get("zone")
        if event["type"] == "zone_enter" and zone not in current:
            current.append(zone)
            entered += [zone] if zone not in entered else []
        elif event["type"] == "zone_exit" and zone in current:
            current.remove(zone)
        return {**with_links(event), "current_zones": current, "entered_zones": entered}

    def _line_count(self, event: dict) -> tuple[tuple, list[tuple[str, str, bool]]]:
        """The crossing's count (to keep once sent) and its messages."""
        camera, app, line, cls, way = event["stream"], event["app"], event["line"], event["class"], event["direction"]
        run = event.get("run", 0)
        key = (camera, app, run, line, cls, way)
        known = self._crossings.get(key)
        n = known + 1 if known is not None else \
            self.storage.count_crossings(camera, app, run, line, cls, way, event["id"])
        topic = f"{self.prefix}/{camera}/{app}/{line}/{cls}/{way}"
        messages = self._discovery(topic, f"{camera} {app} {line} {cls} {way}", "total_increasing", cls,
                                   camera, app, line, cls, way) + [(topic, str(n), True)]
        return (self._crossings, key, n), messages

    def _occupancy(self, event: dict) -> tuple[tuple, list[tuple[str, str, bool]]]:
        """The zone's tracks after the event (to keep once sent) and its messages."""
        camera, app, zone, run = event["stream"], event["app"], event["zone"], event.get("run", 0)
        key = (camera, app, run, zone)
        known = self._inside.get(key)
        if known is None:
            tracks = self.storage.zone_tracks(camera, app, run, zone, event["id"])
        else:
            tracks = dict(known)
            if event["type"] == "zone_enter":
                tracks[event["track_id"]] = event["class"]
            else:
                tracks.pop(event["track_id"], None)
        inside = Tally(tracks.values())
        seen = self._zone_classes.setdefault((camera, app, zone), set())
        seen |= set(inside) | {event["class"]}
        out = []
        for cls in sorted(seen):
            topic = f"{self.prefix}/{camera}/{app}/zone/{zone}/{cls}"
            out += self._discovery(topic, f"{camera} {app} zone {zone} {cls}", "measurement", cls, camera, app,
                                   "zone", zone, cls)
            out.append((topic, str(inside.get(cls, 0)), True))
        return (self._inside, key, tracks), out

    def _discovery(self, topic: str, name: str, state_class: str, unit: str,
                   *parts: str) -> list[tuple[str, str, bool]]:
        """Home Assistant's config for a sensor on `topic`, once per process."""
        if not self.cfg.discovery_prefix:
            return []
        object_id = _object_id("vigil", *parts)
        config = f"{self.cfg.discovery_prefix}/sensor/{object_id}/config"
        if config in self._announced:
            return []
        return [(config, json.dumps({"name": name, "unique_id": object_id, "state_topic": topic,
                                     "availability_topic": f"{self.prefix}/available", "state_class": state_class,
                                     "unit_of_measurement": unit}), True)]
