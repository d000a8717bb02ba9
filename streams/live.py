"""Managed streams for the server: sources that reconnect, report status and never stop
the process.

A `ManagedStream` owns one decoder thread and one bounded buffer; the thread builds each
`Frame` once and the stream's worker takes them from the buffer. For a live source
(`rtsp://`, `http(s)://`, `/dev/videoN`) the thread loops forever: open (with a
timeout) -> decode into a drop-oldest buffer -> on any failure or end of stream, wait an exponential backoff
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
from typing import Callable, Iterator, Literal

import av
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from core.clock import monotonic_ms
from core.frames import Frame
from core.numbers import json_int
from streams.blocks import FrameSampler
from streams.recording import StreamRecorder
from streams.source import NonRefSkip, RgbConverter, SourceError, is_transient, open_video, video_stream
from streams.urls import ffmpeg_options, is_live_url, redact_url, scheme_of, scrub

log = logging.getLogger("vigil.streams")

Status = Literal["connecting", "live", "reconnecting", "ended", "failed"]


class StreamOptions(BaseModel):
    """How a stream is read. Every number is finite and bounded: a NaN backoff would
    reconnect in a busy loop, an infinite timeout would never give up."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    transport: Literal["tcp", "udp"] = Field("tcp", description="RTSP transport")
    open_timeout_s: float = Field(10.0, gt=0, le=300)
    read_timeout_s: float = Field(10.0, gt=0, le=300)
    backoff_initial_s: float = Field(0.5, ge=0.05, le=3600)
    backoff_max_s: float = Field(10.0, ge=0.05, le=3600, description="the cap; each failure doubles the wait "
                                                                     "up to here (below backoff_initial_s: "
                                                                     "every wait is the cap)")
    max_reconnects: json_int(ge=0, le=1_000_000) | None = Field(None, description="null: forever")
    buffer_frames: json_int(ge=1, le=256) = 32
    realtime: bool = Field(True, description="files: deliver at the clip's frame rate (false: as fast as "
                                             "the apps consume, every sampled frame analysed from when the "
                                             "first app is attached)")
    loop: bool = Field(False, description="files: start again at the end")


