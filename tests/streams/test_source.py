"""Sources over real files decoded by PyAV, and their failures."""

import threading
import time

import pytest

from streams.options import OFFLINE
from streams.source import SourceError, open_source
from streams.urls import redact_url


def test_file_decodes_every_frame_in_order(short_clip):
    clip, truth = short_clip
    src = open_source(str(clip))
    assert (src.info.width, src.info.height, src.info.fps) == (truth["width"], truth["height"], truth["fps"])
    frames = list(src.frames())
    assert len(frames) == truth["num_frames"]
    assert [f.frame_id for f in frames] == list(range(len(frames)))
    pts = [f.pts_ms for f in frames]
    assert pts == sorted(pts) and pts[1] - pts[0] == pytest.approx(1000 / truth["fps"], abs=1)
    assert frames[0].image.shape == (truth["height"], truth["width"], 3)


def test_truncated_file_yields_frames_before_the_damage_then_fails(short_clip, tmp_path):
    clip, truth = short_clip
    data = clip.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) * 3 // 4])
    src = open_source(str(cut))
    got = 0
    with pytest.raises(SourceError) as info:
        for _ in src.frames():
            got += 1
    assert 0 < got < truth["num_frames"]
    assert str(cut) in str(info.value) and "truncated" in str(info.value)


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "missing.mp4", "no such file"),
    (lambda p: p, "is a directory"),
    (lambda p: (p / "notes.mp4").write_text("not a video at all") and p / "notes.mp4", "not a video FFmpeg can read"),
    (lambda p: (p / "empty.mp4").write_bytes(b"") or p / "empty.mp4", "not a video FFmpeg can read"),
])
def test_unreadable_files_are_named(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(SourceError) as info:
        open_source(str(path))
    assert str(path) in str(info.value) and message in str(info.value)


def test_live_urls_are_refused_without_leaking_credentials():
    with pytest.raises(SourceError) as info:
        open_source("rtsp://admin:secret@cam.local/stream1")
    assert "secret" not in str(info.value) and "rtsp://***@cam.local/stream1" in str(info.value)
    assert redact_url("http://u:p@h:8080/x?y=1") == "http://***@h:8080/x?y=1"
    assert redact_url("/plain/path.mp4") == "/plain/path.mp4"


def test_synthetic_source_renders_frames():
    src = open_source("synthetic://street?seed=4&duration=1&fps=10&size=320x180")
    frames = list(src.frames())
    assert len(frames) == 10 and frames[0].image.shape == (180, 320, 3)
    with pytest.raises(SourceError, match="unknown option"):
        open_source("synthetic://street?sed=4")
    with pytest.raises(SourceError, match="unknown scene preset"):
        open_source("synthetic://mars?seed=1")


def test_file_source_applies_back_pressure(short_clip):
    clip, _ = short_clip
    src = open_source(str(clip), options=OFFLINE.model_copy(update={"buffer_frames": 4}))
    frames = src.frames()
    next(frames)
    time.sleep(0.3)  # a free-running decoder would finish the whole clip in this time
    # one frame taken, four in the buffer, at most one more in the decoder's hand
    assert src.frames_decoded <= 1 + 4 + 1
    src.close()


def test_closing_early_stops_the_decoder(short_clip):
    clip, _ = short_clip
    src = open_source(str(clip), options=OFFLINE.model_copy(update={"buffer_frames": 2}))
    for i, _ in enumerate(src.frames()):
        if i == 2:
            break
    deadline = time.time() + 2
    while time.time() < deadline and any(t.name.startswith("decode-") for t in threading.enumerate()):
        time.sleep(0.02)
    assert not any(t.name.startswith("decode-") for t in threading.enumerate())


def test_rgb_frames_match_pyav_own_conversion(short_clip):
    """One scaler context reused across frames gives PyAV's per-frame `to_ndarray`."""
    import av
    import numpy as np

    from streams.decode import RgbConverter

    path, _ = short_clip
    to_rgb = RgbConverter()
    with av.open(str(path)) as container:
        frames = [f for f, _ in zip(container.decode(video=0), range(6))]
    assert len(frames) == 6
    for frame in frames:
        ours, theirs = to_rgb(frame), frame.to_ndarray(format="rgb24")
        assert ours.dtype == np.uint8 and ours.shape == theirs.shape == (frame.height, frame.width, 3)
        assert np.array_equal(ours, theirs)


@pytest.mark.parametrize("size, threads", [((640, 360), 1), ((2560, 1440), 0)])
def test_decoder_threads_by_frame_size(tmp_path, size, threads):
    """A camera-sized frame decodes on the stream's own thread; only a frame above 1080p
    gets FFmpeg's pool of slice threads (0: as many as it chooses)."""
    import av
    import numpy as np

    from streams.decode import video_stream

    path = tmp_path / "clip.mp4"
    with av.open(str(path), "w") as out:
        encoder = out.add_stream("libx264", rate=15)
        encoder.width, encoder.height = size
        encoder.pix_fmt = "yuv420p"
        image = np.zeros((size[1], size[0], 3), np.uint8)
        for packet in encoder.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
            out.mux(packet)
        for packet in encoder.encode():
            out.mux(packet)
    with av.open(str(path)) as container:
        stream, _ = video_stream(container, str(path))
        assert stream.codec_context.thread_count == threads
        assert len(list(container.decode(stream))) == 1


@pytest.mark.parametrize("fps", [5.0, 7.5])
def test_frames_not_due_are_not_decoded_when_nothing_refers_to_them(fps):
    """A stream sampling below the clip's rate gets the same frames whether or not the
    decoder skips the non-reference frames that are not due; the skipped ones are
    counted, so the pass still accounts for every frame of the file."""
    from streams.blocks import FrameSampler
    from streams.source import FileVideo
    from support.clips import BUNDLED, load_truth

    clip = next(c for c in BUNDLED if c.stem == "street_b")  # encoded with B-frames
    got = {}
    for skip in (False, True):
        video, sampler = FileVideo(clip, OFFLINE), FrameSampler(fps)
        video.keep = sampler.wants
        video.due = sampler.due if skip else None
        got[skip] = [pts for pts, _ in video.decode()], video
    (plain, full), (skipped, lean) = got[False], got[True]
    assert skipped == plain and len(plain) > 0
    assert full.frames_not_decoded == 0 and lean.frames_not_decoded > 0
    total = load_truth(clip)["num_frames"]
    for v in (full, lean):
        assert v.frames_decoded + v.frames_skipped + v.frames_not_decoded == total


def test_rgb_frames_are_contiguous_whatever_the_row_padding():
    """854 x 3 bytes is not a multiple of FFmpeg's row alignment: PyAV hands back a view
    with padded rows. Blocks keep the converter's arrays as they are, so it makes them
    contiguous, as cv2 and torch consumers may assume."""
    import av
    import numpy as np

    from streams.decode import RgbConverter

    frame = av.VideoFrame(854, 480, "yuv420p")
    for plane in frame.planes:
        plane.update(bytes(range(256)) * (plane.buffer_size // 256) + bytes(plane.buffer_size % 256))
    ours = RgbConverter()(frame)
    assert ours.shape == (480, 854, 3) and ours.flags["C_CONTIGUOUS"]
    assert np.array_equal(ours, frame.to_ndarray(format="rgb24"))
