"""Recordings: packets remuxed into segments as a stream decodes (a real file, a real
RTSP camera), clips cut from them frame for frame equal to the source, retention, and
a recording that fails without stopping its stream."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import av
import numpy as np
import pytest

from streams.live import ManagedStream
from streams.options import StreamOptions
from streams.recording import ClipError, RecordingStore, Segment, StreamRecorder, cut_clip, list_segments
from support.processes import RtspServer, wait_for


def decoded(source, offset_ms: float = 0.0) -> list[tuple[float, np.ndarray]]:
    """(stream time ms, RGB) of every frame of a file or MP4 bytes."""
    with av.open(io.BytesIO(source) if isinstance(source, bytes) else str(source)) as c:
        return [(offset_ms + f.time * 1000.0, f.to_ndarray(format="rgb24")) for f in c.decode(c.streams.video[0])]


def keyframe_times(path: Path) -> list[float]:
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        return sorted(float(p.pts * s.time_base) * 1000.0 for p in c.demux(s) if p.pts is not None and p.is_keyframe)


def record_file(clip: Path, folder: Path, segment_s: float) -> list:
    """The clip through a ManagedStream with a recorder, every frame delivered."""
    stream = ManagedStream("f", str(clip), StreamOptions(realtime=False),
                           recorder=StreamRecorder(folder, segment_s)).start()
    return [f for f in stream.frames() if f is not None]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, bundled_clips):
    """street_a (20 s, 15 fps, B-frames) recorded in segments of 4 s."""
    folder = tmp_path_factory.mktemp("rec") / "street_a"
    frames = record_file(bundled_clips[0], folder, 4.0)
    return bundled_clips[0], folder, frames


def test_segments_tile_the_stream_and_start_at_keyframes(recorded):
    clip, folder, frames = recorded
    segments = list_segments(folder)
    assert len(segments) >= 3 and all(s.end_ms is not None for s in segments)
    for a, b in zip(segments, segments[1:]):
        assert b.start_ms == pytest.approx(a.end_ms, abs=0.01)  # no gap, no overlap
    keys = keyframe_times(clip)
    for s in segments:
        first = decoded(s.path, s.start_ms)
        assert any(abs(first[0][0] - k) < 1.0 for k in keys)  # each opens on a source keyframe
        assert s.end_ms - s.start_ms >= 4000.0 - 1.0 or s is segments[-1]
    # every frame the stream delivered is in exactly one segment, at its stream time
    times = sorted(t for s in segments for t, _ in decoded(s.path, s.start_ms))
    assert times == pytest.approx(sorted(f.pts_ms for f in frames), abs=0.01)


@pytest.mark.parametrize("start,end", [(5000.0, 13000.0), (5333.333, 9000.0), (0.0, 3000.0)])
def test_a_clip_is_the_source_frame_for_frame(recorded, start, end):
    """Cut across segments, from a keyframe (5 s, 0 s) or between two (5.3 s): it shows
    the source's frames from `start`, and lasts the span asked for (the frames from the
    keyframe before are decoded, not shown: the edit list), give or take the frames
    the decoder reorders past the end."""
    clip, folder, frames = recorded
    by_time = {round(f.pts_ms, 1): f.image for f in frames}
    data = cut_clip(list_segments(folder), start, end)
    with av.open(io.BytesIO(data)) as c:
        assert c.duration / 1e6 == pytest.approx((end - start) / 1000.0, abs=0.5)
    got = decoded(data)
    assert got[0][0] == pytest.approx(0.0, abs=1.0)
    for t, image in got:
        assert np.array_equal(by_time[round(start + t, 1)], image), f"frame at {start + t:.1f} ms differs"
    assert start + got[-1][0] >= end - 1000 / 15


def test_a_window_without_footage_is_a_clip_error(recorded):
    _, folder, _ = recorded
    with pytest.raises(ClipError, match="no recorded footage"):
        cut_clip(list_segments(folder), 60_000.0, 70_000.0)


def test_a_looping_file_starts_a_segment_each_pass_and_times_keep_rising(tmp_path, short_clip):
    clip, truth = short_clip
    folder = tmp_path / "loop"
    stream = ManagedStream("f", str(clip), StreamOptions(realtime=False, loop=True),
                           recorder=StreamRecorder(folder, 60.0)).start()
    n = 0
    for f in stream.frames():
        n += f is not None
        if n >= 3 * len(truth["frames"]):
            break
    stream.stop()
    segments = list_segments(folder)
    assert len(segments) >= 3  # one a pass: a pass's times start again
    assert all(b.start_ms >= a.end_ms - 0.01 for a, b in zip(segments, segments[1:]))
    both = decoded(cut_clip(segments, 0.0, segments[1].end_ms))  # across the seam
    source = decoded(clip)
    assert len(both) >= 2 * len(source) - 1
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(both, source + source))


def test_a_segment_being_written_can_be_clipped_within_a_second(tmp_path, bundled_clips):
    rec = StreamRecorder(tmp_path / "s", segment_s=60.0)
    with av.open(str(bundled_clips[0])) as c:
        s = c.streams.video[0]
        rec.begin(s, offset_ms=0.0)
        for i, packet in enumerate(c.demux(s)):
            rec.write(packet)
            if i == 90:  # 6 s in, still the first segment
                break
        segments = list_segments(tmp_path / "s")
        assert [seg.end_ms for seg in segments] == [None]
        got = decoded(cut_clip(segments, 0.0, 10_000.0))
        assert got[-1][0] - got[0][0] >= 6000.0 - 1000.0 - 200.0
        with pytest.raises(ClipError):  # past what it holds so far (a seek there fails)
            cut_clip(segments, 1e14, 1e14 + 1000.0)
        rec.end()
    assert list_segments(tmp_path / "s")[0].end_ms is not None


def test_retention_takes_the_oldest_past_the_size_and_the_aged(tmp_path, bundled_clips):
    now = [time.time()]
    store = RecordingStore(tmp_path / "rec", segment_s=2.0, retain_days=1.0, max_gb=1.0, wall_s=lambda: now[0])
    folder = tmp_path / "rec" / "a"
    record_file(bundled_clips[0], folder, 2.0)
    segments = list_segments(folder)
    assert len(segments) >= 5
    keep = sum(s.size for s in segments[-2:])
    store.max_bytes = keep  # room for the newest two
    for i, s in enumerate(segments):  # written oldest first; make the order plain to mtime
        t = now[0] - 100 + i
        os.utime(s.path, (t, t))
    store.prune()
    assert list_segments(folder) == segments[-2:]
    store.max_bytes = 10 ** 12
    now[0] += 2 * 86400
    store.prune()
    assert list_segments(folder) == []


def test_a_recording_that_cannot_be_written_leaves_the_stream_alone(tmp_path, short_clip, caplog):
    clip, truth = short_clip
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the folder should be")
    recorder = StreamRecorder(blocked / "f", 1.0)
    stream = ManagedStream("f", str(clip), StreamOptions(realtime=False), recorder=recorder).start()
    frames = [f for f in stream.frames() if f is not None]
    assert len(frames) == len(truth["frames"]) and stream.status()["status"] == "ended"
    assert recorder.errors >= 1 and recorder.segments_written == 0
    assert sum("recording to" in r.getMessage() for r in caplog.records) == 1  # logged once


@pytest.mark.slow
def test_a_live_camera_is_recorded_in_wall_clock_time(tmp_path, bundled_clips):
    server = RtspServer(bundled_clips[0]).start()
    folder = tmp_path / "cam"
    stream = ManagedStream("cam", server.url, StreamOptions(open_timeout_s=5, read_timeout_s=5),
                           recorder=StreamRecorder(folder, 2.0)).start()
    frames = []
    try:
        for f in stream.frames(poll_s=0.1):
            if f is not None:
                frames.append(f)
            if len(frames) >= 90:  # 6 s of a 15 fps camera
                break
        wait_for(lambda: any(s.end_ms is not None for s in list_segments(folder)), 10, "a closed segment")
    finally:
        stream.stop()
        server.stop()
    segments = list_segments(folder)
    assert segments and all(s.end_ms is not None for s in segments)  # the last one closed on stop
    clip = decoded(cut_clip(segments, frames[0].pts_ms, frames[-1].pts_ms))
    # the first keyframe came without a time (RTSP before its first sync): recording
    # starts at the next one; from there the delivered frames are the clip's, in order
    first = next(i for i, f in enumerate(frames) if np.array_equal(f.image, clip[0][1]))
    assert first < 3 * 15 and frames[first].pts_ms - frames[0].pts_ms < 3500.0  # a GOP of 2 s, and a start
    pairs = list(zip(frames[first:], clip))
    assert len(pairs) >= len(frames) - first - 3
    assert all(np.array_equal(f.image, img) for f, (_, img) in pairs)
    # recorded at the wall-clock times they were delivered, to within network and decode delay
    assert abs(segments[0].start_ms + clip[0][0] - frames[first].pts_ms) < 1500.0


def test_segments_read_back_from_their_names(tmp_path):
    (tmp_path / "1000_2000.5.mp4").write_bytes(b"x")
    (tmp_path / "-133.333_4000.mp4").write_bytes(b"xy")
    (tmp_path / "4000.part.mp4").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not a segment")
    assert [(s.start_ms, s.end_ms, s.size) for s in list_segments(tmp_path)] == [
        (-133.333, 4000.0, 2), (1000.0, 2000.5, 1), (4000.0, None, 0)]
    assert Segment(tmp_path / "x", 0.0, None, 0).overlaps(5.0, 6.0)
