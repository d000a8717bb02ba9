"""The one decode loop: a PyAV input's packets to timed [H, W, 3] uint8 RGB frames.

Every stream Vigil decodes from a container goes through `DecodeLoop.frames()` on its
decoder thread: a file pass (`vigil run`, a file served by `vigil serve`) and a live
session (RTSP, HTTP, a device). One packet at a time:

    demux -> on_packet (a recording) -> skip setting (NonRefSkip, from `due`)
          -> decode -> time each frame -> keep? -> RGB -> yield (pts_ms, image)

What differs between a file and a camera is data handed in, not a second loop: how a
frame the container gives no time is timed (`frame_ms`), how many broken packets in a
row end the pass (`max_consecutive_errors`: a file's damage does not heal, a camera's
next keyframe does) and when to stop (`stopped`). What comes after the loop is the
caller's: a file checks that it was read whole (streams/source.py), a live stream
stamps wall-clock times and reconnects (streams/live.py).
"""

from __future__ import annotations

import errno
from typing import Callable, Iterator

import av
import numpy as np
from av.video.reformatter import VideoReformatter


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


def reason(exc: Exception) -> str:
    """FFmpeg's words for an error, without PyAV's prefix where it has them."""
    return getattr(exc, "strerror", None) or str(exc)


# A frame larger than this is decoded by a pool of slice threads, a smaller one on the
# decoder thread alone: with one decoder per camera the cameras are the parallelism,
# and a pool that wakes its threads every frame takes its CPU from the engine's. A 4K
# frame on one thread is too slow for a live camera's rate.
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
    on "auto", which starts and joins a pool of scaler threads every frame: most of a
    stream thread's CPU at a camera's rate."""

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
        """The frames known skipped since the last take."""
        taken, self.skipped = self.skipped, 0
        return taken


class DecodeLoop:
    """One pass over `container`'s video `stream`, on the thread that calls `frames()`.

    - `keep(pts_ms)` false: the frame is decoded (the codec needs it) but never
      converted nor yielded. A frame with no time is always kept.
    - `due(pts_ms)`, where set: the same question asked of a packet before it is
      decoded; the non-reference frames not due are not decoded at all (`NonRefSkip`).
    - `frame_ms`: a frame the container gives no time is timed as frame number x
      `frame_ms`; None leaves it untimed (None pts: a camera's wall clock stamps it).
    - `max_consecutive_errors`: undecodable packets in a row tolerated (each counted)
      before `SourceError`; None tolerates any number.
    - `on_counts(decode_errors, frames_not_decoded)`: the increments, as they happen,
      for a status that other threads read.
    - `stopped()` true: the pass ends at the next packet, `ended` left False.

    Counters (the decoding thread's own): `frames_out` came out of the codec, kept or
    not; `frames_not_decoded` were spared; `frames_out + frames_not_decoded` accounts
    for every frame of the input read so far."""

    def __init__(self, container, stream, shown: str, *, keep: Callable[[float], bool] | None = None,
                 due: Callable[[float], bool] | None = None, on_packet: Callable[[av.Packet], None] | None = None,
                 frame_ms: float | None = None, max_consecutive_errors: int | None = None,
                 on_counts: Callable[[int, int], None] | None = None,
                 stopped: Callable[[], bool] | None = None) -> None:
        self.container, self.stream, self.shown = container, stream, shown
        self.keep, self.due, self.on_packet, self.on_counts, self.stopped = keep, due, on_packet, on_counts, stopped
        self.frame_ms = frame_ms
        self.max_consecutive_errors = max_consecutive_errors
        self.frames_out = 0
        self.frames_not_decoded = 0
        self.decode_errors = 0
        self.last_error = ""  # the decoder's latest complaint
        self.last_pts_ms = -1.0
        self.ended = False  # the input ended and the decoder was flushed

    def frames(self) -> Iterator[tuple[float | None, np.ndarray]]:
        to_rgb = RgbConverter()
        skip = None if self.due is None else NonRefSkip(self.stream.codec_context, self.due)
        consecutive = 0
        for packet in self.container.demux(self.stream):
            if self.stopped is not None and self.stopped():
                return
            if self.on_packet is not None:
                self.on_packet(packet)
            if skip is not None:
                skip.before(packet)
            try:
                decoded = packet.decode()
            except av.error.FFmpegError as exc:
                consecutive += 1
                self._broken(str(exc), consecutive)
                continue
            consecutive = 0
            for frame in decoded:
                pts_ms = self._time(frame)
                self.frames_out += 1
                if skip is not None and pts_ms is not None:
                    skip.out(pts_ms)
                    self._count(0, skip.take())
                if pts_ms is None or self.keep is None or self.keep(pts_ms):
                    yield pts_ms, to_rgb(frame)
        if skip is not None:
            skip.finish()
            self._count(0, skip.take())
        self.ended = True

    def _time(self, frame: av.VideoFrame) -> float | None:
        """Stream milliseconds: the container's time, else the frame's number x `frame_ms`."""
        if frame.time is not None:
            pts_ms = float(frame.time * 1000.0)
        elif self.frame_ms is not None:
            pts_ms = self.frames_out * self.frame_ms
        else:
            return None
        self.last_pts_ms = pts_ms
        return pts_ms

    def _broken(self, error: str, consecutive: int) -> None:
        self.last_error = error
        self._count(1, 0)
        if self.max_consecutive_errors is not None and consecutive > self.max_consecutive_errors:
            raise SourceError(f"{self.shown}: corrupt data after frame "
                              f"{self.frames_out + self.frames_not_decoded}: {error}") from None

    def _count(self, decode_errors: int, frames_not_decoded: int) -> None:
        if not (decode_errors or frames_not_decoded):
            return
        self.decode_errors += decode_errors
        self.frames_not_decoded += frames_not_decoded
        if self.on_counts is not None:
            self.on_counts(decode_errors, frames_not_decoded)
