"""The MQTT sink against a real Mosquitto broker (Debian's), started here: every stored
event arrives on vigil/events with its id, its snapshot answers when the message
arrives, the retained line counts equal the app's, and vigil/available says online,
then offline."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time

import cv2
import httpx
import numpy as np
import paho.mqtt.client as mqtt
import pytest

from runtime.snapshots import crop_bounds
from support.processes import VigilServer, free_port, settled, wait_for

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
pytestmark = pytest.mark.skipif(not os.path.exists(MOSQUITTO),
                                reason="Debian's mosquitto is not installed (make system-deps)")


class Subscriber:
    """A paho client that keeps every message of `topic` (retained ones too)."""

    def __init__(self, port: int, topic: str) -> None:
        self.messages: list[tuple[str, bytes, bool]] = []
        self.react = None  # called with each message, on paho's thread, as it arrives
        self.lock = threading.Lock()
        subscribed = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        self.client.on_connect = lambda c, *_: c.subscribe(topic, qos=1)
        self.client.on_subscribe = lambda *_: subscribed.set()
        self.client.on_message = self._keep
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert subscribed.wait(10), "subscribed"

    def _keep(self, client, userdata, msg) -> None:
        with self.lock:
            self.messages.append((msg.topic, msg.payload, bool(msg.retain)))
        if self.react is not None:
            self.react(msg.topic, msg.payload)

    def of(self, topic: str) -> list[bytes]:
        with self.lock:
            return [p for t, p, _ in self.messages if t == topic]

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def broker():
    port = free_port()
    proc = subprocess.Popen([MOSQUITTO, "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, 10, "mosquitto to listen")
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def test_every_event_arrives_and_the_retained_counts_equal_the_apps(tmp_path, bundled_clips, broker):
    watch = Subscriber(broker, "vigil/#")
    config = {"llm_model": None, "caption_every_s": 0, "sinks": {"mqtt": {"host": "127.0.0.1", "port": broker}},
              "snapshots": {"enabled": True},
              "cameras": [{"name": "cam", "url": str(bundled_clips[0]), "options": {"realtime": False},
                           "apps": ["people-counter-scenedet"]}]}
    # its own: an MQTT sink in its config
    srv = VigilServer(tmp_path / "data", config=config).start()
    answered: dict[str, int | str] = {}  # snapshot URL -> its status when the message naming it came
    handled: list[int] = []  # ids of the events the subscriber has finished with

    def fetch_snapshot(topic: str, payload: bytes) -> None:
        if topic != "vigil/events":
            return
        after = json.loads(payload)["after"]
        if after.get("snapshot_url"):
            try:
                answered[after["snapshot_url"]] = httpx.get(srv.url + after["snapshot_url"], timeout=30).status_code
            except httpx.HTTPError as exc:  # kept for the assertion: raised here it would end paho's loop
                answered[after["snapshot_url"]] = repr(exc)
        handled.append(after["id"])

    watch.react = fetch_snapshot
    try:
        wait_for(lambda: b"online" in watch.of("vigil/available"), 20, "vigil/available online")
        with httpx.Client(base_url=srv.url, timeout=60) as api:
            wait_for(lambda: api.get("/v1/streams/cam").json()["status"] == "ended", 180, "the clip to end")
            settled(api)
            stored = api.get("/v1/events", params={"limit": 10_000}).json()["events"]
            counts = api.get("/v1/apps/cam-people-counter-scenedet").json()["counts"]["lines"]
            metrics = api.get("/metrics").text
            shot = next(e for e in stored if e.get("snapshot"))
            crop = cv2.imdecode(np.frombuffer(api.get(f"/v1/events/{shot['id']}/crop.jpg").content, np.uint8),
                                cv2.IMREAD_COLOR)
            # a track_end whose last frame was in an earlier block (lost, then timed out) has none
            ended = next(e for e in stored if e["type"] == "track_end" and not e.get("snapshot"))
            no_shot = api.get(f"/v1/events/{ended['id']}/snapshot.jpg")
            unknown = api.get("/v1/events/999999/snapshot.jpg")
            # each fetch above waits on the server, so on a busy machine the subscriber
            # lags the broker: the server stays up until it has handled every message
            wait_for(lambda: len(handled) >= len(stored), 120, "the subscriber to handle every event")
    finally:
        srv.stop()
    wait_for(lambda: watch.of("vigil/available")[-1:] == [b"offline"], 10, "vigil/available offline")
    events = [json.loads(p) for p in watch.of("vigil/events")]
    watch.close()
    assert stored and sorted(m["after"]["id"] for m in events) == sorted(e["id"] for e in stored)
    kinds = {e["id"]: e["type"] for e in stored}
    for m in events:
        want = {"track_start": "new", "track_end": "end"}.get(kinds[m["after"]["id"]], "update")
        assert m["type"] == want, m
    crossed = [m["after"] for m in events if m["after"]["type"] == "line_cross"]
    assert crossed, "the clip has crossings"
    # every event seen on a frame with its box names a snapshot, which answered at once;
    # a zone_enter with none is of a track that ended before its entry settled, said with
    # its track_end
    boxed = [m["after"] for m in events if m["after"]["type"] in ("track_start", "line_cross", "zone_enter")
             and "box" in m["after"]]
    assert boxed and all(a["has_snapshot"] and a["snapshot_url"] in answered for a in boxed)
    ends = {(a["track_id"], a["t_ms"]) for a in (m["after"] for m in events) if a["type"] == "track_end"}
    assert all((a["track_id"], a["t_ms"]) in ends for a in (m["after"] for m in events)
               if a["type"] == "zone_enter" and "box" not in a)
    assert set(answered.values()) == {200}, answered
    left, top, right, bottom = crop_bounds(shot["box"], 640, 360)
    assert crop.shape == (bottom - top, right - left, 3)  # the snapshot's box is the event's
    assert no_shot.status_code == 404 and "has no snapshot" in no_shot.json()["detail"]
    assert unknown.status_code == 404 and "no event 999999" in unknown.json()["detail"]
    # a fresh subscriber gets the retained counts: they are the app's
    late = Subscriber(broker, "vigil/cam/#")
    time.sleep(1.0)
    retained = {t: int(p) for t, p, r in late.messages if r and "/zone/" not in t}
    retained_zones = {t: int(p) for t, p, r in late.messages if r and "/zone/" in t}
    late.close()
    want = {f"vigil/cam/cam-people-counter-scenedet/{line}/{cls}/{way}": n
            for line, c in counts.items() for cls, ways in c["by_class"].items() for way, n in ways.items() if n}
    assert retained == want
    assert 'vigil_sink_deliveries_total{kind="mqtt"' in metrics
    # zone occupancy after each enter and exit: what the stored events say, in order
    app = "cam-people-counter-scenedet"
    inside: dict[str, dict[int, str]] = {}  # zone -> track inside -> the class it entered as
    seen: dict[str, set[str]] = {}
    want_zones: dict[str, list[int]] = {}
    for e in sorted(stored, key=lambda e: e["id"]):
        if e["app"] != app or e["type"] not in ("zone_enter", "zone_exit"):
            continue
        zone = inside.setdefault(e["zone"], {})
        if e["type"] == "zone_enter":
            zone[e["track_id"]] = e["class"]
        else:
            zone.pop(e["track_id"], None)
        classes = seen.setdefault(e["zone"], set())
        classes.add(e["class"])
        for cls in classes:
            n = sum(1 for c in zone.values() if c == cls)
            want_zones.setdefault(f"vigil/cam/{app}/zone/{e['zone']}/{cls}", []).append(n)
    got_zones: dict[str, list[int]] = {}
    for topic, payload, _ in watch.messages:
        if topic.startswith(f"vigil/cam/{app}/zone/"):
            got_zones.setdefault(topic, []).append(int(payload))
    assert want_zones and any(max(v) > 0 for v in want_zones.values()), want_zones  # people were in zones
    assert got_zones == want_zones
    assert all(v[-1] == 0 for v in got_zones.values())  # the clip ended: every track left
    assert retained_zones == {t: 0 for t in got_zones}
