"""Dwell and loitering: each track's time in a zone, in zone_exit and track_end, and a
zone_dwell event once per stay past the app's loiter_s."""

from __future__ import annotations

import pytest

from apps.app import App
from apps.spec import parse_spec
from test_app import LABELS, feed

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
    assert dwell[0].t_ms - enter.t_ms == pytest.approx(2000.0, abs=100.0)  # said on the frame it got there
    exit_ = next(e for e in events if e.type == "zone_exit")
    # it stood 3 s from its confirmation (frame 1) and took 5 more steps to leave x < 100
    assert exit_.data["dwell_ms"] == pytest.approx(exit_.t_ms - enter.t_ms)
    end = next(e for e in events if e.type == "track_end")
    assert end.data["dwell_ms"] == {"left": exit_.data["dwell_ms"]}


def test_no_zone_dwell_for_a_short_stay_or_another_class():
    assert [e for e in walk_and_wait(dwell_app(loiter_s=5.0), 30) if e.type == "zone_dwell"] == []
    others = dwell_app(loiter_s=1.0, classes=["person", "car"], loiter_classes=["car"])
    assert [e for e in walk_and_wait(others, 30) if e.type == "zone_dwell"] == []
    assert [e for e in walk_and_wait(dwell_app(), 30) if e.type == "zone_dwell"] == []  # no loiter_s: none
