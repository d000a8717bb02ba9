"""The load governor on reported blocks (no clock, no threads): who is overloaded, and
how an app with min_fps gives up its rate under pressure and gets it back when calm."""

from __future__ import annotations

import logging

from vigil.load import CALM_BLOCKS, LoadGovernor


def test_an_app_that_sheds_is_overloaded_and_says_so(caplog):
    g = LoadGovernor()
    with caplog.at_level(logging.INFO, logger="vigil.load"):
        for _ in range(5):
            g.report("cam", 0, 15.0, None, sampled=8, shed=4)
        assert g.state("cam")["overloaded"] and g.state("cam")["shed_share"] > 0.3
        assert g.state("cam")["rate_fps"] == 15.0  # no min_fps: its rate is never lowered
        for _ in range(30):
            g.report("cam", 0, 15.0, None, sampled=8, shed=0)
    assert not g.state("cam")["overloaded"]
    said = [r.getMessage() for r in caplog.records]
    assert sum("is overloaded" in m for m in said) == 1 and sum("no longer overloaded" in m for m in said) == 1


def test_the_low_priority_app_degrades_toward_min_fps_and_recovers():
    g = LoadGovernor()
    rates = []
    for _ in range(20):  # the high-priority app sheds: the low one gives up frames
        g.report("high", 10, 15.0, None, sampled=8, shed=2)
        rates.append(g.report("low", 0, 15.0, 5.0, sampled=8, shed=0))
    assert rates[0] < 15.0 and rates[-1] == 5.0 and rates == sorted(rates, reverse=True)
    assert g.state("low")["overloaded"]  # below its full rate
    for _ in range(200):  # calm again
        g.report("high", 10, 15.0, None, sampled=8, shed=0)
        rate = g.report("low", 0, 15.0, 5.0, sampled=8, shed=0)
    assert rate == 15.0 and not g.state("low")["overloaded"]


def test_a_higher_priority_app_ignores_the_pressure_of_lower_ones():
    g = LoadGovernor()
    for _ in range(20):
        g.report("low", 0, 15.0, None, sampled=8, shed=6)
        rate = g.report("high", 10, 15.0, 5.0, sampled=8, shed=0)
    assert rate == 15.0


def test_recovery_waits_for_calm_blocks_in_a_row():
    g = LoadGovernor()
    for _ in range(10):
        low = g.report("low", 0, 10.0, 2.0, sampled=8, shed=8)
    for _ in range(CALM_BLOCKS + 40):  # its own shed share decays below the calm line first
        g.report("low", 0, 10.0, 2.0, sampled=8, shed=0)
    assert g.report("low", 0, 10.0, 2.0, sampled=8, shed=0) > low


def test_min_fps_above_fps_never_lowers_it():
    g = LoadGovernor()
    for _ in range(10):
        rate = g.report("cam", 0, 5.0, 8.0, sampled=8, shed=8)
    assert rate == 5.0
