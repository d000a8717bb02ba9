"""Managed streams for the server: sources that reconnect, report status and never stop
the process.

A `ManagedStream` owns one decoder thread and one bounded buffer; the thread builds each
`Frame` once and the stream's worker takes them from the buffer. Every kind of source
runs the same session on that thread: open a `Video` (streams/source.py) -> the one
decode loop (streams/decode.py) -> pace a file (streams/pacing.py) -> the buffer.

For a live source (`rtsp://`, `http(s)://`, `/dev/videoN`) the thread loops forever:
open (with a timeout) -> decode into a drop-oldest buffer -> on any failure or end of
stream, wait an exponential backoff with jitter and open again. Frames of a live source
carry wall-clock capture times (`pts_ms` is epoch milliseconds), so events are stamped
in real time; a gap between the last frame before a failure and the first after it is
counted and reported.

A file (or `synthetic://`) is paced at its own frame rate by default, the way the camera
it stands in for would deliver it (`realtime: false` decodes as fast as the pipeline
consumes, with back-pressure), may loop, and ends with status `ended`; a file that
cannot be decoded ends `failed` with the decoder's message, because retrying cannot
heal it.

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

import numpy as np

from core.clock import monotonic_ms
from core.frames import Frame
from streams.blocks import FrameSampler
from streams.buffer import END, FrameBuffer
from streams.decode import SourceError
from streams.options import StreamOptions
from streams.pacing import SERVED_MAX_LATE_MS, Pacer, is_paced
from streams.recording import StreamRecorder
from streams.source import LiveVideo, Video, open_video
from streams.urls import is_live_url, redact_url, scrub

log = logging.getLogger("vigil.streams")

Status = Literal["connecting", "live", "reconnecting", "ended", "failed"]


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
        self.paced = is_paced(self.live, self.options.realtime)
        self.clock = clock
        self.wall_ms = wall_ms
        self.stats = StreamStats()
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        self._buffer = FrameBuffer(self.options.buffer_frames, self._stop, poll_s=0.2)
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
                item = self._buffer.get(poll_s)
            except queue.Empty:
                yield None
                continue
            if item is END:
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
                item = self._buffer.get(wait_s) if not frames else self._buffer.get_nowait()
            except queue.Empty:
                break
            if item is END:
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
                    self._buffer.put_waiting(END)
                    return
                error = "end of stream"
            except SourceError as exc:
                error = scrub(str(exc), self.url, self.redacted)
                if not self.live and not exc.transient:  # a damaged file does not heal by retrying
                    self._set(status="failed", last_error=error)
                    log.warning("stream %s failed: %s", self.name, error)
                    self._buffer.put_waiting(END)
                    return
            except Exception as exc:  # a decoder bug must not take the server down
                error = scrub(f"{type(exc).__name__}: {exc}", self.url, self.redacted)
            failed = True
            if self._stop.is_set():
                return
            if self.options.max_reconnects is not None and self.stats.reconnects >= self.options.max_reconnects:
                self._set(status="failed", last_error=error)
                self._buffer.put_waiting(END)
                return
            wait_s = backoff_s(attempt, self.options, self._rng)
            attempt += 1
            with self._lock:
                self.stats.reconnects += 1
                self.stats.status = "reconnecting"
                self.stats.last_error = error
            log.warning("stream %s (%s): %s; reconnecting in %.1f s", self.name, self.redacted, error, wait_s)
            self._stop.wait(wait_s)

    def _deliver(self, frame: Frame) -> None:
        with self._lock:
            self.stats.frames_decoded += 1
        if not self.live:
            self._buffer.put_waiting(frame)  # back-pressure: a file waits for the pipeline
            return
        dropped = self._buffer.put_dropping(frame)  # drop-oldest: a live camera never waits for us
        if dropped:
            with self._lock:
                self.stats.frames_dropped += dropped

    def _open(self) -> Video:
        if self.live:
            o = self.options
            return LiveVideo(self.url, self.redacted, o.transport, o.open_timeout_s, o.read_timeout_s)
        return open_video(self.url, self.options)

    def _session(self) -> Iterator[Frame]:
        """One connection, or one pass over a file: its frames, decoded on this thread
        straight into the stream's buffer (no second thread nor queue between them),
        until it ends, fails or the stream is stopped. A file is paced at the clip's
        frame rate when `realtime`; a camera paces itself."""
        video = self._open()
        # a session's times start again (a file's pass at 0, a camera or HTTP source opened
        # again at its own): its first frame makes a new filter
        self._demand, self._demand_applied = None, None
        video.keep, video.due, video.on_counts, video.stopped = self._wanted, self._due, self._count, self._stop.is_set
        info = video.info
        self._set(width=info.width or None, height=info.height or None, fps=info.fps or None)
        offset_ms = None if self.live else self._pass_start_ms  # a looped file's time keeps rising
        if self.recorder is not None and video.stream is not None:
            self.recorder.begin(video.stream, offset_ms)  # a camera's times are the wall clock's: None
            video.on_packet = self.recorder.write
        pacer = None  # a camera paces itself
        if self.options.realtime and not self.live:
            pacer = Pacer(self.clock, self._stop.wait, SERVED_MAX_LATE_MS)
        decoded = video.decode()
        try:
            for pts_ms, image in decoded:
                if self._stop.is_set():
                    return
                if pacer is not None:
                    pacer.wait(pts_ms)
                if self.stats.height != image.shape[0] or self.stats.width != image.shape[1]:
                    self._set(width=image.shape[1], height=image.shape[0])
                yield self._frame(self.wall_ms() if offset_ms is None else offset_ms + pts_ms, image)
        finally:
            decoded.close()
            video.close()
            if self.recorder is not None:
                self.recorder.end()
            if offset_ms is not None and info.fps > 0:
                seen = video.frames_decoded + video.frames_skipped + video.frames_not_decoded
                self._pass_start_ms = offset_ms + seen * 1000.0 / info.fps

    def _count(self, decode_errors: int, frames_not_decoded: int) -> None:
        """The decode loop's counts, published as they happen."""
        with self._lock:
            self.stats.decode_errors += decode_errors
            self.stats.frames_not_decoded += frames_not_decoded

    def _frame(self, pts_ms: float, image: np.ndarray) -> Frame:
        frame = Frame(self.name, self._next_frame_id, pts_ms, self.clock(), image)
        self._next_frame_id += 1
        return frame


