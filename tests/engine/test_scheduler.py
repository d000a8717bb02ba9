"""Scheduling decisions on constructed queues, with `now` as a number (no clock, no sleeps)."""

import pytest

from engine.profiles import Profile
from engine.scheduler import ClipperPolicy, NexusPolicy, NoBatchPolicy, TfsPolicy, WorkItem, make_policy
from factories import make_item, make_profile

PROFILE = make_profile(per_item_ms=10, fixed_ms=5)  # l(b) = 5 + 10 b: l(1)=15, l(4)=45, l(8)=85


def test_batch_is_the_largest_that_meets_the_earliest_deadline():
    queue = [make_item(i, deadline_ms=200, budget_ms=400) for i in range(12)]
    plan = NexusPolicy(sigmas=0).plan({"s": queue}, {"s": PROFILE}, now_ms=105)
    # 95 ms left -> l(9) = 95 fits, l(10) = 105 does not. The other three would start
    # after this batch and miss for certain: dropped now rather than run late.
    assert plan.session == "s" and len(plan.batch) == 9
    assert len(plan.dropped) == 3


def test_short_queue_runs_whole_without_drops():
    queue = [make_item(i, deadline_ms=200, budget_ms=400) for i in range(5)]
    plan = NexusPolicy(sigmas=0).plan({"s": queue}, {"s": PROFILE}, now_ms=0)
    assert plan.batch == (0, 1, 2, 3, 4) and plan.dropped == ()


def test_batch_is_taken_in_deadline_order():
    queue = [make_item(1, 300), make_item(2, 200), make_item(3, 250)]
    plan = NexusPolicy(sigmas=0).plan({"s": queue}, {"s": PROFILE}, now_ms=0)
    assert plan.batch == (2, 3, 1)


def test_early_drop_removes_heads_that_block_the_planned_batch():
    # Budgets of 200 ms plan a batch of 8 (2 * l(8) = 170 <= 200). The first two items
    # can only be met alone; the window starting at the third covers 8 items.
    queue = [make_item(0, 20, budget_ms=200), make_item(1, 30, budget_ms=200)] + \
            [make_item(i, 100, budget_ms=200) for i in range(2, 12)]
    plan = NexusPolicy(sigmas=0).plan({"s": queue}, {"s": PROFILE}, now_ms=0)
    assert set(dict(plan.dropped)) == {0, 1}
    assert all(reason == "deadline" for _, reason in plan.dropped)
    assert plan.batch[0] == 2 and len(plan.batch) == 9  # l(9) = 95 <= 100


def test_a_head_the_window_misses_runs_in_a_smaller_batch_when_the_rest_still_fit():
    """Budgets of 200 ms plan a window of 9 (l(9) = 95), which misses item 0's 40 ms.
    A batch of 3 (l(3) = 35) meets it, and the next 9 still finish by 200 after it:
    nothing is dropped. When they would not (deadlines of 100), item 0 is dropped."""
    head = make_item(0, 40, budget_ms=200)
    plan = NexusPolicy(sigmas=0).plan({"s": [head] + [make_item(i, 200, budget_ms=200) for i in range(1, 12)]},
                                      {"s": PROFILE}, now_ms=0)
    assert plan.batch == (0, 1, 2) and plan.dropped == ()
    plan = NexusPolicy(sigmas=0).plan({"s": [head] + [make_item(i, 100, budget_ms=200) for i in range(1, 12)]},
                                      {"s": PROFILE}, now_ms=0)
    assert dict(plan.dropped) == {0: "deadline"} and plan.batch[0] == 1


def test_no_batch_passes_the_efficient_batch():
    # items cost 6 ms in batches of 4 and 9 ms in 16: a long queue with room for 16 runs 4
    sizes = (1, 2, 4, 8, 16)
    cpu = Profile("h", "cpu", sizes, (9.0, 14.0, 24.0, 56.0, 144.0), (0.0,) * 5)
    queue = [make_item(i, deadline_ms=10_000, budget_ms=10_000) for i in range(20)]
    plan = NexusPolicy(sigmas=0).plan({"s": queue}, {"s": cpu}, now_ms=0)
    assert cpu.efficient_batch == 4 and len(plan.batch) == 4 and plan.dropped == ()


