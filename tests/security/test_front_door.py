"""The HTTP front door: bodies counted as they arrive, the LLM routes behind the key,
documents without aliases or deep nesting, short error bodies, bounded connections."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from support.watch import AUTH, CAPTION_PROMPT, still_serving, watch

MB = 1 << 20


def chunked_post(server, path: str, total_bytes: int, headers: dict | None = None) -> tuple[int | None, int]:
    """Streams `total_bytes` of body with Transfer-Encoding: chunked (no Content-Length),
    stopping when the server answers or hangs up; (status, bytes sent)."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
             "Transfer-Encoding: chunked", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    chunk, sent = b"[" + b"1," * 32767 + b"1", 0
    try:
        while sent < total_bytes:
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
    except OSError:  # the server answered and closed
        pass
    try:
        head = sock.recv(4096).split(b"\r\n", 1)[0]
        status = int(head.split()[1]) if head else None
    except OSError:
        status = None
    sock.close()
    return status, sent


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/streams", "/v1/apps"])
def test_a_300_mb_chunked_body_without_a_key_is_cut_off_at_the_limit(guarded, path):
    with watch(guarded) as w:
        status, sent = chunked_post(guarded, path, 300 * MB)
    assert status == 413, f"sent {sent} bytes, got {status}"
    assert sent < 64 * MB  # refused while arriving, not after
    w.held()


