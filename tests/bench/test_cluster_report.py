"""The cluster bench's options and report, without a cluster."""

from __future__ import annotations

import pytest

from bench.cluster_ray import ClusterBenchOptions, format_cluster_report


@pytest.mark.parametrize("bad", [(), (1.2,), (0.9, 0.0)])
def test_an_occupancy_outside_half_to_whole_is_refused(bad):
    with pytest.raises(ValueError, match="max_occupancy must be one or more shares in"):
        ClusterBenchOptions(max_occupancy=bad)


def test_the_report_has_a_row_per_occupancy_and_the_peer_apart():
    runs = [{"max_occupancy": 0.9, "devices_used": 8, "failover_s": 2.0},
            {"max_occupancy": 1.0, "devices_used": 7, "failover_s": None}]
    sim = {"devices": [16], "max_occupancy": 0.9, "efficiency": [0.8], "attainment": [1.0]}
    result = {**runs[0], "by_occupancy": runs, "ray_serve_devices_used": 12, "ray_serve_attainment": 0.99,
              "vigil_vs_ray_serve_devices": 0.667, "sim": sim}
    lines = format_cluster_report(result).splitlines()
    assert lines[2].startswith("| 0.9 | 8 |") and "| 2.0 |" in lines[2]
    assert lines[3].startswith("| 1.0 | 7 |") and "| None |" in lines[3]
    assert "| 12 | 0.99 | 0.667 |" in lines
    assert "| simulated devices (occupancy <= 0.9) | efficiency | attainment |" in lines
    assert "| 16 | 0.8 | 1.0 |" in lines


def test_the_front_door_row_has_the_cluster_both_ways():
    sim = {"devices": [16], "max_occupancy": 0.9, "efficiency": [0.8], "attainment": [1.0]}
    front = {"cameras": 8, "local_goodput_fps": 110.5, "cluster_goodput_fps": 91.8, "cluster_vs_local": 0.831,
             "cluster_in_front_goodput_fps": 110.3, "actors_vs_in_front": 0.832, "local_high_attainment": [1.0],
             "cluster_high_attainment": [1.0]}
    run = {"max_occupancy": 0.9, "devices_used": 8, "failover_s": 2.0}
    lines = format_cluster_report({**run, "by_occupancy": [run], "front": front, "sim": sim}).splitlines()
    assert "| 8 | 110.5 | 91.8 | 0.831 | 110.3 | 0.832 | [1.0] | [1.0] |" in lines
