"""The cluster scheduler's pure parts: deficit round robin over a session's devices,
when an epoch is due (Nexus: 30 s, or after 10 s when a rate leaves 0.8-1.1x of its
allocation, or at once when a backend is lost), and the scheduler's state that ties
them to the planner."""

from __future__ import annotations

from collections import Counter

import pytest

from cluster.epochs import EpochPolicy, Epochs
from cluster.placement import Device, Workload, check
from cluster.planner import GlobalScheduler
from cluster.routing import DeficitRoundRobin, NoRoute
from engine.profiles import Profile


def test_requests_follow_the_planned_rates_smoothly():
    drr = DeficitRoundRobin({"g0": 300.0, "g1": 100.0})
    picks = [drr.next() for _ in range(400)]
    assert Counter(picks) == {"g0": 300, "g1": 100}
    # smooth: g1 gets one of every four, never a long run for either
    assert all(picks[i:i + 4].count("g1") == 1 for i in range(0, 400, 4))


def test_a_new_table_keeps_the_smoothing_and_a_lost_device_gets_nothing_more():
    drr = DeficitRoundRobin({"g0": 1.0, "g1": 1.0, "g2": 2.0})
    for _ in range(7):
        drr.next()
    drr.update({"g0": 1.0, "g1": 1.0, "g2": 2.0})
    counts = Counter(drr.next() for _ in range(400))
    assert abs(counts["g2"] - 200) <= 1 and abs(counts["g0"] - 100) <= 1
    drr.remove("g2")
    assert set(drr.next() for _ in range(50)) == {"g0", "g1"}
    drr.remove("g0")
    drr.remove("g1")
    with pytest.raises(NoRoute):
        drr.next()


def test_bad_weights_are_refused():
    with pytest.raises(ValueError, match="weight of 'g0' must be finite"):
        DeficitRoundRobin({"g0": float("nan")})


def test_an_epoch_every_30_s_and_not_before_10_s_unless_a_backend_is_lost():
    epochs = Epochs(EpochPolicy(), planned_at_s=0.0)
    steady = {"a": 100.0}
    assert epochs.due(5.0, steady, steady) is None
    assert epochs.due(5.0, {"a": 300.0}, steady) is None  # a rate jump waits for min_epoch_s
    assert epochs.due(5.0, steady, steady, backend_lost=True) == "backend_lost"
    assert epochs.due(29.0, steady, steady) is None
    assert epochs.due(30.0, steady, steady) == "epoch"
    epochs.planned(30.0)
    assert epochs.due(31.0, steady, steady) is None


@pytest.mark.parametrize("rate, due", [(79.0, True), (80.0, False), (110.0, False), (111.0, True)])
def test_after_10_s_a_rate_outside_its_allocation_replans(rate, due):
    epochs = Epochs(EpochPolicy(), planned_at_s=0.0)
    assert (epochs.due(10.0, {"a": rate, "b": 50.0}, {"a": 100.0, "b": 50.0}) == "rate: a") is due


def test_a_session_the_plan_has_not_seen_replans_after_10_s():
    assert Epochs().due(12.0, {"new": 5.0}, {}) == "rate: new"
    assert Epochs().due(12.0, {}, {"gone": 0.0}) is None


def test_a_policy_out_of_order_is_refused():
    with pytest.raises(ValueError, match="beacon_s <= min_epoch_s <= epoch_s"):
        EpochPolicy(beacon_s=1.0, epoch_s=5.0, min_epoch_s=10.0)
    with pytest.raises(ValueError, match="low <= 1 <= high"):
        EpochPolicy(low=1.2)


# -- the global scheduler's state (cluster/planner.py) ------------------------------------------
def _linear(alpha: float, beta: float) -> Profile:
    return Profile.linear(alpha, beta, 64, "m", "test")


def _cluster(devices: int = 4) -> GlobalScheduler:
    g = GlobalScheduler()
    for i in range(devices):
        g.register_backend(Device(f"g{i}"), now_s=0.0)
    return g


def test_a_session_is_placed_when_added_and_routed_over_its_devices():
    g = _cluster()
    g.add_session(Workload("people", 500.0, 200.0, _linear(3.0, 4.0)), now_s=0.0)  # T_max 320/s
    routes = g.routes("people")
    assert len(routes) == 2 and sum(routes.values()) == pytest.approx(500.0)
    drr = DeficitRoundRobin(routes)
    counts = Counter(drr.next() for _ in range(1000))
    assert all(abs(counts[d] - 1000 * r / 500.0) <= 1 for d, r in routes.items())
    assert g.history[-1].reason == "session people added"


