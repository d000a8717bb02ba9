"""The planner's simulation (`vigil bench cluster --sim`): the trace's load, a device's
duty cycles on arrivals it can and cannot serve, and what is not placed counting as
missed."""

from __future__ import annotations

import numpy as np
import pytest

from bench.cluster_sim import SimOptions, _run_device, arrival_times, profile_of, run_sim, simulate, trace
from cluster.placement import Device, Placement, Workload, max_throughput_rps, place
from engine.profiles import Profile


def test_the_trace_loads_as_many_devices_as_asked():
    rng = np.random.default_rng(3)
    workloads = trace(40, SimOptions(devices=(40,)), rng)
    assert sum(w.rate_rps / max_throughput_rps(w, {}) for w in workloads) == pytest.approx(40.0)
    assert len({w.profile.fragment_hash for w in workloads}) > 1  # several model kinds


def test_a_device_serves_evenly_spaced_arrivals_within_its_slo_and_drops_what_it_cannot():
    w = Workload("s", 100.0, 100.0, profile_of("resnet50"))  # l(b) = 1.1 b + 4 ms
    even = np.arange(0.0, 2000.0, 10.0)  # 100 a second for two seconds
    assert _run_device([[w, 8, even, 0]], 40.0, 2000.0) == len(even)
    flood = np.arange(0.0, 2000.0, 0.5)  # 2000 a second: past what batches of 8 back to back serve
    served = _run_device([[w, 8, flood, 0]], 40.0, 2000.0)
    back_to_back = 8 * (2000.0 + w.slo_ms) / w.profile.latency_ms(8)  # the run goes on an SLO past the horizon
    assert 0.9 * back_to_back < served <= back_to_back + 8


def test_a_device_never_idles_while_an_arrived_request_waits():
    """Two requests at once, a batch of one and a 50 ms cycle: the second runs right
    after the first, not a cycle later, past its 40 ms SLO."""
    w = Workload("s", 20.0, 40.0, Profile.linear(1.0, 0.0, 8))
    assert _run_device([[w, 1, np.array([0.0, 0.0]), 0]], 50.0, 100.0) == 2


def test_unplaced_load_counts_as_missed():
    rng = np.random.default_rng(0)
    w = [Workload("s", 200.0, 100.0, profile_of("resnet50"))]
    none = simulate(Placement((), (("s", 200.0),), 1.0), w, 2.0, rng)
    assert none["within_slo"] == 0 and none["arrived"] > 300
    placed = place(w, [Device("g0")], max_occupancy=0.9)
    assert simulate(placed, w, 2.0, rng)["attainment"] > 0.95


def test_the_run_reports_each_size_and_headroom():
    result = run_sim(SimOptions(devices=(8,), seconds=1.0, max_occupancy=(1.0, 0.9)), log=lambda _: None)
    assert [r["max_occupancy"] for r in result["rows"]] == [1.0, 0.9]
    assert result["sim"]["devices"] == [8] and 0 < result["sim"]["efficiency"][0] <= 1.0
    for row in result["rows"]:
        assert row["steady"]["devices_used"] >= 8 and row["rate_step"]["lower_bound"] > row["steady"]["lower_bound"]


def test_stream_arrivals_come_at_the_rate_from_evenly_spaced_streams():
    rng = np.random.default_rng(1)
    times = arrival_times(300.0, 2.0, rng, "streams", stream_fps=30.0)  # ten streams of 30 frames a second
    assert len(times) == 600 and np.all(np.diff(times) >= 0)
    in_each_frame_interval = np.histogram(times, bins=np.arange(0.0, 2000.0 + 1e-9, 1000.0 / 30.0))[0]
    assert set(in_each_frame_interval.tolist()) == {10}  # each stream once per interval, whatever its phase


def test_whole_devices_of_a_small_batch_keep_their_slo_with_streams_but_not_with_poisson_arrivals():
    """A yolo session at a 50 ms SLO runs batches of at most 5 (l(5) = 23 ms, twice
    within the SLO), so a request that waits a second cycle misses. Dealt by the
    routers' deficit round robin from video streams, four whole devices at 0.9 of
    their throughput serve it; independent Poisson arrivals at the same rates overflow."""
    w = Workload("s", 0.0, 50.0, profile_of("yolo"))
    w = Workload("s", 4 * 0.9 * max_throughput_rps(w, {}), 50.0, w.profile)
    placed = place([w], [Device(f"g{i}") for i in range(4)], max_occupancy=0.9)
    assert placed.devices_used == 4 and not placed.unplaced
    streams = simulate(placed, [w], 4.0, np.random.default_rng(0), "streams", 30.0)["attainment"]
    poisson = simulate(placed, [w], 4.0, np.random.default_rng(0), "poisson")["attainment"]
    assert streams >= 0.99 and poisson < 0.95, (streams, poisson)


def test_an_unknown_arrival_model_is_named():
    with pytest.raises(ValueError, match="arrivals"):
        SimOptions(arrivals="bursty")
