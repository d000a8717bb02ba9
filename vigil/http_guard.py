"""What stands between the network and the REST routes.

- `BodyGuard` (ASGI, outermost): a request's body is counted as it arrives, chunked
  or not, and refused with 413 the moment it passes `max_body_bytes`, before routing
  and before the key is checked, so a client without a key costs at most that much
  memory. A JSON body nested deeper than `max_json_depth` is refused (422) before any
  parser recurses into it. A body that trickles in slower than `header_timeout_s` a
  chunk is cut off (408).
- `GuardedH11Protocol` (uvicorn's h11 protocol, per connection): past
  `max_connections` open connections, the one that has waited longest without sending
  anything (and at least `EVICT_GRACE_S`, so a client whose request is still on its
  way is not cut) is closed to make room, and when there is none the new one gets 503
  and is closed at once (its descriptor is back before the process runs out). A connection
  that has not sent its request headers within `header_timeout_s` is closed.
- `RepeatFilter` (logging): the same message from the same place at most a few times
  a minute, then one line saying how many were held back. A flood of refused
  connections must not fill the disk with log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any, Callable

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from apps.documents import json_depth

log = logging.getLogger("vigil.http")
# a number that stands alone ("when=4041.0", "30%", "0x7fd0"), not the digits that end a
# name ("cam1", "stream-3"): those are other cameras, not the same message again
_NUMBERS = re.compile(r"(?<![\w.-])(0x[0-9a-fA-F]+|\d+(\.\d+)?)")


async def _reply(send, status: int, detail: str, headers: tuple = ()) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *headers]})
    await send({"type": "http.response.body", "body": body})


UPLOAD_PATH = re.compile(r"^/v1/models/[^/]+/versions/?$")


@dataclass(frozen=True)
class Upload:
    """The one route whose body may pass max_body_bytes (a model archive): only for a
    client with a key, checked from the headers before any of the body is read; the body
    goes through as it arrives (the route writes it to disk and counts it), never held
    here."""

    path: re.Pattern
    max_bytes: int
    authorized: Callable[[str | None], bool]


class BodyGuard:
    def __init__(self, app, max_body_bytes: int, max_json_depth: int, chunk_timeout_s: float,
                 upload: Upload | None = None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_json_depth = max_json_depth
        self.chunk_timeout_s = chunk_timeout_s
        self.upload = upload

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if self.upload is not None and scope["method"] == "POST" and self.upload.path.match(scope["path"]):
            await self._upload(scope, receive, send, headers)
            return
        too_big = f"body over {self.max_body_bytes} bytes (limits.max_body_bytes)"
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            await _reply(send, 413, too_big)
            return
        chunks, size, more = [], 0, True
        while more:
            try:
                message = await asyncio.wait_for(receive(), self.chunk_timeout_s)
            except asyncio.TimeoutError:
                await _reply(send, 408, f"body: nothing arrived for {self.chunk_timeout_s:g} s "
                                        "(limits.header_timeout_s)")
                return
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _reply(send, 413, too_big)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if b"yaml" not in headers.get(b"content-type", b"") and json_depth(body) > self.max_json_depth:
            await _reply(send, 422, f"body: nested deeper than {self.max_json_depth} levels (limits.max_json_depth)")
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)


    async def _upload(self, scope, receive, send, headers: dict) -> None:
        auth = headers.get(b"authorization")
        if not self.upload.authorized(auth.decode("latin-1") if auth is not None else None):
            await _reply(send, 401, "missing or invalid API key: send 'Authorization: Bearer KEY'",
                         ((b"www-authenticate", b"Bearer"),))
            return
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.upload.max_bytes):
            await _reply(send, 413, f"body over {self.upload.max_bytes} bytes (limits.max_model_upload_bytes)")
            return

        async def timed() -> dict[str, Any]:
            try:
                return await asyncio.wait_for(receive(), self.chunk_timeout_s)
            except asyncio.TimeoutError:
                return {"type": "http.disconnect"}  # a body that stalls ends the upload

        await self.app(scope, timed, send)


# a connection accepted in the same turn of the loop as a flood has not had its
# request bytes read yet: younger than this, it is not counted as idle
EVICT_GRACE_S = 0.25
_BUSY = b'{"detail": "too many open connections (limits.max_connections); retry shortly"}'
SERVICE_UNAVAILABLE = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
                       b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(_BUSY)) + _BUSY


def guarded_protocol(max_connections: int, header_timeout_s: float, evict_grace_s: float = EVICT_GRACE_S) -> type:
    """uvicorn's h11 protocol with a cap on open connections and on the time a
    connection may take to send its request headers."""

    class GuardedH11Protocol(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._header_timer = None
            self._opened = self.loop.time()
            self._answered = 0
            if len(self.connections) > max_connections and not self._evict_idle():
                transport.write(SERVICE_UNAVAILABLE)
                transport.close()
                return
            self._arm_header_timer()

        def _idle(self) -> bool:
            """Opened, and not one byte of a request yet. (A connection kept alive
            after a response is a client that asked before; the idle timeout closes it.)"""
            return self._answered == 0 and self.conn.their_state is h11.IDLE and self.cycle is None

        def _evict_idle(self) -> bool:
            """Close the connection that has waited longest without sending a request,
            so a client with a request is served and one that only holds a socket is
            not; False when no connection is idle that way."""
            now = self.loop.time()
            idle = [c for c in self.connections if c is not self and c._idle() and not c.transport.is_closing()
                    and now - c._opened >= evict_grace_s]
            if not idle:
                return False
            min(idle, key=lambda c: c._opened).transport.close()
            return True

        def _arm_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

        def handle_events(self) -> None:
            super().handle_events()
            if self._header_timer is not None and self.conn.their_state is not h11.IDLE:
                self._header_timer.cancel()  # the headers are in
                self._header_timer = None

        def on_response_complete(self) -> None:
            self._answered += 1
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_header_timer()  # the next request on this connection gets the same time

        def connection_lost(self, exc) -> None:
            if getattr(self, "_header_timer", None) is not None:
                self._header_timer.cancel()
            super().connection_lost(exc)

    return GuardedH11Protocol


class RepeatFilter(logging.Filter):
    """Lets a message (by logger and first line) through at most `burst` times per
    `window_s`; the first one after a quiet spell says how many were held back."""

    def __init__(self, burst: int = 5, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst, self.window_s, self.clock = burst, window_s, clock
        self._seen: dict[tuple, list] = {}  # key -> [window start, passed, held back]

    def filter(self, record: logging.LogRecord) -> bool:
        # the same message with other numbers (a handle's time, an address) is the same
        # message; with other words (another stream's name) it is another
        key = (record.name, record.levelno, _NUMBERS.sub("#", record.getMessage().split("\n", 1)[0])[:200])
        now = self.clock()
        state = self._seen.get(key)
        if state is None or now - state[0] >= self.window_s:
            held = state[2] if state else 0
            self._seen[key] = [now, 1, 0]
            if len(self._seen) > 10_000:  # forget the oldest keys; one-off messages pile up otherwise
                for old in list(self._seen)[:5_000]:
                    del self._seen[old]
            if held:
                record.msg = f"{record.msg} (and {held} more like it in the last {self.window_s:g} s, not shown)"
            return True
        if state[1] < self.burst:
            state[1] += 1
            return True
        state[2] += 1
        return False
