"""The log's repeat filter, on a fake clock."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest
import uvicorn

from vigil.http_guard import RepeatFilter, guarded_protocol


def record(msg: str, name: str = "asyncio") -> logging.LogRecord:
    return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, None, None)


def test_a_flood_of_one_message_is_five_lines_a_minute_then_a_count():
    now = [0.0]
    f = RepeatFilter(burst=5, window_s=60.0, clock=lambda: now[0])
    passed = []
    for i in range(1000):  # the same message with other numbers in it is the same message
        now[0] = i * 0.01
        r = record(f"Exception in callback _start_serving() when={4041.0 + i} at 0x7fd0{i:04x}")
        if f.filter(r):
            passed.append(r.getMessage())
    assert len(passed) == 5
    now[0] = 61.0
    r = record("Exception in callback _start_serving() when=9999.0 at 0x7fd0ffff")
    assert f.filter(r) and "and 995 more like it in the last 60 s" in r.getMessage()


def test_other_messages_are_not_held_back():
    f = RepeatFilter(burst=1, clock=lambda: 0.0)
    assert f.filter(record("stream a failed")) and f.filter(record("stream b failed"))
    assert f.filter(record("stream a failed", name="vigil.streams"))  # another logger
    assert not f.filter(record("stream a failed"))


def test_names_that_end_in_digits_are_other_messages():
    # six cameras cam0..cam5 going overloaded: each camera's first line gets through,
    # where counting "cam1" and "cam3" as the same message held back all but five
    f = RepeatFilter(burst=1, clock=lambda: 0.0)
    lines = [f"app cam{i} is overloaded: {30 + i}% of its frames shed, sampling 12.0 of 15.0 frames/s"
             for i in range(6)]
    assert all(f.filter(record(line, name="vigil.load")) for line in lines)
    assert not f.filter(record("app cam1 is overloaded: 41% of its frames shed, sampling 9.6 of 15.0 frames/s",
                               name="vigil.load"))  # cam1 again, other numbers: the same message
    assert f.filter(record("stream-3 failed")) and f.filter(record("stream-4 failed"))


@pytest.fixture
def capped_server():
    """uvicorn with the guarded protocol, 4 connections at most, a 1 s grace before an
    idle connection may be evicted, and a 30 s header timeout (out of the way)."""
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="error", http=guarded_protocol(4, 30.0, evict_grace_s=1.0),
                            lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield sock.getsockname()[1]
    server.should_exit = True
    thread.join(10)


def closed(s: socket.socket) -> bool:
    s.settimeout(0.3)
    try:
        return s.recv(1024) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


@pytest.mark.slow
def test_a_connection_younger_than_the_grace_is_not_evicted_and_an_older_one_is(capped_server):
    """Past the cap, a newcomer gets 503 while every idle connection is younger than the
    grace (its request may be on its way, read in the loop's next turn); once the
    oldest has waited longer, it makes room instead."""
    idle = [socket.create_connection(("127.0.0.1", capped_server)) for _ in range(4)]
    try:
        late = socket.create_connection(("127.0.0.1", capped_server))
        late.settimeout(5)
        assert late.recv(1024).startswith(b"HTTP/1.1 503")
        late.close()
        assert not any(closed(s) for s in idle)
        time.sleep(1.2)
        with socket.create_connection(("127.0.0.1", capped_server)) as fresh:
            fresh.settimeout(5)
            fresh.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            assert fresh.recv(1024).startswith(b"HTTP/1.1 200")
        assert closed(idle[0]) and not any(closed(s) for s in idle[1:])
    finally:
        for s in idle:
            s.close()
