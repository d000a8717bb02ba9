"""Recordings: a stream's packets remuxed into MP4 segments on disk, never re-encoded,
and clips cut from them (or from any video file) by stream time.

Times are the stream's own, a frame's `pts_ms`: wall-clock ms for a live camera, the
file's time plus its earlier passes for a file. So an event's `t_ms` finds its
footage. A segment's packets are shifted so that its first keyframe's dts is 0 and
no edit list is written: a packet at file time `p` was at stream time `start_ms + p`.

On disk, per stream: `<start_ms>.part.mp4` while it is written (fragmented, a
fragment a second, so it can be read as it grows), renamed `<start_ms>_<end_ms>.mp4`
(ms, to the microsecond) when closed. A segment closes at the first keyframe past
`segment_s`, and at the end of each session (a reconnect, a file's next pass: its
times start again).
"""

from __future__ import annotations

import io
import logging
import math
import os
import re
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Callable, Iterable

import av

log = logging.getLogger("vigil.recording")

SEGMENT = re.compile(r"^(-?\d+(?:\.\d+)?)(?:_(-?\d+(?:\.\d+)?)|\.part)\.mp4$")
FRAGMENTED = {"movflags": "frag_keyframe+empty_moov+default_base_moof", "frag_duration": "1000000",
              "flush_packets": "1", "use_editlist": "0"}  # readable within a second of the packet


class ClipError(Exception):
    """No footage for the asked window, or it cannot be read; the message says which."""


@dataclass(frozen=True)
class Segment:
    path: Path
    start_ms: float
    end_ms: float | None  # None: still being written
    size: int

    def overlaps(self, start_ms: float, end_ms: float) -> bool:
        return self.start_ms <= end_ms and (self.end_ms is None or self.end_ms >= start_ms)


def list_segments(folder: Path) -> list[Segment]:
    """A stream's segments, oldest first (missing folder: none)."""
    out = []
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return []
    for entry in entries:
        m = SEGMENT.match(entry.name)
        if m is None:
            continue
        try:
            size = entry.stat().st_size
        except FileNotFoundError:  # pruned or renamed meanwhile
            continue
        out.append(Segment(Path(entry.path), float(m.group(1)), float(m.group(2)) if m.group(2) else None, size))
    return sorted(out, key=lambda s: s.start_ms)


class StreamRecorder:
    """Writes one stream's packets into segments. Called from the stream's decoder
    thread: `begin()` at each session, `write()` for each demuxed packet, `end()` when
    the session ends. A write that fails (disk full) is logged once, drops that segment
    and tries again at a later keyframe: recording never stops the stream."""

    def __init__(self, folder: Path, segment_s: float = 10.0, on_closed: Callable[[], None] = lambda: None,
                 wall_ms: Callable[[], float] = lambda: time.time() * 1000.0) -> None:
        self.folder = folder
        self.segment_ms = segment_s * 1000.0
        self.on_closed = on_closed
        self.wall_ms = wall_ms
        self.segments_written = 0
        self.errors = 0
        self._template = None
        self._offset_ms: float | None = None
        self._out = None
        self._failed_logged = False
        self._retry_after_ms = -math.inf

    def begin(self, stream, offset_ms: float | None) -> None:
        """A new session on `stream` (a PyAV input video stream). `offset_ms`: stream time
        at the stream's pts 0 (a file pass's start); None for a live camera, whose
        packets are placed by the wall clock."""
        self.end()
        self._template = stream
        self._offset_ms = offset_ms

    def write(self, packet: av.Packet) -> None:
        if self._template is None or packet.pts is None or packet.size == 0:
            return
        tb = packet.time_base
        dts = packet.dts if packet.dts is not None else packet.pts
        media_ms = float(dts * tb) * 1000.0
        # a camera's packets come in bursts (its first seconds at once, then at its
        # rate): the stream time of media time 0 is the least wall - pts seen, per segment
        offset = self._offset_ms if self._offset_ms is not None else self.wall_ms() - float(packet.pts * tb) * 1000.0
        try:
            due = self._out is None or media_ms - self._out.media_start_ms > self.segment_ms - 0.5
            if packet.is_keyframe and due and media_ms >= self._retry_after_ms:
                self._close()
                self._out = _OpenSegment(self.folder, self._template, dts, media_ms, offset)
            if self._out is not None:
                self._out.mux(packet, dts, media_ms, offset)
        except (OSError, av.error.FFmpegError) as exc:
            self.errors += 1
            if not self._failed_logged:
                log.warning("recording to %s failed (%s); retrying at later keyframes", self.folder, exc)
                self._failed_logged = True
            self._discard()
            self._retry_after_ms = media_ms + 1000.0

    def end(self) -> None:
        try:
            self._close()
        except (OSError, av.error.FFmpegError) as exc:
            log.warning("recording to %s: the last segment could not be closed (%s)", self.folder, exc)
            self._discard()
        self._template = None

    def _close(self) -> None:
        out, self._out = self._out, None
        if out is None:
            return
        try:
            kept = out.close()
        except (OSError, av.error.FFmpegError):
            out.discard()
            raise
        if kept:
            self.segments_written += 1
            self._failed_logged = False
            self.on_closed()

    def _discard(self) -> None:
        out, self._out = self._out, None
        if out is not None:
            out.discard()