def test_hopeless_items_are_dropped_and_nothing_runs():
    queue = [make_item(0, 10), make_item(1, 12)]  # l(1) = 15 > 10; no SLO known: nothing to probe by
    plan = NexusPolicy(sigmas=0).plan({"s": queue}, {"s": PROFILE}, now_ms=0)
    assert plan.session is None and sorted(dict(plan.dropped)) == [0, 1]


def test_an_idle_device_probes_a_queue_it_would_drop_whole_once_per_slo():
    """The profile says nothing can make it; it may be wrong, and the device has
    nothing else to do: the latest-deadline items run as a probe (as many as a batch
    would hold), the rest are dropped. Within one SLO of that probe, nothing is probed."""
    policy = NexusPolicy(sigmas=0)
    slow = make_profile(per_item_ms=100, fixed_ms=50)  # l(1) = 150, past every deadline here
    queue = [WorkItem(i, 0.0, 60.0 + i, 100.0, slo_ms=100.0) for i in range(5)]
    plan = policy.plan({"s": queue, "t": []}, {"s": slow, "t": PROFILE}, now_ms=0)
    assert plan.probe and plan.session == "s" and plan.batch == (4,)
    assert sorted(dict(plan.dropped)) == [0, 1, 2, 3]
    again = [WorkItem(i, 50.0, 110.0 + i, 100.0, slo_ms=100.0) for i in range(5, 8)]
    plan = policy.plan({"s": again}, {"s": slow}, now_ms=50)
    assert not plan.probe and plan.session is None and sorted(dict(plan.dropped)) == [5, 6, 7]
    plan = policy.plan({"s": again}, {"s": slow}, now_ms=100)
    assert plan.probe and plan.batch == (7,)


def test_items_past_their_deadline_are_never_probed():
    """Even a device ten times faster than the profile could not finish these (l(1) =
    150, 13 ms left at the most): a probe would show nothing, and they are dropped."""
    policy = NexusPolicy(sigmas=0)
    slow = make_profile(per_item_ms=100, fixed_ms=50)
    late = [WorkItem(i, 0.0, 5.0 + 4 * i, 100.0, slo_ms=100.0) for i in range(3)]
    plan = policy.plan({"s": late}, {"s": slow}, now_ms=0)
    assert not plan.probe and plan.session is None and sorted(dict(plan.dropped)) == [0, 1, 2]
    assert "s" not in policy.probed  # the next queue that could be served is probed at once


def test_a_probe_never_takes_the_device_from_a_batch_that_fits():
    policy = NexusPolicy(sigmas=0)
    slow = make_profile(per_item_ms=100, fixed_ms=50)
    hopeless = [WorkItem(0, 0.0, 60.0, 100.0, slo_ms=100.0)]
    fits = [WorkItem(1, 0.0, 500.0, 500.0, slo_ms=500.0)]
    plan = policy.plan({"s": hopeless, "t": fits}, {"s": slow, "t": PROFILE}, now_ms=0)
    assert not plan.probe and plan.session == "t" and dict(plan.dropped) == {0: "deadline"}


def test_priority_beats_earlier_deadline():
    low = [make_item(1, 100, priority=0)]
    high = [make_item(2, 500, priority=5)]
    plan = NexusPolicy(sigmas=0).plan({"low": low, "high": high}, {"low": PROFILE, "high": PROFILE}, now_ms=0)
    assert plan.session == "high"


def test_same_priority_earliest_deadline_first():
    a, b = [make_item(1, 300)], [make_item(2, 200)]
    plan = NexusPolicy(sigmas=0).plan({"a": a, "b": b}, {"a": PROFILE, "b": PROFILE}, now_ms=0)
    assert plan.session == "b"


def test_lower_priority_batch_is_capped_by_higher_priority_slos():
    """Preemption bound: a low-priority batch may block the device at most a fifth of
    the tightest high-priority SLO, so a high-priority request waits one short fragment."""
    policy = NexusPolicy(sigmas=0)
    high = [WorkItem(100, 0, 1000, 10, priority=5, slo_ms=200)]  # a head stage: tiny budget, SLO 200
    policy.plan({"high": high}, {"high": PROFILE}, now_ms=0)  # seen once
    low = [make_item(i, 5000, budget_ms=5000) for i in range(16)]
    plan = policy.plan({"low": low}, {"low": PROFILE}, now_ms=0)
    assert plan.session == "low"
    assert PROFILE.latency_ms(len(plan.batch)) <= 40  # a fifth of the high-priority SLO
    assert len(plan.batch) == 3