@dataclass
class StreamStats:
    status: Status = "connecting"
    last_error: str | None = None
    frames_decoded: int = 0
    frames_dropped: int = 0  # dropped from a full live buffer (oldest first)
    frames_skipped: int = 0  # decoded but not delivered: no app samples them (its demand)
    frames_not_decoded: int = 0  # nor decoded: non-reference frames no app samples (NonRefSkip)
    decode_errors: int = 0
    reconnects: int = 0
    gaps: int = 0
    last_gap_ms: float | None = None  # wall-clock length of the latest gap in frames
    width: int | None = None
    height: int | None = None
    fps: float | None = None


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
                 seed: int | None = None, start_ms: float = 0.0, shown_url: str | None = None,
                 recorder: StreamRecorder | None = None) -> None:
        """`url` as `streams.urls.check_url` returned it; `shown_url`, the URL as the
        user gave it, is what status and errors show (redacted). `start_ms`: a file's
        stream time starts here (a restarted stream goes on after its earlier runs).
        `recorder`: every demuxed packet is also written to the stream's recording."""
        self.name = name
        self.url = url
        self.redacted = redact_url(shown_url or url)
        self.options = options or StreamOptions()
        self.live = is_live_url(url)
        # a file delivered as fast as it is consumed has no real time to keep: its frames
        # are analysed however late, so its results do not depend on the machine's speed
        self.paced = self.live or self.options.realtime
        self.clock = clock
        self.wall_ms = wall_ms
        self.stats = StreamStats()
        self._rng = random.Random(seed)
        self._buffer: queue.Queue = queue.Queue(maxsize=self.options.buffer_frames)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"stream-{name}", daemon=True)
        self._next_frame_id = 0
        self._ended = False  # `take` has met the end of the file
        self._pass_start_ms = start_ms  # a file's stream time at the start of its next pass
        self._demand_fps: float | None = None  # the most frames per second any consumer samples
        # the decoder thread's own: this session's filter, and the rate it was last set to
        self._demand: FrameSampler | None = None
        self._demand_applied: float | None = None
        self.recorder = recorder

    def set_demand(self, fps: float | None) -> None:
        """The highest rate the stream's apps sample (None: every frame). Frames beyond
        it are decoded, as the codec needs, but not converted to RGB nor delivered: a
        frame no app will analyse costs no more than its decode. Any thread may call
        this; the decoder thread, which alone owns the filter, applies it at its next
        frame."""
        self._demand_fps = fps

    def _sampler(self) -> FrameSampler | None:
        """On the decoder thread: this session's filter, at the latest demand."""
        fps = self._demand_fps
        if fps != self._demand_applied:
            if fps is None or self._demand is None:
                self._demand = None if fps is None else FrameSampler(fps)
            else:
                self._demand.set_fps(fps)
            self._demand_applied = fps
        return self._demand

    def _wanted(self, pts_ms: float) -> bool:
        sampler = self._sampler()
        if sampler is None:
            return True
        wanted = sampler.wants(pts_ms)
        if not wanted:
            with self._lock:
                self.stats.frames_skipped += 1
        return wanted

    def _due(self, pts_ms: float) -> bool:
        sampler = self._sampler()
        return sampler is None or sampler.due(pts_ms)

    @property
    def native_id(self) -> int | None:
        """The OS id of the thread that reads and decodes (None before it starts)."""
        return self._thread.native_id

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

    def take(self, most: int, wait_s: float) -> tuple[list[Frame], bool]:
        """Up to `most` frames in order, waiting at most `wait_s` for the first, and
        whether the stream has ended (a file's last frame taken, or stopped): for a
        consumer in another process (cluster/ingest.py), which takes them in batches."""
        frames: list[Frame] = []
        ended = self._ended or self._stop.is_set()
        while not ended and len(frames) < most:
            try:
                item = self._buffer.get(timeout=wait_s) if not frames else self._buffer.get_nowait()
            except queue.Empty:
                break
            if item is _END:
                self._ended = ended = True
            else:
                frames.append(item)
        return frames, ended

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
                error = scrub(str(exc), self.url, self.redacted)
                if not self.live and not exc.transient:  # a damaged file does not heal by retrying
                    self._set(status="failed", last_error=error)
                    log.warning("stream %s failed: %s", self.name, error)
                    self._finish()
                    return
            except Exception as exc:  # a decoder bug must not take the server down
                error = scrub(f"{type(exc).__name__}: {exc}", self.url, self.redacted)
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
        scheme = scheme_of(self.url)
        options = ffmpeg_options(self.url)
        if scheme in ("rtsp", "rtsps"):
            options["rtsp_transport"] = self.options.transport
        try:
            container = av.open(self.url, format="v4l2" if scheme == "v4l2" else None, options=options,
                                timeout=(self.options.open_timeout_s, self.options.read_timeout_s))
        except av.error.FFmpegError as exc:
            raise SourceError(f"{self.redacted}: cannot open: {_reason(exc)}", is_transient(exc)) from None
        try:
            stream, fps = video_stream(container, self.redacted)
            to_rgb = RgbConverter()
            skip = NonRefSkip(stream.codec_context, self._due)
            self._set(width=stream.codec_context.width or None, fps=fps or None)
            if self.recorder is not None:
                self.recorder.begin(stream, offset_ms=None)  # a camera's times are the wall clock's
            try:
                for packet in container.demux(stream):
                    if self._stop.is_set():
                        return
                    if self.recorder is not None:
                        self.recorder.write(packet)
                    skip.before(packet)
                    try:
                        decoded = packet.decode()
                    except av.error.FFmpegError:
                        with self._lock:
                            self.stats.decode_errors += 1
                        continue
                    for f in decoded:
                        if f.time is not None:
                            skip.out(float(f.time) * 1000.0)
                        if skip.skipped:
                            with self._lock:
                                self.stats.frames_not_decoded += skip.take()
                        if f.time is not None and not self._wanted(float(f.time) * 1000.0):
                            continue
                        image = to_rgb(f)
                        if self.stats.height != image.shape[0] or self.stats.width != image.shape[1]:
                            self._set(width=image.shape[1], height=image.shape[0])
                        yield self._frame(self.wall_ms(), image)
            except av.error.FFmpegError as exc:
                raise SourceError(f"{self.redacted}: read failed: {_reason(exc)}") from None
        finally:
            if self.recorder is not None:
                self.recorder.end()
            container.close()

    def _file_session(self) -> Iterator[Frame]:
        """One pass over a file, decoded on this thread straight into the stream's buffer
        (no second thread nor queue between them), paced at the clip's frame rate when
        `realtime`."""
        video = open_video(self.url)
        # a new pass over the file starts its times again: its first frame makes a new
        # filter at the demand then (_sampler)
        self._demand, self._demand_applied = None, None
        video.keep, video.due = self._wanted, self._due
        info = video.info
        self._set(width=info.width, height=info.height, fps=info.fps)
        frame_ms = 1000.0 / info.fps if info.fps > 0 else 0.0
        start_clock = self.clock()
        offset_ms = self._pass_start_ms  # a looped file's time keeps rising
        if self.recorder is not None and video.stream is not None:
            self.recorder.begin(video.stream, offset_ms)
            video.on_packet = self.recorder.write
        first_pts = None
        decoded = video.decode()
        try:
            for pts_ms, image in decoded:
                if self._stop.is_set():
                    return
                first_pts = pts_ms if first_pts is None else first_pts
                if self.options.realtime and frame_ms:
                    delay = start_clock + (pts_ms - first_pts) - self.clock()
                    if delay > 0:
                        self._stop.wait(delay / 1000.0)
                    elif delay < -1000.0:  # held up (back-pressure): go on from now, no burst
                        start_clock -= delay
                yield self._frame(offset_ms + pts_ms, image)
        finally:
            self._pass_start_ms = offset_ms + (video.frames_decoded + video.frames_skipped
                                               + video.frames_not_decoded) * frame_ms
            decoded.close()
            video.close()
            if self.recorder is not None:
                self.recorder.end()
            with self._lock:
                self.stats.decode_errors += video.decode_errors
                self.stats.frames_not_decoded += video.frames_not_decoded

    def _frame(self, pts_ms: float, image: np.ndarray) -> Frame:
        frame = Frame(self.name, self._next_frame_id, pts_ms, self.clock(), image)
        self._next_frame_id += 1
        return frame


def _reason(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or str(exc)

