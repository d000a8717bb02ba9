"""Clips over REST from the server's recording of a looping file (recording on in the
shared server): an event's clip holds the event's own frame and is the source frame
for frame; windows are checked; recording off says how to turn it on."""

from __future__ import annotations

import io
import math

import av
import numpy as np
import pytest

from streams.recording import RecordingStore
from support.processes import wait_for
from vigil.services.clips import ClipService
from vigil.services.errors import NotFound
from vigil.settings import Recording


def frames_of(data) -> list[tuple[float, np.ndarray]]:
    with av.open(io.BytesIO(data) if isinstance(data, bytes) else str(data)) as c:
        return [(f.time * 1000.0, f.to_ndarray(format="rgb24")) for f in c.decode(c.streams.video[0])]


@pytest.fixture(scope="module")
def source(bundled_clips):
    return frames_of(bundled_clips[0])


def recorded_until(api) -> float:
    done = [s["end_ms"] for s in api.get("/v1/streams/street/recordings").json() if s["end_ms"] is not None]
    return max(done, default=-math.inf)


def test_the_recording_tiles_the_stream(api):
    wait_for(lambda: recorded_until(api) > 4000.0, 60, "two closed segments")
    segments = api.get("/v1/streams/street/recordings").json()
    closed = [s for s in segments if s["end_ms"] is not None]
    assert len(closed) >= 2 and all(s["bytes"] > 0 for s in closed)
    for a, b in zip(closed, closed[1:]):
        assert b["start_ms"] >= a["end_ms"] - 0.01 and b["start_ms"] - a["end_ms"] < 100.0


def test_an_events_clip_is_the_source_around_it(api, source):
    def recorded_event():
        until = recorded_until(api)
        events = api.get("/v1/events", params={"stream": "street", "type": "line_cross", "limit": 1000}).json()
        fit = [e for e in events["events"] if e["t_ms"] >= 5000.0 and e["t_ms"] + 5000.0 <= until]
        return fit[0] if fit else None

    event = wait_for(recorded_event, 120, "a line crossing with 5 s recorded either side")
    r = api.get(f"/v1/events/{event['id']}/clip.mp4")
    assert r.status_code == 200 and r.headers["content-type"] == "video/mp4"
    with av.open(io.BytesIO(r.content)) as c:  # the span asked for: pre_s + post_s
        assert c.duration / 1e6 == pytest.approx(10.0, abs=0.5)
    clip = frames_of(r.content)
    # the clip's frames run on in the source file from where the first one is (a loop
    # pass wraps: the file's frames go round)
    images = [img for _, img in source]
    first = next(i for i, img in enumerate(images) if np.array_equal(img, clip[0][1]))
    for k, (_, img) in enumerate(clip):
        assert np.array_equal(images[(first + k) % len(images)], img), f"clip frame {k} is not the source's"
    # and the event's own frame is in it, as far into it as the event is past the clip's start
    pass_ms = len(images) * 1000.0 / 15
    own = images[round((event["t_ms"] % pass_ms) * 15 / 1000.0) % len(images)]
    assert any(np.array_equal(own, img) for _, img in clip)


@pytest.mark.parametrize("params,status,says", [
    ({"start_ms": 5000, "end_ms": 4000}, 422, "must come after"),
    ({"start_ms": 0, "end_ms": 3_600_001}, 422, "max_clip_s"),
    ({"start_ms": 1e14, "end_ms": 1e14 + 1000}, 404, "no recorded footage"),
    ({"start_ms": "nan", "end_ms": 1000}, 422, ""),
])
def test_a_window_is_checked(api, params, status, says):
    r = api.get("/v1/streams/street/clip.mp4", params=params)
    assert r.status_code == status, r.text
    assert says in r.text


def test_a_name_that_is_not_a_streams_is_not_a_folder(api):
    assert api.get("/v1/streams/..%2F..%2Fsnapshots/recordings").status_code == 404
    assert api.get("/v1/streams/nosuch/recordings").json() == []


def test_recording_off_says_how_to_turn_it_on(tmp_path):
    service = ClipService(None, Recording(), storage=None)
    with pytest.raises(NotFound, match=r"recording: \{enabled: true\}"):
        service.window("street", 0.0, 1000.0)
    assert RecordingStore(tmp_path / "r").segments("street") == []
