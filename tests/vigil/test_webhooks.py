"""Webhooks that lose nothing: a real receiver (an HTTP server in this process) that
is down for the first 10 s, and `vigil serve` restarted once in the middle. Every
stored event must arrive, once by its idempotency key, in order per stream, signed."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from runtime.snapshots import with_links
from support.processes import VigilServer, free_port, settled, wait_for

SECRET = "s3cr3t"


class Receiver:
    def __init__(self, port: int) -> None:
        self.got: list[tuple[dict, bytes]] = []  # (headers, body), in arrival order
        lock = self.lock = threading.Lock()
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with lock:
                    got.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.slow
def test_every_event_is_delivered_once_in_order_and_signed_through_an_outage_and_a_restart(tmp_path,
                                                                                           bundled_clips):
    port = free_port()
    config = {"llm_model": None, "caption_every_s": 0,
              "sinks": {"webhooks": [{"url": f"http://127.0.0.1:{port}/hook", "secret": SECRET,
                                      "max_backoff_s": 1.0}]},
              "cameras": [{"name": "cam", "url": str(bundled_clips[1]), "options": {"realtime": False},
                           "apps": ["people-counter-scenedet"]}]}
    # its own: a webhook sink in its config, and a restart
    srv = VigilServer(tmp_path / "data", config=config).start()
    receiver = None
    started = time.monotonic()
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as api:
            wait_for(lambda: api.get("/v1/events", params={"limit": 1}).json()["events"], 120, "a first event")
            wait_for(lambda: api.get("/v1/sinks").json()[0]["retrying"], 20, "the webhook to be retrying")
            # the counts are the process's: after the restart the receiver may be up
            # before the sink's first try, so the failures are read here
            down = api.get("/v1/sinks").json()[0]
        assert srv.stop(), "a graceful stop"
        srv.start()  # the same data and config: the stream runs again, and the backlog waits
        time.sleep(max(0.0, 10.0 - (time.monotonic() - started)))
        receiver = Receiver(port)
        with httpx.Client(base_url=srv.url, timeout=60) as api:
            wait_for(lambda: api.get("/v1/streams/cam").json()["status"] == "ended", 180, "the clip to end")
            settled(api)
            sink = api.get("/v1/sinks").json()[0]
            stored, after = [], 0
            while True:
                page = api.get("/v1/events", params={"after_id": after, "limit": 1000}).json()
                stored += page["events"]
                if page["next_after_id"] is None:
                    break
                after = page["next_after_id"]
    finally:
        srv.stop()
        if receiver is not None:
            receiver.close()

    assert down["failures"] > 0 and down["retrying"], down
    assert not sink["retrying"] and sink["rejected"] == 0, sink
    assert "s3cr3t" not in json.dumps(sink)
    runs = {e["run"] for e in stored}
    assert runs == {1, 2}, runs  # the restart started the stream again
    first: dict[str, dict] = {}
    for headers, body in receiver.got:
        assert headers["x-vigil-signature"] == "sha256=" + hmac.new(SECRET.encode(), body,
                                                                   hashlib.sha256).hexdigest()
        event = json.loads(body)
        assert headers["idempotency-key"] == str(event["id"])
        first.setdefault(headers["idempotency-key"], event)
    assert sorted(first) == sorted(str(e["id"]) for e in stored)  # every stored event, none other
    assert [e for e in first.values()] == sorted(first.values(), key=lambda e: e["id"])  # in order
    by_id = {e["id"]: e for e in stored}
    assert all(with_links(by_id[e["id"]]) == e for e in first.values())  # as stored, with snapshot links