def test_margin_of_standard_deviations_shrinks_batches():
    noisy = make_profile(per_item_ms=10, fixed_ms=5, std_ms=20)
    queue = [make_item(i, 100, budget_ms=400) for i in range(12)]
    tight = NexusPolicy(sigmas=1).plan({"s": queue}, {"s": noisy}, now_ms=0)
    loose = NexusPolicy(sigmas=0).plan({"s": queue}, {"s": noisy}, now_ms=0)
    assert len(tight.batch) < len(loose.batch)


def test_items_waiting_elsewhere_are_dropped_only_when_certainly_late():
    run = [make_item(1, 50, priority=9)]
    wait = [make_item(2, 10), make_item(3, 400)]  # 2 cannot make it even alone
    plan = NexusPolicy(sigmas=0).plan({"run": run, "wait": wait}, {"run": PROFILE, "wait": PROFILE}, now_ms=0)
    assert plan.session == "run" and dict(plan.dropped) == {2: "deadline"}


def test_slo_split_budgets_reach_the_plan():
    """A stage's budget (its share of the SLO) sets the planned batch: 2 l(B) <= budget."""
    queue = [make_item(i, 1000, budget_ms=100) for i in range(16)]
    policy = NexusPolicy(sigmas=0)
    batch, _, planned = policy._window(sorted(queue, key=lambda w: w.deadline_ms), PROFILE, 0)
    assert batch and planned == 4
    # with a 100 ms stage budget the planned batch is 4 (2 * 45 <= 100), but the deadline
    # leaves room for all 16 queued, so the batch grows to the profile's largest
    plan = policy.plan({"s": queue}, {"s": PROFILE}, now_ms=0)
    assert len(plan.batch) == 16


def test_tfs_waits_for_a_full_batch_or_the_timeout():
    policy = TfsPolicy(max_batch=4, batch_timeout_ms=10)
    queue = [make_item(i, 1000, arrival_ms=0) for i in range(3)]
    plan = policy.plan({"s": queue}, {"s": PROFILE}, now_ms=5)
    assert plan.session is None and plan.wait_until_ms == 10
    plan = policy.plan({"s": queue}, {"s": PROFILE}, now_ms=10)
    assert plan.batch == (0, 1, 2)
    full = [make_item(i, 1000, arrival_ms=0) for i in range(6)]
    assert policy.plan({"s": full}, {"s": PROFILE}, now_ms=1).batch == (0, 1, 2, 3)


def test_clipper_aimd_grows_additively_and_backs_off_by_ten_percent():
    policy = ClipperPolicy(step=2)
    assert policy.batch_size.get("s", 1) == 1
    policy.feedback("s", 1, latency_ms=10, budget_ms=100)
    policy.feedback("s", 3, latency_ms=10, budget_ms=100)
    assert policy.batch_size["s"] == 5
    policy.batch_size["s"] = 20
    policy.feedback("s", 20, latency_ms=150, budget_ms=100)
    assert policy.batch_size["s"] == 18
    queue = [make_item(i, 1000) for i in range(30)]
    assert len(policy.plan({"s": queue}, {"s": PROFILE}, now_ms=0).batch) == 16  # capped by the profile


def test_nobatch_is_global_fifo_one_at_a_time():
    a = [make_item(1, 1000, arrival_ms=5)]
    b = [make_item(2, 1000, arrival_ms=3)]
    plan = NoBatchPolicy().plan({"a": a, "b": b}, {"a": PROFILE, "b": PROFILE}, now_ms=10)
    assert plan.session == "b" and plan.batch == (2,)


def test_baselines_never_drop():
    late = [make_item(0, 1)]
    for name in ("tfs", "clipper", "nobatch"):
        plan = make_policy(name).plan({"s": late}, {"s": PROFILE}, now_ms=100)
        assert plan.dropped == ()


