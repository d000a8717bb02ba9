"""Sources: one decoder per stream, feeding a bounded buffer.

A `Video` is one pass over a stream's frames, decoded on the caller's thread by the one
decode loop (streams/decode.py). `open_video(url)` opens a file path (or `file://`) or
`synthetic://PRESET?seed=S&duration=D&fps=F&size=WxH&density=X` (a clip rendered on the
fly by `sample_videos`); `LiveVideo` opens one session of a live source (`rtsp://`,
`http(s)://`, `/dev/videoN`). `open_source(url)` puts a file's `Video` on a decoder
thread of its own behind a bounded buffer (`vigil run`); `vigil serve` decodes every
kind on its stream's thread (streams/live.py), which owns the live schemes: they need
reconnects and a drop-oldest buffer, so `open_video` refuses them with a clear error. A
file opens under FFmpeg's whitelists for files (streams/urls.py): the file protocol,
video containers only.

The buffer applies back-pressure: a file is decoded only as fast as the pipeline
consumes it. Failures travel through the buffer in order, so every frame decoded before
the damage reaches the consumer before `SourceError` is raised.
"""

from __future__ import annotations

import errno
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Protocol
from urllib.parse import parse_qs, urlsplit

import av
import numpy as np

from core.clock import Clock, monotonic_ms
from core.frames import Frame
from streams.buffer import END, FrameBuffer
from streams.decode import DecodeLoop, SourceError, is_transient, reason, video_stream
from streams.options import OFFLINE, StreamOptions
from streams.pacing import Pacer
from streams.urls import ALL_SCHEMES, ffmpeg_options, file_path, redact_url, scheme_of


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


class Video:
    """One pass over a stream: `decode()` yields (pts_ms, [H, W, 3] uint8 RGB) in order
    on the caller's thread and raises SourceError on failure; pts_ms is None only for a
    live frame its container gives no time. Hooks its owner sets before `decode()`:
    - `keep(pts_ms)` false: the frame is decoded (the codec needs it) but never
      converted to RGB nor yielded (a stream's demand, streams/live.py), and counted in
      `frames_skipped`;
    - `due(pts_ms)` says the same without taking the frame: the non-reference frames not
      due are not decoded at all (`NonRefSkip`), and counted in `frames_not_decoded`;
    - `on_packet`: called with each demuxed packet (a recording, streams/recording.py);
      `stream` is the PyAV stream they come from (None: a rendered clip, no packets);
    - `on_counts(decode_errors, frames_not_decoded)`: their increments, as they happen;
    - `stopped()` true: the pass ends quietly at the next packet."""

    stream = None

    def __init__(self, info: SourceInfo) -> None:
        self.info = info
        self.keep: Callable[[float], bool] | None = None
        self.due: Callable[[float], bool] | None = None
        self.on_packet: Callable[[av.Packet], None] | None = None
        self.on_counts: Callable[[int, int], None] | None = None
        self.stopped: Callable[[], bool] | None = None
        self.frames_decoded = 0  # yielded
        self.frames_skipped = 0  # decoded, not yielded (keep)
        self.frames_not_decoded = 0  # not due, and so not decoded (due)
        self.decode_errors = 0

    def decode(self) -> Iterator[tuple[float | None, np.ndarray]]:
        raise NotImplementedError

    def _wanted(self, pts_ms: float) -> bool:
        if self.keep is None or self.keep(pts_ms):
            self.frames_decoded += 1
            return True
        self.frames_skipped += 1
        return False

    def _loop(self, container, frame_ms: float | None, max_consecutive_errors: int | None) -> DecodeLoop:
        """The decode loop over `container`, with this video's hooks."""
        return DecodeLoop(container, self.stream, self.info.url, keep=self._wanted, due=self.due,
                          on_packet=self.on_packet, frame_ms=frame_ms, max_consecutive_errors=max_consecutive_errors,
                          on_counts=self._counted, stopped=self.stopped)

    def _counted(self, decode_errors: int, frames_not_decoded: int) -> None:
        self.decode_errors += decode_errors
        self.frames_not_decoded += frames_not_decoded
        if self.on_counts is not None:
            self.on_counts(decode_errors, frames_not_decoded)

    def close(self) -> None:
        """Idempotent; call it from the thread that decodes."""


class FileVideo(Video):
    """A video file, read whole: a pass that ends short of the frames its container
    promises, or with none, fails naming the file."""

    def __init__(self, path: Path, options: StreamOptions) -> None:
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
        loop = self._loop(self._container, 1000.0 / self.info.fps, self.options.max_consecutive_errors)
        try:
            yield from loop.frames()
            if loop.ended:
                self._check_whole(loop)
        finally:
            self.close()

    def _check_whole(self, loop: DecodeLoop) -> None:
        count = loop.frames_out + loop.frames_not_decoded
        expected = self.info.expected_frames
        if expected and count < expected - 1:
            detail = f"; decoder said: {loop.last_error}" if loop.last_error else ""
            raise SourceError(f"{self.path}: truncated or damaged: decoded {count} of {expected} frames, "
                              f"up to {max(loop.last_pts_ms, 0) / 1000:.1f} s{detail}")
        if count == 0:
            detail = f" ({loop.last_error})" if loop.last_error else ""
            raise SourceError(f"{self.path}: no frame could be decoded{detail}")

    def close(self) -> None:
        if self._container is not None:
            self._container.close()
            self._container = None