def test_a_lost_backend_is_replaced_at_once_and_never_routed_to():
    g = _cluster()
    w = Workload("people", 500.0, 200.0, _linear(3.0, 4.0))
    g.add_session(w, now_s=0.0)
    victim = next(iter(g.routes("people")))
    g.remove_backend(victim, now_s=3.0)
    assert victim not in g.routes("people") and g.table(victim) is None
    assert sum(g.routes("people").values()) == pytest.approx(500.0)
    assert check(g.placement, [w], list(g.backends.values())) == []
    assert g.history[-1].reason == f"backend {victim} lost" and g.history[-1].at_s == 3.0


def test_a_rate_that_grows_past_its_allocation_is_planned_again_after_the_minimum_epoch():
    g = _cluster(devices=6)
    g.add_session(Workload("cars", 300.0, 200.0, _linear(3.0, 4.0)), now_s=0.0)
    g.report("cars", 700.0)
    assert g.tick(5.0) is None  # before min_epoch_s
    assert g.tick(10.0) == "rate: cars"
    assert sum(g.routes("cars").values()) == pytest.approx(700.0)
    g.report("cars", 700.0)
    assert g.tick(11.0) is None and g.tick(40.0) == "epoch"


def test_load_that_does_not_fit_waits_for_a_backend_then_is_placed():
    g = _cluster(devices=1)
    g.add_session(Workload("big", 640.0, 200.0, _linear(3.0, 4.0)), now_s=0.0)  # two devices' worth
    assert g.placement.unplaced and sum(g.routes("big").values()) == pytest.approx(320.0)
    g.register_backend(Device("g9"), now_s=2.0)
    assert not g.placement.unplaced and sum(g.routes("big").values()) == pytest.approx(640.0)


def test_load_left_unplaced_is_not_planned_again_every_epoch_for_nothing():
    """Two devices' worth on one device: the part placed is half the rate, but the rate
    has not moved since it was planned, so the minimum epoch passes without a plan (a
    plan at the same rate would place the same half, and move sessions for nothing)."""
    g = _cluster(devices=1)
    g.add_session(Workload("big", 640.0, 200.0, _linear(3.0, 4.0)), now_s=0.0)
    assert g.placement.unplaced
    g.report("big", 640.0)
    assert g.tick(15.0) is None
    g.report("big", 1000.0)  # the rate itself moved: that is a reason
    assert g.tick(15.0) == "rate: big"


@pytest.mark.parametrize("rate, due", [(2.5, False), (3.0, True), (1.2, False), (0.9, True)])
def test_a_small_session_replans_only_when_its_rate_moved_by_enough(rate, due):
    """A session of two requests a second reads 2.5 or 1.2 by chance: no plan for that."""
    epochs = Epochs(EpochPolicy(), planned_at_s=0.0)
    assert (epochs.due(15.0, {"a": rate}, {"a": 2.0}) is not None) is due


def test_an_idle_session_keeps_a_device_at_its_minimum_rate_and_plans_no_epoch_for_idling():
    """A camera app's model between bursts: planned at 0 it would lose its device (and
    its backend would unload it), and its next frames would find no route for an epoch."""
    g = _cluster(devices=2)
    g.add_session(Workload("kept", 40.0, 200.0, _linear(3.0, 4.0), min_rate_rps=1.0), now_s=0.0)
    g.add_session(Workload("loose", 40.0, 200.0, _linear(3.0, 4.0)), now_s=0.0)
    for session in ("kept", "loose"):
        g.report(session, 0.0)
    assert g.tick(10.0) == "rate: kept"  # both left their band; the first named
    assert sum(g.routes("kept").values()) == pytest.approx(1.0)
    assert g.routes("loose") == {}
    g.report("kept", 0.0)
    g.report("loose", 0.0)
    assert g.tick(25.0) is None  # idle at its minimum is no reason to plan again


def test_a_minimum_rate_must_be_finite():
    with pytest.raises(ValueError, match="min_rate_rps must be finite"):
        Workload("s", 1.0, 200.0, _linear(3.0, 4.0), min_rate_rps=float("inf"))
