"""The load governor on reported blocks (a fake clock, no threads): who is overloaded,
and how an app with min_fps gives up its rate under pressure and gets it back when calm."""

from __future__ import annotations

import logging

from runtime.load import DECREASE, DEEPEST_CUT, FRAMES_SEEN, HOLD_S, LoadGovernor

BLOCK_S = 0.5  # stream time between one app's reports


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


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
    clock = Clock()
    g = LoadGovernor(clock=clock)
    rates = []
    for _ in range(60):  # the high-priority app sheds: the low one gives up frames
        clock.now += BLOCK_S
        g.report("high", 10, 15.0, None, sampled=8, shed=2)
        rates.append(g.report("low", 0, 15.0, 5.0, sampled=8, shed=0))
    assert rates[0] < 15.0 and rates[-1] == 5.0 and rates == sorted(rates, reverse=True)
    assert g.state("low")["overloaded"]  # below its full rate
    for _ in range(200):  # calm again
        clock.now += BLOCK_S
        g.report("high", 10, 15.0, None, sampled=8, shed=0)
        rate = g.report("low", 0, 15.0, 5.0, sampled=8, shed=0)
    assert rate == 15.0 and not g.state("low")["overloaded"]


def test_a_higher_priority_app_ignores_the_pressure_of_lower_ones():
    clock = Clock()
    g = LoadGovernor(clock=clock)
    for _ in range(20):
        clock.now += BLOCK_S
        g.report("low", 0, 15.0, None, sampled=8, shed=6)
        rate = g.report("high", 10, 15.0, 5.0, sampled=8, shed=0)
    assert rate == 15.0


def test_one_congestion_episode_cuts_once_and_recovery_waits_for_the_hold():
    clock = Clock()
    g = LoadGovernor(clock=clock)
    rates = []
    for shed in (8, 8, 8):  # three shedding blocks within one hold: the frames sampled before the cut
        clock.now += BLOCK_S
        rates.append(g.report("low", 0, 10.0, 2.0, sampled=8, shed=shed))
    assert rates == [rates[0]] * 3 and 10.0 * DEEPEST_CUT <= rates[0] <= 10.0 * DECREASE
    calm = []
    while clock.now < 1.0 + 2 * HOLD_S:
        clock.now += BLOCK_S
        calm.append((clock.now, g.report("low", 0, 10.0, 2.0, sampled=8, shed=0)))
    last_shed = 3 * BLOCK_S
    assert all(rate == rates[-1] for t, rate in calm if t - last_shed < HOLD_S)
    assert calm[-1][1] > rates[-1]


def test_a_lone_late_frame_cuts_no_rate_but_repeated_shedding_does():
    clock = Clock()
    g = LoadGovernor(clock=clock)
    rates = []
    for block in range(3 * FRAMES_SEEN // 2):  # six windows of frames, one frame shed in every other
        clock.now += BLOCK_S
        rates.append(g.report("low", 0, 10.0, 2.0, sampled=4, shed=1 if block % (FRAMES_SEEN // 2) == 3 else 0))
    # a frame in a latency tail is not congestion: cutting every low app for it left the device idle
    assert rates == [10.0] * len(rates)
    clock.now += BLOCK_S
    g.report("low", 0, 10.0, 2.0, sampled=4, shed=1)
    clock.now += BLOCK_S
    assert g.report("low", 0, 10.0, 2.0, sampled=4, shed=1) < 10.0


def test_min_fps_above_fps_never_lowers_it():
    clock = Clock()
    g = LoadGovernor(clock=clock)
    for _ in range(10):
        clock.now += BLOCK_S
        rate = g.report("cam", 0, 5.0, 8.0, sampled=8, shed=8)
    assert rate == 5.0


def simulate(g: LoadGovernor, clock: Clock, apps: list[str], capacity: float, seconds: float,
             delay_s: float = 1.0) -> list[tuple[float, dict[str, float]]]:
    """Cameras that want 15 frames/s each (min_fps 3) from a device that serves
    `capacity`: what is sampled over it is shed, seen `delay_s` later. (time, each
    camera's rate) at each step."""
    rates = {a: 15.0 for a in apps}
    history: list[float] = []  # the summed rate at each step
    out = []
    for _ in range(int(seconds / BLOCK_S)):
        clock.now += BLOCK_S
        history.append(sum(rates.values()))
        seen = history[max(0, len(history) - 1 - int(delay_s / BLOCK_S))]
        over = max(0.0, 1.0 - capacity / seen)
        for a in apps:
            sampled = max(1, round(rates[a] * BLOCK_S))
            rates[a] = g.report(a, 0, 15.0, 3.0, sampled=sampled, shed=round(sampled * over + 0.49 * (over > 0)))
        out.append((clock.now, dict(rates)))
    return out


def test_a_flood_is_cut_in_a_few_holds_not_a_tenth_at_a_time():
    """Sixteen cameras start at once at three times what the device serves: the cut
    follows how much is shed, so their rates are under capacity within five holds (at
    a tenth per hold it took fifteen), and they do not fall to their floors."""
    clock, capacity = Clock(), 80.0
    g = LoadGovernor(clock=clock)
    totals = [(t, sum(rates.values())) for t, rates in simulate(g, clock, [f"cam{i}" for i in range(16)],
                                                                 capacity, 60.0)]
    under = next(t for t, total in totals if total <= capacity)
    assert under <= 5 * HOLD_S + 1.0, under
    assert min(total for _, total in totals) > 16 * 3.0


def test_the_rates_of_equal_apps_settle_near_the_capacity_they_share():
    """Eight cameras want 15 frames/s each from a device that serves 60: what is sampled
    over that is shed, seen a second later. The rates must settle under the capacity but
    near it, not at their floors, and each camera gets a fair part."""
    clock, capacity = Clock(), 60.0
    g = LoadGovernor(clock=clock)
    apps = [f"cam{i}" for i in range(8)]
    settled = [rates for t, rates in simulate(g, clock, apps, capacity, 240.0) if t > 120]
    mean = sum(sum(r.values()) for r in settled) / len(settled)
    assert 0.8 * capacity <= mean <= 1.05 * capacity, mean
    means = [sum(r[a] for r in settled) / len(settled) for a in apps]
    assert max(means) - min(means) <= 0.1 * max(means)
