"""Managed streams for the server: sources that reconnect, report status and never stop
the process.

A `ManagedStream` owns one decoder thread. For a live source (`rtsp://`, `http(s)://`,
`/dev/videoN`) the thread loops forever: open (with a timeout) -> decode into a
drop-oldest buffer -> on any failure or end of stream, wait an exponential backoff
with jitter and open again. Frames of a live source carry wall-clock capture times
(`pts_ms` is epoch milliseconds), so events are stamped in real time; a gap between the
last frame before a failure and the first after it is counted and reported.

A file (or `synthetic://`) is paced at its own frame rate by default, the way a camera
would deliver it (`realtime: false` decodes as fast as the pipeline consumes, with
back-pressure), may loop, and ends with status `ended`; a file that cannot be decoded
ends `failed` with the decoder's message, because retrying cannot heal it.

Status: connecting | live | reconnecting | ended | failed. Credentials in the URL are
never logged or reported (`rtsp://***@host/...`).
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator, Literal
from urllib.parse import urlsplit

import av
import numpy as np

from streams.frames import Frame
from streams.source import LIVE_SCHEMES, SourceError, SourceOptions, monotonic_ms, open_source
from streams.urls import redact_url

log = logging.getLogger("vigil.streams")

Status = Literal["connecting", "live", "reconnecting", "ended", "failed"]


@dataclass(frozen=True)
class StreamOptions:
    transport: Literal["tcp", "udp"] = "tcp"  # RTSP transport
    open_timeout_s: float = 10.0
    read_timeout_s: float = 10.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 10.0  # the cap; each failure doubles the wait up to here
    max_reconnects: int | None = None  # None: forever
    buffer_frames: int = 32
    realtime: bool = True  # files: deliver at the clip's frame rate
    loop: bool = False  # files: start again at the end

    def __post_init__(self) -> None:
        for name in ("open_timeout_s", "read_timeout_s", "backoff_initial_s", "backoff_max_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0; was {getattr(self, name)}")
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError(f"backoff_max_s must be >= backoff_initial_s; was {self.backoff_max_s}")
        if self.buffer_frames < 1:
            raise ValueError(f"buffer_frames must be >= 1; was {self.buffer_frames}")
        if self.max_reconnects is not None and self.max_reconnects < 0:
            raise ValueError(f"max_reconnects must be >= 0 or null (forever); was {self.max_reconnects}")
        if self.transport not in ("tcp", "udp"):
            raise ValueError(f"transport must be 'tcp' or 'udp'; was {self.transport!r}")


@dataclass
class StreamStats:
    status: Status = "connecting"
    last_error: str | None = None
    frames_decoded: int = 0
    frames_dropped: int = 0  # dropped from a full live buffer (oldest first)
    decode_errors: int = 0
    reconnects: int = 0
    gaps: int = 0
    last_gap_ms: float | None = None  # wall-clock length of the latest gap in frames
    width: int | None = None
    height: int | None = None
    fps: float | None = None


def is_live_url(url: str) -> bool:
    scheme = urlsplit(url).scheme.lower() if "://" in url else ""
    return scheme in LIVE_SCHEMES or url.startswith("/dev/video")


def backoff_s(attempt: int, options: StreamOptions, rng: random.Random) -> float:
    """Exponential backoff with full jitter in its upper half: attempt 0 waits about
    `backoff_initial_s`, each later one twice as long, never more than the cap."""
    base = min(options.backoff_max_s, options.backoff_initial_s * (2 ** min(attempt, 30)))
    return base * (0.5 + 0.5 * rng.random())


_END = object()


class ManagedStream:
    """One stream's decoder thread and buffer. `frames()` yields until `stop()` or the end
    of a file; a live stream only ends when stopped."""

    def __init__(self, name: str, url: str, options: StreamOptions | None = None,
                 clock: Callable[[], float] = monotonic_ms, wall_ms: Callable[[], float] = lambda: time.time() * 1000,
                 seed: int | None = None) -> None:
        self.name = name
        self.url = url
        self.redacted = redact_url(url)
        self.options = options or StreamOptions()
        self.live = is_live_url(url)
        self.clock = clock
        self.wall_ms = wall_ms
        self.stats = StreamStats()
        self._rng = random.Random(seed)
        self._buffer: queue.Queue = queue.Queue(maxsize=self.options.buffer_frames)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"stream-{name}", daemon=True)
        self._next_frame_id = 0

    def start(self) -> "ManagedStream":
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def status(self) -> dict:
        with self._lock:
            return {"url": self.redacted, "live": self.live, **asdict(self.stats)}

    def _set(self, **changes) -> None:
        with self._lock:
            for k, v in changes.items():
                setattr(self.stats, k, v)

    # -- consumer -----------------------------------------------------------------------------
    def frames(self, poll_s: float = 0.2) -> Iterator[Frame | None]:
        """Frames in order; None when nothing arrived within `poll_s` (so the consumer can
        look at its own stop flag). Ends after a file's last frame or on stop()."""
        while not self._stop.is_set():
            try:
                item = self._buffer.get(timeout=poll_s)
            except queue.Empty:
                yield None
                continue
            if item is _END:
                return
            yield item

    # -- producer -----------------------------------------------------------------------------
    def _run(self) -> None:
        attempt = 0
        last_frame_wall: float | None = None
        failed = False  # the previous session ended in a failure: its end is a gap
        while not self._stop.is_set():
            self._set(status="connecting" if self.stats.reconnects == 0 else "reconnecting")
            got_frames = False
            try:
                for frame in self._session():
                    if not got_frames:
                        got_frames = True
                        attempt = 0
                        now = self.wall_ms()
                        if failed and last_frame_wall is not None:
                            with self._lock:
                                self.stats.gaps += 1
                                self.stats.last_gap_ms = round(now - last_frame_wall, 1)
                        self._set(status="live")
                    last_frame_wall = self.wall_ms()
                    self._deliver(frame)
                    if self._stop.is_set():
                        return
                if not self.live:
                    if self.options.loop and got_frames:
                        continue
                    self._set(status="ended")
                    self._finish()
                    return
                error = "end of stream"
            except SourceError as exc:
                error = str(exc)
                if not self.live:  # a damaged file does not heal by retrying
                    self._set(status="failed", last_error=error)
                    log.warning("stream %s failed: %s", self.name, error)
                    self._finish()
                    return
            except Exception as exc:  # a decoder bug must not take the server down
                error = f"{type(exc).__name__}: {exc}"
            failed = True
            if self._stop.is_set():
                return
            if self.options.max_reconnects is not None and self.stats.reconnects >= self.options.max_reconnects:
                self._set(status="failed", last_error=error)
                self._finish()
                return
            wait_s = backoff_s(attempt, self.options, self._rng)
            attempt += 1
            with self._lock:
                self.stats.reconnects += 1
                self.stats.status = "reconnecting"
                self.stats.last_error = error
            log.warning("stream %s (%s): %s; reconnecting in %.1f s", self.name, self.redacted, error, wait_s)
            self._stop.wait(wait_s)

    def _finish(self) -> None:
        self._put_waiting(_END)

    def _put_waiting(self, item) -> None:
        """Puts into the buffer, waiting for room until the stream is stopped."""
        while not self._stop.is_set():
            try:
                self._buffer.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def _deliver(self, frame: Frame) -> None:
        with self._lock:
            self.stats.frames_decoded += 1
        if not self.live:  # back-pressure: a file waits for the pipeline
            self._put_waiting(frame)
            return
        while True:  # drop-oldest: a live camera never waits for us
            try:
                self._buffer.put_nowait(frame)
                return
            except queue.Full:
                try:
                    self._buffer.get_nowait()
                    with self._lock:
                        self.stats.frames_dropped += 1
                except queue.Empty:
                    pass

    def _session(self) -> Iterator[Frame]:
        """One connection (or one pass over a file): frames until it ends or fails."""
        if self.live:
            yield from self._live_session()
        else:
            yield from self._file_session()

    def _live_session(self) -> Iterator[Frame]:
        options = {}
        fmt = None
        if self.url.lower().startswith("rtsp"):
            options["rtsp_transport"] = self.options.transport
        if self.url.startswith("/dev/video"):
            fmt = "v4l2"
        try:
            container = av.open(self.url, format=fmt, options=options,
                                timeout=(self.options.open_timeout_s, self.options.read_timeout_s))
        except av.error.FFmpegError as exc:
            raise SourceError(f"{self.redacted}: cannot open: {_reason(exc)}") from None
        try:
            if not container.streams.video:
                raise SourceError(f"{self.redacted}: has no video stream")
            stream = container.streams.video[0]
            stream.thread_type = "SLICE"
            rate = stream.average_rate or stream.guessed_rate
            self._set(width=stream.codec_context.width or None, fps=float(rate) if rate else None)
            try:
                for packet in container.demux(stream):
                    if self._stop.is_set():
                        return
                    try:
                        decoded = packet.decode()
                    except av.error.FFmpegError:
                        with self._lock:
                            self.stats.decode_errors += 1
                        continue
                    for f in decoded:
                        image = f.to_ndarray(format="rgb24")
                        if self.stats.height != image.shape[0] or self.stats.width != image.shape[1]:
                            self._set(width=image.shape[1], height=image.shape[0])
                        yield self._frame(self.wall_ms(), image)
            except av.error.FFmpegError as exc:
                raise SourceError(f"{self.redacted}: read failed: {_reason(exc)}") from None
        finally:
            container.close()

    def _file_session(self) -> Iterator[Frame]:
        src = open_source(self.url, self.name, SourceOptions(max_buffer_frames=4), clock=self.clock)
        info = src.info
        self._set(width=info.width, height=info.height, fps=info.fps)
        frame_ms = 1000.0 / info.fps if info.fps > 0 else 0.0
        start_clock = self.clock()
        offset_ms = self._next_frame_id * frame_ms  # a looped file's time keeps rising
        try:
            for i, f in enumerate(src.frames()):
                if self._stop.is_set():
                    return
                if self.options.realtime and frame_ms:
                    delay = start_clock + i * frame_ms - self.clock()
                    if delay > 0:
                        self._stop.wait(delay / 1000.0)
                    elif delay < -1000.0:  # held up (back-pressure): go on from now, no burst
                        start_clock -= delay
                yield self._frame(offset_ms + f.pts_ms, f.image)
        finally:
            src.close()

    def _frame(self, pts_ms: float, image: np.ndarray) -> Frame:
        frame = Frame(self.name, self._next_frame_id, pts_ms, self.clock(), image)
        self._next_frame_id += 1
        return frame


def _reason(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or str(exc)


def check_url(url: str) -> None:
    """Refuse what cannot be a stream before anything is started (ValueError)."""
    scheme = urlsplit(url).scheme.lower() if "://" in url else ""
    if is_live_url(url) or scheme == "synthetic":
        return
    if scheme and scheme != "file":
        raise ValueError(f"url: unknown scheme {scheme!r}; use rtsp://, http(s)://, /dev/videoN, "
                         "synthetic:// or a file path")
    path = Path(urlsplit(url).path if scheme == "file" else url)
    if not path.is_file():
        raise ValueError(f"url: no such file {str(path)!r}")