def test_unknown_policy_is_named():
    with pytest.raises(ValueError, match="unknown policy 'fifo'"):
        make_policy("fifo")


def test_profile_interpolates_and_extrapolates():
    p = make_profile(per_item_ms=10, fixed_ms=5, sizes=(1, 4))
    assert p.latency_ms(2) == pytest.approx(25)
    assert p.latency_ms(8) == pytest.approx(85)
    assert p.largest_batch_within(50) == 4  # capped at the largest profiled size
    assert p.largest_batch_within(10) == 0


def test_profile_latencies_are_those_of_its_measured_points():
    # an uneven measured profile, as the profiler writes them: every batch size's latency
    # is the linear interpolation of the points, with its spread, and a line past them
    import numpy as np

    from engine.profiles import Profile

    sizes, means, stds = (1, 2, 4, 8, 16), (12.0, 36.9, 78.7, 233.0, 530.8), (0.2, 2.8, 1.1, 9.7, 72.4)
    p = Profile("h", "cpu", sizes, means, stds)
    for b in range(1, 17):
        assert p.latency_ms(b, 2.0) == pytest.approx(np.interp(b, sizes, means) + 2.0 * np.interp(b, sizes, stds))
    alpha, beta = np.polyfit(sizes, means, 1)
    assert p.latency_ms(20, 1.0) == pytest.approx(alpha * 20 + beta + 72.4)
    assert p.scaled(2.0).latency_ms(3) == pytest.approx(2.0 * p.latency_ms(3))
    with pytest.raises(ValueError, match="batch must be >= 1"):
        p.latency_ms(0)


def test_within_a_session_higher_priority_items_go_first():
    queue = [make_item(i, 100, priority=0) for i in range(6)] + [make_item(10 + i, 300, priority=5) for i in range(3)]
    plan = NexusPolicy(sigmas=0).plan({"s": queue}, {"s": PROFILE}, now_ms=0)
    assert plan.batch[:3] == (10, 11, 12)
    # the batch still meets the earliest deadline among its members
    assert PROFILE.latency_ms(len(plan.batch)) <= 100


def test_a_small_batch_waits_while_others_use_the_device():
    policy = NexusPolicy(sigmas=0)
    # planned batch for a 400 ms SLO: 2 l(b) <= 400 -> 16 (the profile's largest);
    # it must start by 400 - l(16) - ((0.2 + 0.15) * 400 + l(1)) = 400 - 165 - 155 = 80
    few = [WorkItem(i, 0, 400, 400, 5, 400) for i in range(3)]
    other = [WorkItem(100 + i, 0, 5000, 5000, 0, 5000) for i in range(16)]  # other work, a full batch
    queues, profiles = {"s": few, "o": other}, {"s": PROFILE, "o": PROFILE}
    assert policy.plan(queues, profiles, now_ms=0).session == "o"
    assert policy.plan(queues, profiles, now_ms=81).session == "s"  # its latest start has passed
    # nothing else to run: no waiting
    assert policy.plan({"s": few}, {"s": PROFILE}, now_ms=0).batch == (0, 1, 2)
    # a full batch does not wait
    full = [WorkItem(i, 0, 400, 400, 5, 400) for i in range(16)]
    assert policy.plan({"s": full, "o": other}, profiles, now_ms=0).session == "s"
    # with no SLO known there is nothing to plan a wait against
    unknown = [make_item(i, 400, budget_ms=400, priority=5) for i in range(3)]
    assert policy.plan({"s": unknown, "o": other}, profiles, now_ms=0).session == "s"


def test_while_one_session_waits_another_uses_the_device():
    policy = NexusPolicy(sigmas=0)
    waiting = [WorkItem(1, 0, 400, 400, 5, 400)]
    other = [WorkItem(10 + i, 0, 2000, 2000, 0, 2000) for i in range(16)]
    plan = policy.plan({"high": waiting, "low": other}, {"high": PROFILE, "low": PROFILE}, now_ms=0)
    # low runs, its batch capped to a fifth of the high-priority SLO: l(b) <= 80 -> 7
    assert plan.session == "low" and len(plan.batch) == 7
