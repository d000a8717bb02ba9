"""Managed streams: reconnects with backoff, status and counters, against a real RTSP
server (GStreamer's gst-rtsp-server) and real files."""

from __future__ import annotations

import logging
import random
import time

import pytest

from streams.live import ManagedStream, backoff_s
from streams.options import StreamOptions
from support.processes import RtspServer, free_port, wait_for

FAST = dict(backoff_initial_s=0.2, backoff_max_s=1.0, open_timeout_s=3.0, read_timeout_s=3.0)


def drain(stream: ManagedStream, seconds: float) -> list:
    frames, end = [], time.monotonic() + seconds
    for f in stream.frames(poll_s=0.1):
        if f is not None:
            frames.append(f)
        if time.monotonic() > end:
            break
    return frames


@pytest.mark.parametrize("attempt,low,high", [(0, 0.25, 0.5), (1, 0.5, 1.0), (2, 1.0, 2.0), (3, 2.0, 4.0),
                                              (10, 5.0, 10.0), (60, 5.0, 10.0)])
def test_backoff_doubles_with_jitter_up_to_the_cap(attempt, low, high):
    options = StreamOptions(backoff_initial_s=0.5, backoff_max_s=10.0)
    rng = random.Random(1)
    waits = [backoff_s(attempt, options, rng) for _ in range(200)]
    assert low <= min(waits) and max(waits) <= high
    assert max(waits) - min(waits) > (high - low) * 0.5  # jittered, not fixed


@pytest.mark.parametrize("field,value", [("backoff_initial_s", 0), ("buffer_frames", 0), ("transport", "quic"),
                                         ("max_reconnects", -1)])
def test_bad_options_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        StreamOptions(**{field: value})


def test_file_stream_ends_and_counts_frames(short_clip):
    clip, truth = short_clip
    stream = ManagedStream("f", str(clip), StreamOptions(realtime=False)).start()
    frames = [f for f in stream.frames() if f is not None]
    assert len(frames) == len(truth["frames"])
    assert stream.status()["status"] == "ended"
    assert stream.status()["frames_decoded"] == len(frames)
    assert [f.frame_id for f in frames] == list(range(len(frames)))


def test_looping_file_keeps_time_rising_without_gaps(short_clip):
    clip, truth = short_clip
    stream = ManagedStream("f", str(clip), StreamOptions(realtime=False, loop=True)).start()
    frames = []
    for f in stream.frames():
        frames.append(f)
        if len(frames) >= 2 * len(truth["frames"]) + 5:
            break
    stream.stop()
    pts = [f.pts_ms for f in frames]
    assert all(b > a for a, b in zip(pts, pts[1:]))
    assert stream.status()["gaps"] == 0 and stream.status()["reconnects"] == 0