class _OpenSegment:
    def __init__(self, folder: Path, template, first_dts: int, media_start_ms: float, offset_ms: float) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        # an MP4's first dts reads back as 0 whatever was written: file time 0 is the
        # first keyframe's dts, to the microsecond the name keeps
        self.first_dts = first_dts
        self.media_start_ms = self.media_end_ms = media_start_ms
        self.offset_ms = offset_ms
        self.path = folder / f"{_ms(offset_ms + media_start_ms)}.part.mp4"
        self.container = av.open(str(self.path), "w", format="mp4", options=FRAGMENTED)
        self.stream = self.container.add_stream_from_template(template)
        self.stream.time_base = template.time_base
        self.packets = 0

    def mux(self, packet: av.Packet, dts: int, media_ms: float, offset_ms: float) -> None:
        self.container.mux(_copy(packet, self.stream, packet.time_base, packet.pts - self.first_dts,
                                 dts - self.first_dts))
        self.packets += 1
        self.offset_ms = min(self.offset_ms, offset_ms)
        frame_ms = float(packet.duration * packet.time_base) * 1000.0 if packet.duration else 0.0
        self.media_end_ms = max(self.media_end_ms, media_ms + frame_ms)

    def close(self) -> bool:
        """True when a segment with packets was kept."""
        self.container.close()
        if self.packets == 0:
            self.path.unlink(missing_ok=True)
            return False
        start, end = self.offset_ms + self.media_start_ms, self.offset_ms + self.media_end_ms
        self.path.rename(self.folder / f"{_ms(start)}_{_ms(end)}.mp4")
        return True

    def discard(self) -> None:
        try:
            self.container.close()
        except (OSError, av.error.FFmpegError):
            pass
        self.path.unlink(missing_ok=True)


class RecordingStore:
    """All streams' recordings under one folder, `<folder>/<stream>/`, with retention:
    closed segments older than `retain_days` go, then the oldest while the folder holds
    more than `max_gb`; checked each time a segment closes."""

    def __init__(self, folder: Path, segment_s: float = 10.0, retain_days: float = 3.0, max_gb: float = 10.0,
                 wall_s: Callable[[], float] = time.time, sweep: bool = True) -> None:
        """`sweep`: delete the segments a crash left open, of every stream (false: a process
        that records some of the streams, cluster/ingest.py, sweeps its own)."""
        self.folder = folder
        self.segment_s = segment_s
        self.retain_days, self.max_gb = retain_days, max_gb
        self.retain_s = retain_days * 86400.0
        self.max_bytes = max_gb * 1024 ** 3
        self.wall_s = wall_s
        self._lock = threading.Lock()
        folder.mkdir(parents=True, exist_ok=True)
        if sweep:
            self.sweep("*")
        self.prune()

    def sweep(self, stream: str) -> None:
        """Delete the stream's segments a crash left open (they have no index to read);
        "*": every stream's."""
        for part in self.folder.glob(f"{stream}/*.part.mp4"):
            part.unlink(missing_ok=True)

    def config(self) -> dict:
        """What another process needs to record into the same store (cluster/ingest.py)."""
        return {"folder": str(self.folder.resolve()), "segment_s": self.segment_s, "retain_days": self.retain_days,
                "max_gb": self.max_gb}

    @classmethod
    def from_config(cls, config: dict) -> "RecordingStore":
        """The store `config()` describes, in another process that records some of its
        streams: it sweeps only the ones it records (`sweep`)."""
        return cls(Path(config["folder"]), config["segment_s"], config["retain_days"], config["max_gb"], sweep=False)

    def recorder(self, stream: str) -> StreamRecorder:
        return StreamRecorder(self.folder / stream, self.segment_s, self.prune)

    def segments(self, stream: str) -> list[Segment]:
        return list_segments(self.folder / stream)

    def prune(self) -> None:
        with self._lock:
            closed = [s for d in self.folder.iterdir() if d.is_dir() for s in list_segments(d) if s.end_ms is not None]
            now = self.wall_s()
            aged = []
            for s in closed:
                try:
                    aged.append((s.path.stat().st_mtime, s))
                except FileNotFoundError:
                    continue
            aged.sort(key=lambda x: x[0])
            total = sum(s.size for _, s in aged)
            for mtime, s in aged:
                if now - mtime <= self.retain_s and total <= self.max_bytes:
                    break
                s.path.unlink(missing_ok=True)
                total -= s.size