def raw(server, data: bytes) -> bytes:
    """Sends `data` as it is; what comes back before the server closes."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(data)
        reply = b""
        while len(reply) < 65536:  # every reply here closes the connection after it
            piece = sock.recv(65536)
            if not piece:
                break
            reply += piece
        return reply


def test_a_declared_length_over_the_limit_is_refused_before_any_body(guarded):
    reply = raw(guarded, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n{" % (300 * MB))
    assert reply.startswith(b"HTTP/1.1 413") and b"limits.max_body_bytes" in reply


@pytest.mark.parametrize("path,body", [
    ("/v1/completions", {"prompt": CAPTION_PROMPT, "max_tokens": 4}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": CAPTION_PROMPT}], "max_tokens": 4}),
    ("/v1/ask", {"question": "how many people crossed midblock?"}),
])
def test_the_llm_routes_need_the_key(anon, path, body):
    r = anon.post(path, json=body)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert anon.post(path, json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert anon.post(path, json=body, headers=AUTH).status_code in (200, 422)  # 422: no line named midblock


def test_open_llm_routes_opens_just_them(tmp_path):
    """In-process: the same routes with `open_llm_routes` need no key; the rest still do."""
    from fastapi.testclient import TestClient

    from vigil.api import build_app
    from vigil.service import Vigil
    from vigil.settings import Settings

    for open_routes, expected in ((False, 401), (True, 503)):  # 503: this service has no LLM loaded
        service = Vigil(Settings(api_keys=("k",), data_dir=tmp_path / str(open_routes), open_llm_routes=open_routes,
                                 llm_model=None))
        try:
            client = TestClient(build_app(service))
            assert client.post("/v1/completions", json={"prompt": "x"}).status_code == expected
            assert client.post("/v1/streams", json={"name": "s", "url": "x.mp4"}).status_code == 401
        finally:
            service.close()


ALIAS_BOMB = """name: bomb
source: a
detector: motion
detector_options:
  a: &a [x, x, x, x, x, x, x, x, x, x]
  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
  d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
  e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
  f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
  g: [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
"""


def test_a_yaml_alias_bomb_is_refused_without_expanding(guarded, api):
    assert len(ALIAS_BOMB) < 600  # 10^7 points once expanded
    with watch(guarded) as w:
        r = api.post("/v1/apps", content=ALIAS_BOMB, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 422 and "aliases" in r.json()["detail"]
    assert api.get("/v1/apps/bomb").status_code == 404
    w.held(max_growth_mb=50)
    zones = {"name": "bomb", "source": "a", "zones": {f"z{i}": [[0.5, 0.5]] * 300 for i in range(60)}}
    r = api.post("/v1/apps", json=zones)
    assert r.status_code == 422 and len(r.content) < 4000, len(r.content)  # the echo is cut short


@pytest.mark.parametrize("method,path", [("POST", "/v1/apps"), ("PATCH", "/v1/apps/people"),
                                         ("POST", "/v1/completions"), ("POST", "/v1/streams"),
                                         ("POST", "/v1/ask")])
def test_deep_nesting_is_422_before_any_parser_recurses(api, method, path):
    for body in (b"[" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000):
        r = api.request(method, path, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and "nested deeper than" in r.json()["detail"], r.text[:300]
    r = api.request(method, path, content=b"a:\n" + b"  " * 40 + b"- [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
                    headers={"Content-Type": "application/yaml"})
    assert r.status_code == 422


@pytest.mark.parametrize("body,field", [
    ({"prompt": CAPTION_PROMPT, "max_tokens": 1e400}, "max_tokens"),
    ({"prompt": CAPTION_PROMPT, "seed": "abc"}, "seed"),
    ({"prompt": CAPTION_PROMPT, "stream_options": "yes"}, "stream_options"),
    ({"prompt": CAPTION_PROMPT, "stream": "yes"}, "stream"),
    ({"prompt": CAPTION_PROMPT, "temperature": float("nan")}, "temperature"),
    ({"prompt": CAPTION_PROMPT, "temperature": 1e300}, "temperature"),
    ({"prompt": CAPTION_PROMPT, "top_p": float("inf")}, "top_p"),
    ({"prompt": "x" * 5000}, "limits.max_prompt_chars"),
    ({"prompt": CAPTION_PROMPT, "max_tokens": 5000}, "max_tokens"),
])
def test_bad_llm_numbers_are_422_naming_the_field(api, body, field):
    r = api.post("/v1/completions", content=json.dumps(body), headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and field in r.json()["detail"], r.text


def test_names_are_matched_whole(api):
    r = api.post("/v1/streams", json={"name": "nl\n", "url": "sample_videos/street_a.mp4"})
    assert r.status_code == 422 and "name" in r.json()["detail"]
    r = api.post("/v1/apps", json={"name": "nl\n", "source": "a", "detector": "motion"})
    assert r.status_code == 422 and "name" in r.json()["detail"]


def test_errors_name_no_path_of_this_machine(api):
    from support.processes import ROOT

    for r in (api.get("/v1/models/nosuch"), api.post("/v1/models/nosuch/load"),
              api.post("/v1/apps", json={"name": "x", "source": "a", "detector": "nosuch"}),
              api.post("/v1/streams", json={"name": "x", "url": "/etc/shadow"})):
        assert r.status_code == 404, r.text
        assert str(ROOT) not in r.text and "/work" not in r.text, r.text


def test_idle_connections_are_evicted_and_healthz_is_served(guarded):
    """More idle sockets than limits.max_connections (48): the idlest make room for a
    client with a request (a newcomer while all are fresh gets 503), and those that
    send nothing are closed after header_timeout_s (2 s); none of it fills the log."""
    log_before = guarded.log.stat().st_size
    socks = []
    with watch(guarded) as w:
        for _ in range(200):
            socks.append(socket.create_connection(("127.0.0.1", guarded.port)))
        time.sleep(3.5)
        with httpx.Client(base_url=guarded.url, timeout=5) as client:
            assert client.get("/healthz").status_code == 200
    closed = 0
    for s in socks:
        s.settimeout(0.5)
        try:
            answer = s.recv(4096)
            closed += answer == b"" or answer.startswith(b"HTTP/1.1 503")
        except OSError:
            closed += 1
        s.close()
    assert closed == len(socks)  # every one of them: refused, evicted or timed out
    w.held()
    assert guarded.log.stat().st_size - log_before < 20_000
    still_serving(guarded)


def test_a_slow_body_is_cut_off(guarded):
    t0 = time.monotonic()
    reply = raw(guarded, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 1000\r\n\r\n{\"prompt\": ")  # and no more bytes come
    assert reply.startswith(b"HTTP/1.1 408") and time.monotonic() - t0 < 5  # header_timeout_s is 2
