"""Sources: one decoder per stream, on its own thread, feeding a bounded buffer.

`open_source(url)` picks the source from the URL: a file path (or `file://`), or
`synthetic://PRESET?seed=S&duration=D&fps=F&size=WxH&density=X` (a clip rendered on the
fly by `sample_videos`). Live schemes (`rtsp://`, `http(s)://`, `/dev/videoN`) are
`vigil serve`'s (streams/live.py) and refused here with a clear error. A file opens
under FFmpeg's whitelists for files (streams/urls.py): the file protocol, video
containers only.

The buffer applies back-pressure: a file is decoded only as fast as the pipeline
consumes it. Failures travel through the buffer in order, so every frame decoded before
the damage reaches the consumer before `SourceError` is raised.
"""

from __future__ import annotations

import errno
import queue
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Protocol
from urllib.parse import parse_qs, urlsplit

import av
import numpy as np

from streams.clock import Clock, monotonic_ms
from streams.frames import Frame
from streams.urls import ALL_SCHEMES, ffmpeg_options, redact_url, scheme_of


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


_END = object()


@dataclass(frozen=True)
class _Failure:
    error: SourceError


class ThreadedSource:
    """Runs `_decode()` on a daemon thread; `frames()` reads the bounded buffer."""

    def __init__(self, stream_id: str, info: SourceInfo, options: SourceOptions,
                 clock: Clock = monotonic_ms) -> None:
        self.stream_id = stream_id
        self.info = info
        self.options = options
        self.clock = clock
        self.frames_decoded = 0
        self.decode_errors = 0
        self._buffer: queue.Queue = queue.Queue(maxsize=options.max_buffer_frames)
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        # pts_ms -> whether the frame is wanted: one that is not is decoded (the codec
        # needs it) but never converted to RGB nor delivered (a stream's demand, below)
        self.keep: Callable[[float], bool] | None = None
        self.frames_skipped = 0

    def _decode(self) -> Iterator[tuple[float, np.ndarray]]:
        """Yields (pts_ms, [H, W, 3] uint8 RGB); raises SourceError on failure."""
        raise NotImplementedError

    def _run(self) -> None:
        try:
            for item in self._decode():
                self.frames_decoded += 1
                if not self._put(item):
                    return
            self._put(_END)
        except SourceError as exc:
            self._put(_Failure(exc))
        except Exception as exc:  # a decoder bug must still end the stream cleanly
            self._put(_Failure(SourceError(f"{self.info.url}: {type(exc).__name__}: {exc}")))

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
        frame_id = 0
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
                yield Frame(self.stream_id, frame_id, pts_ms, self.clock(), image)
                frame_id += 1
        finally:
            self.close()

    def close(self) -> None:
        self._closed.set()


class FileSource(ThreadedSource):
    def __init__(self, path: Path, stream_id: str, options: SourceOptions, clock: Clock = monotonic_ms) -> None:
        self.path = path
        if not path.exists():
            raise SourceError(f"{path}: no such file")
        if path.is_dir():
            raise SourceError(f"{path}: is a directory, not a video file")
        container = _open_container(path)
        try:
            if not container.streams.video:
                raise SourceError(f"{path}: has no video stream")
            stream = container.streams.video[0]
            rate = stream.average_rate or stream.guessed_rate
            fps = float(rate) if rate else 0.0
            if stream.codec_context.width <= 0 or fps <= 0:
                raise SourceError(f"{path}: video stream has no usable size or frame rate")
            info = SourceInfo(str(path), stream.codec_context.width, stream.codec_context.height, fps,
                              stream.frames or None, live=False)
        finally:
            container.close()
        super().__init__(stream_id, info, options, clock)

    def _decode(self) -> Iterator[tuple[float, np.ndarray]]:
        container = _open_container(self.path)
        try:
            stream = container.streams.video[0]
            # Slice threading (PyAV's default), not frame threading: frame threads hold
            # frames in flight that are lost when the input breaks off mid-stream.
            stream.thread_type = "SLICE"
            consecutive, last_error, count = 0, "", 0
            last_pts_ms = -1.0
            for packet in container.demux(stream):
                try:
                    decoded = packet.decode()
                except av.error.FFmpegError as exc:
                    self.decode_errors += 1
                    consecutive += 1
                    last_error = str(exc)
                    if consecutive > self.options.max_consecutive_errors:
                        raise SourceError(f"{self.path}: corrupt data after frame {count}: {last_error}") from None
                    continue
                consecutive = 0
                for frame in decoded:
                    pts_ms = float(frame.time * 1000.0) if frame.time is not None else count * 1000.0 / self.info.fps
                    last_pts_ms = pts_ms
                    count += 1
                    if self.keep is not None and not self.keep(pts_ms):
                        self.frames_skipped += 1
                        continue
                    yield pts_ms, frame.to_ndarray(format="rgb24")
            expected = self.info.expected_frames
            if expected and count < expected - 1:
                detail = f"; decoder said: {last_error}" if last_error else ""
                raise SourceError(f"{self.path}: truncated or damaged: decoded {count} of {expected} frames, "
                                  f"up to {max(last_pts_ms, 0) / 1000:.1f} s{detail}")
            if count == 0:
                raise SourceError(f"{self.path}: no frame could be decoded" + (f" ({last_error})" if last_error else ""))
        finally:
            container.close()


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


class SyntheticSource(ThreadedSource):
    """A clip rendered on the fly: `synthetic://street?seed=3&duration=20`."""

    def __init__(self, url: str, stream_id: str, options: SourceOptions, clock: Clock = monotonic_ms) -> None:
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
        info = SourceInfo(url, width, height, self.config.fps, self.config.num_frames, live=False)
        super().__init__(stream_id, info, options, clock)

    def _decode(self) -> Iterator[tuple[float, np.ndarray]]:
        from sample_videos.render import Renderer

        for rendered in Renderer(self.config).frames():
            yield rendered.t_ms, rendered.image


def open_source(url: str, stream_id: str | None = None, options: SourceOptions | None = None,
                clock: Clock = monotonic_ms) -> ThreadedSource:
    """Open a source from a URL or path. Raises SourceError naming the problem."""
    options = options or SourceOptions()
    scheme = scheme_of(url)
    stream_id = stream_id or _default_stream_id(url)
    if scheme == "synthetic":
        return SyntheticSource(url, stream_id, options, clock)
    if scheme == "file":
        path = Path(urlsplit(url).path) if url.startswith("file://") else Path(url)
        return FileSource(path, stream_id, options, clock)
    if scheme not in ALL_SCHEMES:
        raise SourceError(f"{redact_url(url)}: unknown URL scheme {scheme!r}; use a file path or synthetic://")
    raise SourceError(f"{redact_url(url)}: a live source ({scheme}) runs under `vigil serve`; offline runs take "
                      "a video file or synthetic://")


def _default_stream_id(url: str) -> str:
    if url.startswith("synthetic://"):
        return "synthetic"
    return Path(urlsplit(url).path if "://" in url else url).stem or "stream"