class LiveVideo(Video):
    """One session of a live source (`rtsp://`, `http(s)://`, `/dev/videoN`): opened
    within `open_timeout_s`; a read that stalls `read_timeout_s` fails it. Broken
    packets are counted and passed over however many (the camera's next keyframe heals
    them); the input ending or failing ends the session, and reconnecting is the
    caller's (streams/live.py). `shown`: the URL as errors show it (redacted)."""

    def __init__(self, url: str, shown: str, transport: str = "tcp", open_timeout_s: float = 10.0,
                 read_timeout_s: float = 10.0) -> None:
        scheme = scheme_of(url)
        options = ffmpeg_options(url)
        if scheme in ("rtsp", "rtsps"):
            options["rtsp_transport"] = transport
        try:
            self._container = av.open(url, format="v4l2" if scheme == "v4l2" else None, options=options,
                                      timeout=(open_timeout_s, read_timeout_s))
        except av.error.FFmpegError as exc:
            raise SourceError(f"{shown}: cannot open: {reason(exc)}", is_transient(exc)) from None
        try:
            self.stream, fps = video_stream(self._container, shown)
        except BaseException:
            self.close()
            raise
        codec = self.stream.codec_context
        super().__init__(SourceInfo(shown, codec.width or 0, codec.height or 0, fps, None, live=True))

    def decode(self) -> Iterator[tuple[float | None, np.ndarray]]:
        loop = self._loop(self._container, frame_ms=None, max_consecutive_errors=None)
        try:
            yield from loop.frames()
        except av.error.FFmpegError as exc:
            raise SourceError(f"{self.info.url}: read failed: {reason(exc)}") from None
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
        why = reason(exc)
        if getattr(exc, "errno", None) == errno.EINVAL:  # what a whitelist refusal reads as
            why = "not a video container Vigil reads, or not a video at all"
        raise SourceError(f"{path}: not a video FFmpeg can read ({why})") from None


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


def open_video(url: str, options: StreamOptions | None = None) -> Video:
    """A file or synthetic:// clip, opened for one pass. Raises SourceError naming the problem."""
    scheme = scheme_of(url)
    if scheme == "synthetic":
        return SyntheticVideo(url)
    if scheme == "file":
        return FileVideo(file_path(url), options or OFFLINE)
    if scheme not in ALL_SCHEMES:
        raise SourceError(f"{redact_url(url)}: unknown URL scheme {scheme!r}; use a file path or synthetic://")
    raise SourceError(f"{redact_url(url)}: a live source ({scheme}) runs under `vigil serve`; offline runs take "
                      "a video file or synthetic://")


@dataclass(frozen=True)
class _Failure:
    error: SourceError


class ThreadedSource:
    """Runs a `Video`'s decode on a daemon thread; `frames()` reads the bounded buffer
    and builds each `Frame`."""

    def __init__(self, video: Video, stream_id: str, options: StreamOptions, clock: Clock = monotonic_ms) -> None:
        self.video = video
        self.info = video.info
        self.stream_id = stream_id
        self.options = options
        self.clock = clock
        self._closed = threading.Event()
        self._buffer = FrameBuffer(options.buffer_frames, self._closed)
        self._thread: threading.Thread | None = None

    @property
    def frames_decoded(self) -> int:
        return self.video.frames_decoded

    def _run(self) -> None:
        decoded = self.video.decode()
        try:
            for item in decoded:
                if not self._buffer.put_waiting(item):
                    return
            self._buffer.put_waiting(END)
        except SourceError as exc:
            self._buffer.put_waiting(_Failure(exc))
        except Exception as exc:  # a decoder bug must still end the stream cleanly
            self._buffer.put_waiting(_Failure(SourceError(f"{self.info.url}: {type(exc).__name__}: {exc}")))
        finally:
            decoded.close()  # on this thread: the container is closed where it is read
            self.video.close()

    def frames(self) -> Iterator[Frame]:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"decode-{self.stream_id}", daemon=True)
            self._thread.start()
        frame_id = 0
        # paced where the frames are taken, after the buffer: the decoder works ahead, and
        # a consumer that falls behind sees its frames age as a camera's would
        pacer = Pacer(self.clock) if self.options.realtime else None
        try:
            while True:
                item = self._buffer.get()
                if item is END:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                pts_ms, image = item
                # A file has no capture time of its own: it is captured when the
                # pipeline takes it (or when it is due), so buffering ahead does not
                # count as latency.
                capture_ms = self.clock() if pacer is None else pacer.wait(pts_ms)
                yield Frame(self.stream_id, frame_id, pts_ms, capture_ms, image)
                frame_id += 1
        finally:
            self.close()

    def close(self) -> None:
        self._closed.set()
        if self._thread is None:  # never started: nothing else will close it
            self.video.close()


def open_source(url: str, stream_id: str | None = None, options: StreamOptions | None = None,
                clock: Clock = monotonic_ms) -> ThreadedSource:
    """Open a source from a URL or path, decoded on its own thread. Raises SourceError
    naming the problem."""
    options = options or OFFLINE
    return ThreadedSource(open_video(url, options), stream_id or _default_stream_id(url), options, clock)


def _default_stream_id(url: str) -> str:
    if scheme_of(url) == "synthetic":
        return "synthetic"
    return file_path(url).stem or "stream"
