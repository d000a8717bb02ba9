"""Per-app metric windows with a fake clock."""

from __future__ import annotations

from vigil.rollups import Rollups


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_windows_close_on_time_and_sum_over_the_last_minute():
    clock = Clock()
    r = Rollups(5.0, clock)
    for second in range(120):  # two minutes: 1 request/s, the first minute all late
        clock.t = 1000.0 + second
        r.arrived("a", 1)
        r.completed("a", 50.0 if second >= 60 else 900.0, within_slo=second >= 60)
    clock.t = 1120.0
    closed = r.tick()
    assert len(closed) == 24 and all(row["arrived"] == 5 for row in closed)
    minute = r.summary("a", 60.0)
    assert minute["arrived"] == 60 and minute["slo_attainment"] == 1.0
    assert abs(minute["throughput_fps"] - 1.0) < 0.05
    hour = r.summary("a", 3600.0)
    assert hour["arrived"] == 120 and hour["slo_attainment"] == 0.5
    assert [row["p50_ms"] for row in r.series("a")][:1] == [900.0]
    assert r.tick() == []  # each closed window is handed out once


def test_drops_are_counted_by_reason_and_apps_are_separate():
    clock = Clock()
    r = Rollups(5.0, clock)
    r.arrived("a", 3)
    r.dropped("a", "deadline")
    r.dropped("a", "deadline")
    r.arrived("b", 1)
    r.completed("b", 10.0, True)
    a, b = r.summary("a", 60.0), r.summary("b", 60.0)
    assert a["dropped"] == {"deadline": 2} and a["slo_attainment"] == 0.0
    assert b["slo_attainment"] == 1.0 and b["dropped"] == {}
    r.forget("a")
    assert r.summary("a", 60.0)["arrived"] == 0


def test_numpy_inputs_come_out_as_plain_json_numbers():
    import json

    import numpy as np

    clock = Clock()
    r = Rollups(5.0, clock)
    r.arrived("a", 1)
    r.completed("a", np.float64(12.0), np.float64(12.0) <= 100.0)
    clock.t += 10
    r.tick()
    json.dumps(r.series("a"))  # a numpy scalar here was a 500 found by fuzzing
