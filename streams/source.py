"""Sources: one decoder per stream, feeding a bounded buffer.

`open_video(url)` opens a file path (or `file://`) or
`synthetic://PRESET?seed=S&duration=D&fps=F&size=WxH&density=X` (a clip rendered on the
fly by `sample_videos`) as a `Video`: one pass over its frames, decoded on the caller's
thread. `open_source(url)` puts a `Video` on a decoder thread of its own behind a bounded
buffer (`vigil run`); `vigil serve` decodes on its stream's thread (streams/live.py),
which also owns the live schemes (`rtsp://`, `http(s)://`, `/dev/videoN`): they need
reconnects and a drop-oldest buffer, so they are refused here with a clear error. A
file opens under FFmpeg's whitelists for files (streams/urls.py): the file protocol,
video containers only.

The buffer applies back-pressure: a file is decoded only as fast as the pipeline
consumes it. Failures travel through the buffer in order, so every frame decoded before
the damage reaches the consumer before `SourceError` is raised.
"""

from __future__ import annotations

import errno
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Protocol
from urllib.parse import parse_qs, urlsplit

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from core.clock import Clock, monotonic_ms
from core.frames import Frame
from streams.urls import ALL_SCHEMES, ffmpeg_options, file_path, redact_url, scheme_of


class SourceError(Exception):
    """A stream cannot be opened or read; the message names the source and the problem.
    `transient`: the machine, not the source, failed (out of file descriptors or
    memory), so opening again later can succeed even for a file."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


TRANSIENT_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN)


def is_transient(exc: BaseException) -> bool:
    return getattr(exc, "errno", None) in TRANSIENT_ERRNOS


@dataclass(frozen=True)
class SourceOptions:
    max_buffer_frames: int = 32
    # consecutive undecodable packets tolerated (and counted) before giving up
    max_consecutive_errors: int = 25
    # deliver each frame when a camera would have captured it (the first one now, the
    # others at their presentation times after it), stamped with that time: a consumer
    # that falls behind sees its frames age as a live stream's would
    realtime: bool = False

    def __post_init__(self) -> None:
        if self.max_buffer_frames < 1:
            raise ValueError(f"max_buffer_frames must be >= 1; was {self.max_buffer_frames}")
        if self.max_consecutive_errors < 0:
            raise ValueError(f"max_consecutive_errors must be >= 0; was {self.max_consecutive_errors}")


@dataclass(frozen=True)
class SourceInfo:
    url: str  # credentials redacted
    width: int
    height: int
    fps: float
    expected_frames: int | None  # from the container, when it says
    live: bool


class Source(Protocol):
    info: SourceInfo

    def frames(self) -> Iterator[Frame]: ...

    def close(self) -> None: ...


# A frame larger than this is decoded by a pool of slice threads, a smaller one on the
# caller's thread alone. A 360p H.264 frame took 0.55 ms of CPU on one thread and 0.68
# ms on the pool, which also woke its threads twice a frame: with one decoder per
# camera the cameras are the parallelism, and the pool's cost came out of the engine's
# CPU. A 4K frame on one thread is too slow for a live camera's rate.
SLICE_THREADS_ABOVE_PIXELS = 1920 * 1080


def video_stream(container, shown: str):
    """The container's first video stream, set up for decoding (slice threads only for
    frames above `SLICE_THREADS_ABOVE_PIXELS` or of unknown size), and its frame rate
    (0.0 when the container does not say). Slice threading, not frame threading: frame
    threads hold frames in flight that are lost when the input breaks off mid-stream."""
    if not container.streams.video:
        raise SourceError(f"{shown}: has no video stream")
    stream = container.streams.video[0]
    stream.thread_type = "SLICE"
    pixels = (stream.codec_context.width or 0) * (stream.codec_context.height or 0)
    if 0 < pixels <= SLICE_THREADS_ABOVE_PIXELS:
        stream.codec_context.thread_count = 1
    rate = stream.average_rate or stream.guessed_rate
    return stream, float(rate) if rate else 0.0


class RgbConverter:
    """Decoded frames to [H, W, 3] uint8 RGB through one scaler context, on the caller's
    thread. `frame.to_ndarray(format="rgb24")` builds a new context per frame with threads
    on "auto", which starts and joins a pool of scaler threads every frame: 1.5 ms a 360p
    frame against 0.12 ms here (most of a stream thread's CPU at 15 frames/s)."""

    def __init__(self) -> None:
        self._reformatter = VideoReformatter()

    def __call__(self, frame: av.VideoFrame) -> np.ndarray:
        # a view of the frame's plane, rows padded where 3 x width is not aligned (854
        # wide: 2592 bytes a row): made contiguous there, since blocks keep these arrays
        return np.ascontiguousarray(self._reformatter.reformat(frame, format="rgb24", threads=1).to_ndarray())


class NonRefSkip:
    """Spares the decoder the frames no consumer will take that no other frame refers
    to (H.264's and HEVC's non-reference frames, FFmpeg's `skip_frame` NONREF): a
    packet whose time `wanted_at` says is not due is decoded with them skipped. Which
    packets those were shows only in the frames that do come out, so the times sent
    with the skip are kept until a frame of that time comes out or the output is
    `SETTLE_MS` past them: those are the frames never decoded (`skipped`). Counting
    them keeps a file's frame count, and so its truncation check and its looped
    times, what it would be with every frame decoded."""

    SETTLE_MS = 2000.0  # past any reordering delay of the codec

    def __init__(self, codec_context, wanted_at: Callable[[float], bool]) -> None:
        self._codec = codec_context
        self._wanted_at = wanted_at
        self._sent: set[float] = set()  # pts_ms of packets sent with the skip, not out yet
        self._skipping = False
        self.skipped = 0

    def before(self, packet: av.Packet) -> None:
        """Sets the skip for this packet: on when its time is known and not due."""
        skip = False
        if packet.pts is not None and packet.time_base is not None:
            pts_ms = float(packet.pts * packet.time_base * 1000.0)
            skip = not self._wanted_at(pts_ms)
            if skip:
                self._sent.add(pts_ms)
        if skip != self._skipping:
            self._codec.skip_frame = "NONREF" if skip else "DEFAULT"
            self._skipping = skip

    def out(self, pts_ms: float) -> None:
        """A frame came out: its packet was decoded. Times sent well before it are settled."""
        self._sent.discard(pts_ms)
        if self._sent and min(self._sent) < pts_ms - self.SETTLE_MS:
            settled = {t for t in self._sent if t < pts_ms - self.SETTLE_MS}
            self.skipped += len(settled)
            self._sent -= settled

    def finish(self) -> None:
        """The input ended and the decoder is flushed: what never came out was skipped."""
        self.skipped += len(self._sent)
        self._sent.clear()

    def take(self) -> int:
        """The frames known skipped since the last take (a live stream's running count)."""
        taken, self.skipped = self.skipped, 0
        return taken


class Video:
    """One pass over a file or a rendered clip: `decode()` yields (pts_ms, [H, W, 3]
    uint8 RGB) in order on the caller's thread and raises SourceError on failure.
    `keep(pts_ms)` false: the frame is decoded (the codec needs it) but never converted
    to RGB nor yielded (a stream's demand, streams/live.py), and counted as skipped.
    `due(pts_ms)`, where set, says the same without taking the frame: a file decodes
    without the non-reference frames that are not due (`NonRefSkip`), and counts them
    in `frames_not_decoded`.
    `on_packet`: called with each demuxed packet of a file (its recording,
    streams/recording.py); `stream` is the PyAV stream they come from (None: the video
    has no packets, a rendered clip)."""

    stream = None

    def __init__(self, info: SourceInfo) -> None:
        self.info = info
        self.keep: Callable[[float], bool] | None = None
        self.due: Callable[[float], bool] | None = None
        self.on_packet: Callable[[av.Packet], None] | None = None
        self.frames_decoded = 0  # yielded
        self.frames_skipped = 0  # decoded, not yielded (keep)
        self.frames_not_decoded = 0  # not due, and so not decoded (due)
        self.decode_errors = 0

    def decode(self) -> Iterator[tuple[float, np.ndarray]]:
        raise NotImplementedError

    def _wanted(self, pts_ms: float) -> bool:
        if self.keep is None or self.keep(pts_ms):
            self.frames_decoded += 1
            return True
        self.frames_skipped += 1
        return False

    def close(self) -> None:
        """Idempotent; call it from the thread that decodes."""


class FileVideo(Video):
    def __init__(self, path: Path, options: SourceOptions) -> None:
        self.path = path
        self.options = options
        if not path.exists():
            raise SourceError(f"{path}: no such file")
        if path.is_dir():
            raise SourceError(f"{path}: is a directory, not a video file")
        self._container = _open_container(path)
        try:
            self.stream, fps = video_stream(self._container, str(path))
            width, height = self.stream.codec_context.width, self.stream.codec_context.height
            if width <= 0 or fps <= 0:
                raise SourceError(f"{path}: video stream has no usable size or frame rate")
        except BaseException:
            self.close()
            raise
        super().__init__(SourceInfo(str(path), width, height, fps, self.stream.frames or None, live=False))

    def decode(self) -> Iterator[tuple[float, np.ndarray]]:
        consecutive, last_error, count = 0, "", 0
        last_pts_ms = -1.0
        to_rgb = RgbConverter()
        skip = None if self.due is None else NonRefSkip(self.stream.codec_context, self.due)
        try:
            for packet in self._container.demux(self.stream):
                if self.on_packet is not None:
                    self.on_packet(packet)
                if skip is not None:
                    skip.before(packet)
                try:
                    decoded = packet.decode()
                except av.error.FFmpegError as exc:
                    self.decode_errors += 1
                    consecutive += 1
                    last_error = str(exc)
                    if consecutive > self.options.max_consecutive_errors:
                        raise SourceError(f"{self.path}: corrupt data after frame "
                                          f"{count + (skip.skipped if skip else 0)}: {last_error}") from None
                    continue
                consecutive = 0
                for frame in decoded:
                    pts_ms = float(frame.time * 1000.0) if frame.time is not None else count * 1000.0 / self.info.fps
                    last_pts_ms = pts_ms
                    count += 1
                    if skip is not None:
                        skip.out(pts_ms)
                    if self._wanted(pts_ms):
                        yield pts_ms, to_rgb(frame)
            if skip is not None:
                skip.finish()
                count += skip.skipped
                self.frames_not_decoded += skip.skipped
            expected = self.info.expected_frames
            if expected and count < expected - 1:
                detail = f"; decoder said: {last_error}" if last_error else ""
                raise SourceError(f"{self.path}: truncated or damaged: decoded {count} of {expected} frames, "
                                  f"up to {max(last_pts_ms, 0) / 1000:.1f} s{detail}")
            if count == 0:
                detail = f" ({last_error})" if last_error else ""
                raise SourceError(f"{self.path}: no frame could be decoded{detail}")
        finally:
            self.close()

    def close(self) -> None:
        if self._container is not None:
            self._container.close()
            self._container = None


def _open_container(path: Path):
    """Opened with the file whitelists: the file protocol only, video containers only."""
    try:
        return av.open(str(path.resolve()), options=ffmpeg_options(str(path.resolve())))
    except av.error.FileNotFoundError:
        raise SourceError(f"{path}: no such file") from None
    except av.error.PermissionError:
        raise SourceError(f"{path}: permission denied") from None
    except av.error.FFmpegError as exc:
        if is_transient(exc):
            raise SourceError(f"{path}: cannot open now: {exc.strerror}", transient=True) from None
        reason = getattr(exc, "strerror", None) or str(exc)
        if getattr(exc, "errno", None) == errno.EINVAL:  # what a whitelist refusal reads as
            reason = "not a video container Vigil reads, or not a video at all"
        raise SourceError(f"{path}: not a video FFmpeg can read ({reason})") from None


class SyntheticVideo(Video):
    """A clip rendered on the fly: `synthetic://street?seed=3&duration=20`."""

    def __init__(self, url: str) -> None:
        from sample_videos.render import RenderConfig  # optional dependency of ingest

        parts = urlsplit(url)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        known = {"seed", "duration", "fps", "size", "density", "noise"}
        unknown = sorted(set(query) - known)
        if unknown:
            raise SourceError(f"{url}: unknown option(s) {unknown}; known: {sorted(known)}")
        try:
            width, height = (int(v) for v in query.get("size", "640x360").lower().split("x"))
            self.config = RenderConfig(seed=int(query.get("seed", 0)), preset=parts.netloc or "street",
                                       duration_s=float(query.get("duration", 20)), width=width, height=height,
                                       fps=float(query.get("fps", 15)), density=float(query.get("density", 1)),
                                       noise=float(query.get("noise", 3)))
        except ValueError as exc:
            raise SourceError(f"{url}: {exc}") from None
        super().__init__(SourceInfo(url, width, height, self.config.fps, self.config.num_frames, live=False))

    def decode(self) -> Iterator[tuple[float, np.ndarray]]:
        from sample_videos.render import Renderer

        for rendered in Renderer(self.config).frames():
            if self._wanted(rendered.t_ms):
                yield rendered.t_ms, rendered.image


def open_video(url: str, options: SourceOptions | None = None) -> Video:
    """A file or synthetic:// clip, opened for one pass. Raises SourceError naming the problem."""
    scheme = scheme_of(url)
    if scheme == "synthetic":
        return SyntheticVideo(url)
    if scheme == "file":
        return FileVideo(file_path(url), options or SourceOptions())
    if scheme not in ALL_SCHEMES:
        raise SourceError(f"{redact_url(url)}: unknown URL scheme {scheme!r}; use a file path or synthetic://")
    raise SourceError(f"{redact_url(url)}: a live source ({scheme}) runs under `vigil serve`; offline runs take "
                      "a video file or synthetic://")


_END = object()


@dataclass(frozen=True)
class _Failure:
    error: SourceError


class ThreadedSource:
    """Runs a `Video`'s decode on a daemon thread; `frames()` reads the bounded buffer
    and builds each `Frame`."""

    def __init__(self, video: Video, stream_id: str, options: SourceOptions, clock: Clock = monotonic_ms) -> None:
        self.video = video
        self.info = video.info
        self.stream_id = stream_id
        self.options = options
        self.clock = clock
        self._buffer: queue.Queue = queue.Queue(maxsize=options.max_buffer_frames)
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def frames_decoded(self) -> int:
        return self.video.frames_decoded

    def _run(self) -> None:
        decoded = self.video.decode()
        try:
            for item in decoded:
                if not self._put(item):
                    return
            self._put(_END)
        except SourceError as exc:
            self._put(_Failure(exc))
        except Exception as exc:  # a decoder bug must still end the stream cleanly
            self._put(_Failure(SourceError(f"{self.info.url}: {type(exc).__name__}: {exc}")))
        finally:
            decoded.close()  # on this thread: the container is closed where it is read
            self.video.close()

    def _put(self, item: object) -> bool:
        while not self._closed.is_set():
            try:
                self._buffer.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def frames(self) -> Iterator[Frame]:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"decode-{self.stream_id}", daemon=True)
            self._thread.start()
        frame_id, origin_ms = 0, None
        try:
            while True:
                item = self._buffer.get()
                if item is _END:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                pts_ms, image = item
                # A file has no capture time of its own: it is captured when the
                # pipeline takes it, so buffering ahead does not count as latency.
                capture_ms = self.clock()
                if self.options.realtime:
                    origin_ms = capture_ms - pts_ms if origin_ms is None else origin_ms
                    due_ms = origin_ms + pts_ms
                    if due_ms > capture_ms:
                        time.sleep((due_ms - capture_ms) / 1000.0)
                    capture_ms = due_ms
                yield Frame(self.stream_id, frame_id, pts_ms, capture_ms, image)
                frame_id += 1
        finally:
            self.close()

    def close(self) -> None:
        self._closed.set()
        if self._thread is None:  # never started: nothing else will close it
            self.video.close()


def open_source(url: str, stream_id: str | None = None, options: SourceOptions | None = None,
                clock: Clock = monotonic_ms) -> ThreadedSource:
    """Open a source from a URL or path, decoded on its own thread. Raises SourceError
    naming the problem."""
    options = options or SourceOptions()
    return ThreadedSource(open_video(url, options), stream_id or _default_stream_id(url), options, clock)


def _default_stream_id(url: str) -> str:
    if scheme_of(url) == "synthetic":
        return "synthetic"
    return file_path(url).stem or "stream"