def cut_clip(segments: Iterable[Segment], start_ms: float, end_ms: float, max_bytes: int = 512 * 1024 ** 2) -> bytes:
    """An MP4 of the footage from the last keyframe at or before `start_ms` to `end_ms`,
    from `segments` (packets copied, not re-encoded). Stops at a segment whose codec
    parameters differ from the first one's (a camera that came back in another
    resolution). ClipError when there is no footage in the window."""
    buf = io.BytesIO()
    writer: _ClipWriter | None = None
    try:
        for seg in sorted((s for s in segments if s.overlaps(start_ms, end_ms)), key=lambda s: s.start_ms):
            try:
                container = av.open(str(seg.path))
            except (OSError, av.error.FFmpegError):
                continue  # pruned meanwhile, or a part without its first fragment yet
            with container:
                if not container.streams.video:
                    continue
                stream = container.streams.video[0]
                if writer is None:
                    writer = _ClipWriter(buf, stream, start_ms)
                    _seek(container, stream, start_ms - seg.start_ms)
                elif not writer.same_codec(stream):
                    break
                try:
                    for packet in container.demux(stream):
                        if not writer.take(packet, seg.start_ms, end_ms):
                            break
                except av.error.FFmpegError:
                    pass  # a part's last fragment, half written: what came before it stands
            if writer is not None and (writer.done or writer.bytes > max_bytes):
                break
        if writer is None or writer.packets == 0:
            raise ClipError(f"no recorded footage between {start_ms:.0f} and {end_ms:.0f} ms")
        writer.close()
        writer = None
        return buf.getvalue()
    finally:
        if writer is not None:
            writer.abandon()


class _ClipWriter:
    def __init__(self, buf: io.BytesIO, template, start_ms: float) -> None:
        self.start_ms = start_ms
        # time 0 is `start_ms`: the frames from the keyframe before it get negative times,
        # and the edit list the muxer writes has players decode but not show them (as
        # `ffmpeg -ss` with `-c copy` does), so the clip lasts what was asked
        self.container = av.open(buf, "w", format="mp4")
        self.stream = self.container.add_stream_from_template(template)
        self.time_base = template.time_base
        self.ms_per_tick = float(1000 * Fraction(template.time_base))
        self.stream.time_base = template.time_base
        self.codec = _codec_key(template)
        self.pending: list[tuple[av.Packet, float, float]] = []  # since the last keyframe before start_ms
        self.zero_ms: float | None = None
        self.packets = 0
        self.bytes = 0
        self.done = False
        self.last_dts: int | None = None

    def same_codec(self, stream) -> bool:
        return _codec_key(stream) == self.codec

    def take(self, packet: av.Packet, offset_ms: float, end_ms: float) -> bool:
        """False once the window has been passed."""
        if packet.pts is None or packet.size == 0:
            return True
        tb = packet.time_base
        pts_ms = offset_ms + float(packet.pts * tb) * 1000.0
        dts_ms = offset_ms + float((packet.dts if packet.dts is not None else packet.pts) * tb) * 1000.0
        if self.zero_ms is None:
            if packet.is_keyframe:
                self.pending = []
            if not self.pending and not packet.is_keyframe:
                return True  # nothing decodable before the first keyframe
            self.pending.append((packet, pts_ms, dts_ms))
            if pts_ms < self.start_ms:
                return True
            self.zero_ms = max(self.start_ms, self.pending[0][1])
            for p, pt, dt in self.pending:
                self._mux(p, pt, dt)
            self.pending = []
            return True
        if dts_ms > end_ms:
            self.done = True
            return False
        self._mux(packet, pts_ms, dts_ms)
        return True

    def _mux(self, packet: av.Packet, pts_ms: float, dts_ms: float) -> None:
        dts = round((dts_ms - self.zero_ms) / self.ms_per_tick)
        if self.last_dts is not None and dts <= self.last_dts:  # two segments meet: keep dts rising
            dts = self.last_dts + 1
        pts = max(dts, round((pts_ms - self.zero_ms) / self.ms_per_tick))
        self.container.mux(_copy(packet, self.stream, self.time_base, pts, dts))
        self.last_dts = dts
        self.packets += 1
        self.bytes += packet.size

    def close(self) -> None:
        self.container.close()

    def abandon(self) -> None:
        try:
            self.container.close()
        except (OSError, av.error.FFmpegError, ValueError):
            pass


def _copy(packet: av.Packet, stream, time_base, pts: int, dts: int) -> av.Packet:
    """`packet`'s data and flags, at new times, for `stream` of another container."""
    copy = av.Packet(bytes(packet))
    copy.time_base = time_base
    copy.pts, copy.dts = pts, dts
    copy.duration = packet.duration
    copy.is_keyframe = packet.is_keyframe
    copy.stream = stream
    return copy


def _seek(container, stream, file_ms: float) -> None:
    """To the keyframe at or before `file_ms` of a long file, so a clip near its end
    does not demux all of it (a segment's first keyframe is its start: no seek)."""
    if file_ms <= 1000.0 or not stream.time_base:
        return
    try:
        container.seek(int(file_ms / 1000.0 / float(stream.time_base)), stream=stream, backward=True)
    except av.error.FFmpegError:
        pass  # past the end of a segment still being written: read it from where it is


def _ms(t_ms: float) -> str:
    """A time in a file name: ms, to the microsecond, without trailing zeros."""
    return f"{t_ms:.3f}".rstrip("0").rstrip(".")


def _codec_key(stream) -> tuple:
    ctx = stream.codec_context
    return ctx.name, ctx.width, ctx.height, bytes(ctx.extradata or b"")
