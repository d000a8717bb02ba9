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


def test_the_allocators_asked_for_are_checked_and_each_reported_beside_the_first():
    import pytest

    from bench.serve import ServeBenchOptions, format_serve_report

    for bad in ((), ("tcmalloc",), ("system", "system")):
        with pytest.raises(ValueError, match="allocators must be distinct choices of auto, jemalloc"):
            ServeBenchOptions(allocators=bad)
    point = {"n": 1, "goodput_fps": 20.0, "high_attainment": 1.0, "low_attainment": None, "p99_all_ms": 90.0,
             "rss_mb": 500.0, "rss_growth": 1.0, "cpu_pct": 150.0, "cpu_steal": 0.0, "allocator": "jemalloc"}
    result = {"engine_bound_fps": 25.0, "served_vs_bound": 0.8, "overload_retention": 1.0, "points": [point],
              "allocators": ["jemalloc", "system"], "by_allocator": {"system": [{**point, "goodput_fps": 10.0,
                                                                                 "allocator": "system"}]},
              "goodput_vs_first": {"system": 0.5}}
    report = format_serve_report(result)
    assert "| jemalloc: jemalloc |" in report and "| system: system |" in report
    assert "goodput with system over jemalloc: 0.5" in report
