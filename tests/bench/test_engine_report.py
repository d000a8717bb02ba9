"""`vigil bench engine`'s contended scenario: its options and the lines it reports."""

from __future__ import annotations

import pytest

from bench.engine import EngineBenchOptions, format_report, recovered_within


def test_contended_reports_each_case_and_its_ratio():
    single = {"goodput": {"nexus": 120.0, "tfs": 100.0}, "bound": 150.0, "ratio_vs_best_baseline": 1.2}
    shared = {"goodput_frames_per_s": {"nexus": 90.0, "tfs": 20.0}, "ratio_vs_best_baseline": 4.5}
    result = {"contended": {"hogs": 2, "nice": 10,
                            "measured_busy_served_quiet": {"single": single, "shared_backbone": shared},
                            "measured_quiet_served_busy": {"single": single, "shared_backbone": shared}}}
    report = format_report(result)
    assert report.count("ratio_vs_best_baseline | 1.2 |") == 2 and report.count("| 4.5 |") == 2
    assert "| contended, 2 busy: measured_busy_served_quiet | single goodput | nexus 120.0, tfs 100.0 |" in report


def test_hogs_are_bounded():
    with pytest.raises(ValueError, match="hogs must be 1 to 64"):
        EngineBenchOptions(hogs=0)
    assert EngineBenchOptions().hogs >= 1


def test_recovery_is_the_second_from_which_goodput_stays_back():
    assert recovered_within([1.0, 0.96, 1.0]) == 1
    assert recovered_within([0.5, 0.95, 0.8, 0.92, 1.0]) == 4  # a dip after the first recovery counts
    assert recovered_within([0.5, 0.6]) is None
