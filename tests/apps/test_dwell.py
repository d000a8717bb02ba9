"""Dwell and loitering: each track's time in a zone, in zone_exit and track_end, and a
zone_dwell event once per stay past the app's loiter_s."""

from __future__ import annotations

import pytest
from test_app import LABELS, feed

from apps.app import App
from apps.spec import parse_spec

SIZE = (200, 100)


def walk_and_wait(app: App, wait_frames: int):
    """A person enters the zone `left` (x < 100), stands still `wait_frames` frames (at
    10 frames/s), then walks out across the line and is gone."""
    frames = [[(60, 50, 0)] for _ in range(wait_frames)] + [[(60 + 8 * i, 50, 0)] for i in range(1, 12)]
    return feed(app, frames + [[] for _ in range(8)])


def dwell_app(**overrides) -> App:
    spec = {"name": "t", "detector": "scenedet", "classes": ["person"],
            "zones": {"left": [[0, 0], [0.5, 0], [0.5, 1], [0, 1]]}, "tracker": {"min_hits": 2, "lost_track_s": 0.5},
            **overrides}
    return App(parse_spec(spec), "cam", SIZE, 10.0, LABELS)


def test_a_track_that_stays_past_loiter_s_gets_one_zone_dwell_and_its_exit_says_how_long():
    events = walk_and_wait(dwell_app(loiter_s=2.0), 30)
    dwell = [e for e in events if e.type == "zone_dwell"]
    assert len(dwell) == 1 and dwell[0].data["zone"] == "left" and dwell[0].data["dwell_ms"] >= 2000.0
    enter = next(e for e in events if e.type == "zone_enter")
    # said on the frame its stay got there; the stay is dated from its first frame inside,
    # and the enter said on the zone_inertia'th (3)
    assert dwell[0].t_ms - enter.data["entered_ms"] == pytest.approx(2000.0, abs=100.0)
    assert enter.t_ms - enter.data["entered_ms"] == pytest.approx(200.0)
    exit_ = next(e for e in events if e.type == "zone_exit")
    # it stood 3 s from its confirmation (frame 1) and took 5 more steps to leave x < 100
    assert exit_.data["dwell_ms"] == pytest.approx(exit_.data["left_ms"] - enter.data["entered_ms"])
    assert exit_.t_ms - exit_.data["left_ms"] == pytest.approx(200.0)
    end = next(e for e in events if e.type == "track_end")
    assert end.data["dwell_ms"] == {"left": exit_.data["dwell_ms"]}


def test_no_zone_dwell_for_a_short_stay_or_another_class():
    assert [e for e in walk_and_wait(dwell_app(loiter_s=5.0), 30) if e.type == "zone_dwell"] == []
    others = dwell_app(loiter_s=1.0, classes=["person", "car"], loiter_classes=["car"])
    assert [e for e in walk_and_wait(others, 30) if e.type == "zone_dwell"] == []
    assert [e for e in walk_and_wait(dwell_app(), 30) if e.type == "zone_dwell"] == []  # no loiter_s: none


def test_a_foot_over_the_border_for_two_frames_is_one_stay_unless_zone_inertia_is_one():
    # stands with its foot at x=98, inside `left` (x < 100); on two frames its box
    # jitters to x=101, outside; then it is lost
    frames = [[(101.0 if k in (10, 11) else 98.0, 50, 0)] for k in range(20)] + [[] for _ in range(8)]
    settled = [e for e in feed(dwell_app(), frames) if e.type == "zone_exit"]
    assert [e.data["dwell_ms"] for e in settled] == [pytest.approx(1800.0)]  # frames 1 (confirmed) to 19
    app = dwell_app()
    app.reconfigure(parse_spec({**app.spec.model_dump(mode="json"), "zone_inertia": 1}))
    split = [e for e in feed(app, frames) if e.type == "zone_exit"]
    assert [e.data["dwell_ms"] for e in split] == [pytest.approx(900.0), pytest.approx(700.0)]


def test_a_track_hidden_when_the_stream_ends_stays_to_its_end_one_given_up_on_left_when_last_seen():
    # stands inside `left` on frames 0-19 (confirmed on frame 1), then no detection
    standing = [[(60, 50, 0)] for _ in range(20)]
    app = dwell_app()  # lost_track_s 0.5: kept five frames unseen
    events = feed(app, standing + [[] for _ in range(3)]) + app.finish()
    exit_ = next(e for e in events if e.type == "zone_exit")
    # hidden for the stream's last three frames, it was still taken as there (its zone's
    # occupancy counted it), so its stay runs to the last frame, 2.2 s
    assert (exit_.data["left_ms"], exit_.data["dwell_ms"]) == (pytest.approx(2200.0), pytest.approx(2100.0))
    end = next(e for e in events if e.type == "track_end")
    assert end.t_ms == exit_.t_ms == pytest.approx(1900.0)  # both said of the frame it was last seen on
    assert end.data["dwell_ms"] == {"left": pytest.approx(2100.0)}
    app = dwell_app()
    events = feed(app, standing + [[] for _ in range(8)]) + app.finish()
    exits = [e for e in events if e.type == "zone_exit"]
    assert [(e.data["left_ms"], e.data["dwell_ms"]) for e in exits] == [(1900.0, pytest.approx(1800.0))]
    assert dwell_app().finish() == []  # an app that saw no frame has nothing to end