def test_corrupt_file_fails_with_the_decoders_reason(tmp_path, short_clip):
    clip, _ = short_clip
    bad = tmp_path / "bad.mp4"
    data = bytearray(clip.read_bytes())
    bad.write_bytes(bytes(data[: len(data) // 3]))  # truncated mid-stream
    stream = ManagedStream("bad", str(bad), StreamOptions(realtime=False)).start()
    list(stream.frames())
    status = stream.status()
    assert status["status"] == "failed"
    assert "bad.mp4" in status["last_error"] and "damaged" in status["last_error"]
    assert status["reconnects"] == 0  # retrying cannot heal a file


def test_unreachable_camera_keeps_retrying_and_never_shows_credentials(caplog):
    url = f"rtsp://admin:s3cret@127.0.0.1:{free_port()}/cam"
    caplog.set_level(logging.WARNING, logger="vigil.streams")
    stream = ManagedStream("dead", url, StreamOptions(**FAST)).start()
    try:
        wait_for(lambda: stream.status()["reconnects"] >= 2, 15, "two reconnects")
        status = stream.status()
        assert status["status"] in ("reconnecting", "connecting")
        assert "s3cret" not in str(status) and "admin" not in str(status)
        assert status["url"] == f"rtsp://***@{url.split('@')[1]}"
        assert status["last_error"] and "cannot open" in status["last_error"]
        assert "s3cret" not in caplog.text and "***@" in caplog.text
    finally:
        stream.stop()


def test_max_reconnects_ends_in_failed():
    stream = ManagedStream("dead", f"rtsp://127.0.0.1:{free_port()}/cam",
                           StreamOptions(**{**FAST, "max_reconnects": 1})).start()
    try:
        wait_for(lambda: stream.status()["status"] == "failed", 15, "failed after one reconnect")
        assert stream.status()["reconnects"] == 1
    finally:
        stream.stop()


@pytest.mark.slow
def test_rtsp_camera_killed_and_restarted_recovers_with_the_gap_reported(bundled_clips):
    server = RtspServer(bundled_clips[0]).start()
    stream = ManagedStream("cam", server.url, StreamOptions(**FAST)).start()
    try:
        got = drain(stream, 3.0)
        assert len(got) > 10, "frames from the live camera"
        assert stream.status()["status"] == "live"
        assert got[-1].pts_ms > 1.6e12  # wall-clock capture times (epoch ms)
        server.stop()
        wait_for(lambda: stream.status()["status"] == "reconnecting", 10, "the stream notices the dead camera")
        time.sleep(2.0)
        server = RtspServer(bundled_clips[0], port=server.port).start()
        wait_for(lambda: stream.status()["status"] == "live", 1.0 + 5.0 + 3.0, "live again within cap + 5 s")
        after = drain(stream, 2.0)
        assert after, "frames after the restart"
        status = stream.status()
        assert status["reconnects"] >= 1 and status["gaps"] == 1
        assert status["last_gap_ms"] >= 2000.0  # the camera was down at least 2 s
        assert after[0].frame_id > got[-1].frame_id  # frame ids keep rising across the gap
    finally:
        stream.stop()
        server.stop()


@pytest.mark.slow
def test_a_camera_sampled_below_its_rate_skips_decoding_unreferenced_frames(bundled_clips):
    """A live camera (its H.264 has B-frames) with a demand of a third of its rate: the
    frames delivered keep to the demand, and the decoder is spared the non-reference
    frames among the rest."""
    server = RtspServer(bundled_clips[0]).start()
    stream = ManagedStream("cam", server.url, StreamOptions(**FAST))
    stream.set_demand(5.0)
    stream.start()
    try:
        got = drain(stream, 4.0)
        status = stream.status()
        assert len(got) > 5
        assert status["frames_not_decoded"] > 0 and status["frames_skipped"] > 0
        assert status["frames_decoded"] <= 0.5 * (status["frames_decoded"] + status["frames_skipped"]
                                                  + status["frames_not_decoded"])
    finally:
        stream.stop()
        server.stop()


@pytest.mark.slow
def test_udp_transport_receives_frames(bundled_clips):
    server = RtspServer(bundled_clips[0]).start()
    stream = ManagedStream("cam", server.url, StreamOptions(**{**FAST, "transport": "udp"})).start()
    try:
        assert len(drain(stream, 3.0)) > 5
    finally:
        stream.stop()
        server.stop()


@pytest.mark.slow
def test_http_source_through_ffmpeg_reconnects_at_the_end(bundled_clips):
    """An HTTP source (here a clip served by a real HTTP server) is live: decoded
    through FFmpeg's HTTP client, and when it ends it is opened again."""
    import functools
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(bundled_clips[0].parent))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/{bundled_clips[0].name}"
    stream = ManagedStream("http", url, StreamOptions(**FAST, buffer_frames=8)).start()
    try:
        frames = drain(stream, 4.0)
        assert len(frames) > 20
        wait_for(lambda: stream.status()["reconnects"] >= 1, 30, "reopened after the end")
        # nobody reads now: a live buffer drops its oldest frames, and counts them
        wait_for(lambda: stream.status()["frames_dropped"] > 0, 30, "frames dropped from the full buffer")
    finally:
        stream.stop()
        httpd.shutdown()


@pytest.mark.slow
def test_a_sampled_source_delivers_again_after_it_reconnects(bundled_clips):
    """A source's own times start again when it is opened again (here an HTTP clip at
    its end; a camera restarted does the same): a stream sampled below its rate keeps
    delivering frames after the reconnect, not only once the new times pass the old."""
    import functools
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(bundled_clips[0].parent))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/{bundled_clips[0].name}"
    stream = ManagedStream("http", url, StreamOptions(**FAST))
    stream.set_demand(5.0)
    stream.start()
    try:
        first = []
        for f in stream.frames(poll_s=0.1):
            first += [f] if f is not None else []
            if stream.status()["reconnects"] >= 1:
                break
        assert len(first) > 5, "frames of the first pass, at the demanded rate"
        after = drain(stream, 4.0)
        assert len(after) > 5, f"{len(after)} frames in 4 s after the reconnect"
    finally:
        stream.stop()
        httpd.shutdown()


def test_a_file_that_cannot_open_for_want_of_descriptors_is_retried_not_failed(short_clip, monkeypatch):
    """EMFILE says the machine is short of descriptors, not that the file is bad: the
    stream reconnects with backoff rather than ending `failed`."""
    import errno

    import av

    import streams.source as source

    clip, truth = short_clip
    real, calls = source.av.open, {"n": 0}

    def open_(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] <= 2:
            av.error.err_check(-errno.EMFILE)
        return real(*args, **kwargs)

    monkeypatch.setattr(source.av, "open", open_)
    stream = ManagedStream("f", str(clip), StreamOptions(realtime=False, **FAST)).start()
    frames = [f for f in stream.frames() if f is not None]
    status = stream.status()
    assert status["status"] == "ended" and status["reconnects"] == 2 and len(frames) == len(truth["frames"])
    assert "Too many open files" in status["last_error"]



def test_a_stream_delivers_only_the_frames_its_apps_sample(short_clip):
    """set_demand(5) on a 15 fps file: a third of the frames are converted and
    delivered, the rest decoded and counted as skipped; time keeps rising across passes."""
    clip, truth = short_clip
    n = len(truth["frames"])
    stream = ManagedStream("f", str(clip), StreamOptions(realtime=False, loop=True))
    stream.set_demand(truth["fps"] / 3)
    stream.start()
    frames = []
    for f in stream.frames():
        frames.append(f)
        if len(frames) >= n:  # about three passes over the file
            break
    stream.stop()
    pts = [f.pts_ms for f in frames]
    assert all(b > a for a, b in zip(pts, pts[1:]))
    gaps = {round(b - a) for a, b in zip(pts, pts[1:])}
    assert gaps <= {round(3000 / truth["fps"]), round(2000 / truth["fps"]), round(4000 / truth["fps"])}, gaps
    assert pts[-1] > 2 * n * 1000 / truth["fps"]  # the third pass goes on after the second
    status = stream.status()
    # what is not delivered is decoded and dropped, or, where no frame refers to it, not decoded
    assert status["frames_skipped"] + status["frames_not_decoded"] >= 1.5 * status["frames_decoded"]
    assert status["frames_not_decoded"] > 0
    stream.set_demand(None)  # every frame again, from now on
    assert stream._wanted(1e9) and stream._wanted(1e9 + 1)


def test_a_file_stream_decodes_on_its_own_thread_into_one_buffer(short_clip):
    """One thread per stream between the file and the consumer, and each frame built
    there once: no decoder thread of a `Source` behind it."""
    import threading

    clip, truth = short_clip
    stream = ManagedStream("one", str(clip), StreamOptions(realtime=False, buffer_frames=2)).start()
    frames = stream.frames()
    first = next(frames)
    time.sleep(0.2)
    names = [t.name for t in threading.enumerate()]
    assert names.count("stream-one") == 1 and not any(n.startswith("decode-") for n in names), names
    decoded = stream.status()["frames_decoded"]
    assert decoded <= 1 + 2 + 1, decoded  # back-pressure: one taken, two buffered, one in hand
    rest = [f for f in frames if f is not None]
    assert [first.frame_id] + [f.frame_id for f in rest] == list(range(len(truth["frames"])))
