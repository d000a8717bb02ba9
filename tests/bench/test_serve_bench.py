"""`vigil bench serve` reads attainment from the server's own app metrics, over the
frames whose outcome fell in the window (not its arrivals, which frames that arrived
before the window but finished inside it would push past 1)."""

from __future__ import annotations

from bench.serve import settled
from engine.metrics import EngineMetrics


def _reading(m: EngineMetrics) -> dict:
    return m.app_summary("cam0")  # what /v1/apps/{name}/metrics reports of these counts


def test_attainment_over_settled_frames_stays_within_one():
    m = EngineMetrics()
    m.arrived("cam0", "scenedet", "2", 4)  # before the window: four frames in flight
    before = _reading(m)
    for _ in range(4):  # they finish inside it, in time
        m.completed("cam0", "scenedet", "2", 100.0, 1000.0)
    m.arrived("cam0", "scenedet", "2", 3)  # the window's own arrivals: one in time, one late, one dropped
    m.completed("cam0", "scenedet", "2", 200.0, 1000.0)
    m.completed("cam0", "scenedet", "2", 1500.0, 1000.0)
    m.dropped("cam0", "scenedet", "2", "deadline")
    after = _reading(m)
    within = after["within_slo"] - before["within_slo"]
    arrived = after["arrived"] - before["arrived"]
    assert within / arrived > 1  # the old reading: 5 in time of 3 arrivals
    assert settled(before, after) == 7  # 6 results and a drop
    assert within / settled(before, after) == 5 / 7
