"""Squishy bin packing (cluster/placement.py), a pure function: the cases of Nexus's
scheduler test (two models at 200 and 100 ms, 500 requests/s each, five GPUs, then
550 and 450), saturation, prefix-aware packing, memory, too few devices, and a
property test over random workloads."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from cluster.placement import Device, Prefix, Workload, check, largest_batch, max_throughput_rps, place
from engine.profiles import Profile


def linear(alpha: float, beta: float, max_batch: int = 64, name: str = "m") -> Profile:
    return Profile.linear(alpha, beta, max_batch, name, "test")


GPUS = [Device(f"gpu{i}", memory_mb=12 * 1024) for i in range(5)]
VGG16 = linear(3.0, 4.0, name="vgg16")  # B = 32 at 200 ms: l(32) = 100 ms, T_max = 320/s
VGG_S = linear(1.2, 2.0, name="vgg_s")  # B = 40 at 100 ms: l(40) = 50 ms, T_max = 800/s


def nexus_case(rate16: float, rate_s: float) -> list[Workload]:
    return [Workload("vgg16", rate16, 200.0, VGG16, memory_mb=600), Workload("vgg_s", rate_s, 100.0, VGG_S,
                                                                             memory_mb=400)]


def test_the_nexus_scheduler_case_places_both_models_within_their_slos():
    workloads = nexus_case(500.0, 500.0)
    assert largest_batch(workloads[0], {}) == 32 and max_throughput_rps(workloads[0], {}) == pytest.approx(320.0)
    plan = place(workloads, GPUS)
    assert check(plan, workloads, GPUS) == []
    assert not plan.unplaced
    full = [d for d in plan.devices if d.assignments == (d.assignments[0],) and d.assignments[0].batch == 32]
    assert len(full) == 1 and full[0].assignments[0].session == "vgg16"  # one saturated GPU at B
    # residuals 180/s of vgg16 and 500/s of vgg_s do not fit one duty cycle together
    assert plan.devices_used == 3
    assert plan.lower_bound == pytest.approx(500 / 320 + 500 / 800)



def test_batches_stop_at_the_efficient_batch_of_the_path():
    # a CPU backbone whose items cost least in fours: B is 4 though 16 fits the SLO
    sizes = (1, 2, 4, 8, 16)
    backbone = Profile("bb", "cpu", sizes, (9.0, 14.0, 24.0, 56.0, 144.0), (0.0,) * 5)
    w = Workload("people", 10.0, 1000.0, linear(0.1, 0.5), prefix="backbone")
    assert largest_batch(w, {"backbone": Prefix(backbone)}) == 4
    assert largest_batch(Workload("alone", 10.0, 1000.0, linear(0.1, 0.5)), {}) == 64

def test_the_epoch_after_the_rates_moved_covers_the_new_rates():
    workloads = nexus_case(550.0, 450.0)
    plan = place(workloads, GPUS)
    assert check(plan, workloads, GPUS) == [] and not plan.unplaced
    assert plan.rate_of("vgg16") == pytest.approx(550.0) and plan.rate_of("vgg_s") == pytest.approx(450.0)


def test_a_session_past_one_device_saturates_whole_devices_first():
    w = [Workload("big", 3.5 * 320.0, 200.0, VGG16)]
    plan = place(w, [Device(f"g{i}") for i in range(8)])
    assert check(plan, w, [Device(f"g{i}") for i in range(8)]) == []
    batches = sorted(d.assignments[0].batch for d in plan.devices)
    assert batches.count(32) == 3 and plan.devices_used == 4  # three at B, the half on a fourth


def test_small_sessions_share_one_device_on_a_common_duty_cycle():
    w = [Workload(f"cam{i}", 20.0, 200.0, linear(1.0, 2.0, name=f"m{i}")) for i in range(4)]
    devices = [Device(f"g{i}") for i in range(4)]
    plan = place(w, devices)
    assert check(plan, w, devices) == [] and plan.devices_used == 1
    (only,) = plan.devices
    assert only.occupancy <= 1.0 and {a.session for a in only.assignments} == {f"cam{i}" for i in range(4)}


def test_residuals_merge_shortest_duty_cycle_first():
    """Four residuals whose longest duty cycles are 165, 78, 39 and 18 ms. Taken by
    occupancy (Nexus's order), the 39 ms one merged onto the 78 ms one's device and
    halved its cycle, which then had no room for the 165 ms one: three devices.
    Shortest cycle first, the 39 ms one joins the 18 ms one and the 165 ms one joins
    the 78 ms one: two, every SLO kept."""
    load = [Workload("a", 150.0, 200.0, linear(1.0, 10.0, 32)), Workload("b", 150.0, 100.0, linear(1.0, 10.0, 32)),
            Workload("c", 150.0, 50.0, linear(1.0, 5.0, 32)), Workload("d", 80.0, 25.0, linear(1.0, 5.0, 32))]
    plan = place(load, GPUS)
    assert check(plan, load, GPUS) == []
    assert plan.devices_used == 2 and not plan.unplaced


def test_sessions_that_share_a_backbone_are_placed_together_when_that_fits_and_not_otherwise():
    # a backbone with a large fixed cost per batch (as on a GPU): run once per cycle for
    # both sessions, the two fit one device; each with its own backbone, they do not
    backbone = Prefix(linear(0.5, 40.0, 128, name="backbone"), memory_mb=300)
    head = linear(0.1, 1.0, 128, name="head")
    w = [Workload("people", 300.0, 180.0, head, prefix="backbone"),
         Workload("cars", 300.0, 180.0, head, prefix="backbone")]
    devices = [Device(f"g{i}") for i in range(4)]
    shared = place(w, devices, {"backbone": backbone})
    assert check(shared, w, devices, {"backbone": backbone}) == []
    assert shared.devices_used == 1
    alone = [Workload(x.session, x.rate_rps, x.slo_ms, linear(0.6, 41.0, 128, name=x.session)) for x in w]
    separate = place(alone, devices)
    assert check(separate, alone, devices) == [] and separate.devices_used == 2


def test_memory_keeps_models_apart():
    w = [Workload("a", 10.0, 200.0, linear(1.0, 2.0), memory_mb=7000),
         Workload("b", 10.0, 200.0, linear(1.0, 2.0, name="n"), memory_mb=7000)]
    devices = [Device("g0", 12000), Device("g1", 12000)]
    plan = place(w, devices)
    assert check(plan, w, devices) == [] and plan.devices_used == 2


def test_what_does_not_fit_is_listed_not_dropped():
    w = [Workload("big", 10 * 320.0, 200.0, VGG16), Workload("tight", 10.0, 5.0, VGG16)]
    devices = [Device("g0"), Device("g1")]
    plan = place(w, devices)
    assert check(plan, w, devices) == []
    assert plan.devices_used == 2 and sum(r for s, r in plan.unplaced if s == "big") == pytest.approx(8 * 320.0)
    assert ("tight", 10.0) in plan.unplaced  # 2 * l(1) = 14 ms > 5 ms: no device can serve it


@pytest.mark.parametrize("kwargs, field", [({"rate_rps": -1.0}, "rate_rps"), ({"rate_rps": math.inf}, "rate_rps"),
                                           ({"slo_ms": 0.0}, "slo_ms"), ({"slo_ms": math.nan}, "slo_ms"),
                                           ({"memory_mb": -5.0}, "memory_mb")])
def test_bad_numbers_are_refused_naming_the_field(kwargs, field):
    args = {"session": "s", "rate_rps": 1.0, "slo_ms": 100.0, "profile": VGG16, **kwargs}
    with pytest.raises(ValueError, match=f"s: {field} must be"):
        Workload(**args)


def test_a_prefix_that_is_not_given_is_named():
    with pytest.raises(ValueError, match="backbone"):
        place([Workload("s", 1.0, 100.0, VGG16, prefix="backbone")], GPUS)


workloads_strategy = st.lists(
    st.tuples(st.floats(0.0, 3000.0), st.floats(20.0, 500.0), st.floats(0.2, 5.0), st.floats(0.5, 20.0),
              st.sampled_from([None, None, "bb1", "bb2"]), st.floats(0.0, 3000.0)),
    min_size=1, max_size=10)


@settings(max_examples=150, deadline=None)
@given(workloads_strategy)
def test_every_placement_holds_its_invariants(rows):
    prefixes = {"bb1": Prefix(linear(2.0, 3.0, 32, "bb1"), 500.0), "bb2": Prefix(linear(0.5, 1.0, 32, "bb2"), 200.0)}
    workloads = [Workload(f"s{i}", rate, slo, linear(alpha, beta, 32, f"p{i}"), memory, prefix)
                 for i, (rate, slo, alpha, beta, prefix, memory) in enumerate(rows)]
    devices = [Device(f"g{i}", 8000.0) for i in range(400)]
    plan = place(workloads, devices, prefixes)
    assert check(plan, workloads, devices, prefixes) == []
    if all(w.prefix is None for w in workloads):  # l(b)/b falls with b: no device can beat the bound
        assert plan.devices_used >= plan.lower_bound - 1e-9
    # planned again from this plan, at other rates and with a device lost
    again = [Workload(w.session, w.rate_rps * (1.5 if i % 2 else 0.5), w.slo_ms, w.profile, w.memory_mb, w.prefix)
             for i, w in enumerate(workloads)]
    rest = [d for d in devices if not plan.devices or d.device_id != plan.devices[0].device_id]
    assert check(place(again, rest, prefixes, previous=plan), again, rest, prefixes) == []


def test_the_check_finds_a_broken_placement():
    from cluster.placement import Assignment, DevicePlan, Placement

    w = nexus_case(500.0, 500.0)
    over = Placement((DevicePlan("gpu0", 50.0, 0.0, (Assignment("vgg16", 500.0, 20), Assignment("vgg_s", 500.0, 25)),
                                 1000.0),), (), 0.0)
    problems = check(over, w, GPUS)
    assert any("busy" in p for p in problems)  # 79 + 32 ms of batches in a 50 ms cycle
    assert any("vgg16 gets 500.0 rps from batch 20" in p for p in problems)
    assert not any("placed or listed" in p for p in problems)
    short = Placement((), (("vgg16", 100.0),), 0.0)
    assert any("vgg16: 100.0 of 500.0 rps" in p for p in check(short, w, GPUS))


def hosts(plan) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for d in plan.devices:
        for a in d.assignments:
            out.setdefault(a.session, set()).add(d.device_id)
    return out


def test_a_replan_keeps_every_session_where_it_ran():
    """One session steps from two whole devices to three: planned afresh, every session
    after it by name shifts to another device; given the previous plan, none moves and
    the step takes a device that was free."""
    devices = [Device(f"gpu{i}") for i in range(8)]
    t_max = max_throughput_rps(Workload("x", 1.0, 200.0, VGG16), {})
    sessions = [Workload("a", 2.0 * t_max, 200.0, VGG16), Workload("b", 1.0 * t_max, 200.0, VGG16),
                Workload("c", 0.4 * t_max, 200.0, VGG16), Workload("d", 50.0, 100.0, VGG_S)]
    first = place(sessions, devices)
    stepped = [Workload("a", 3.0 * t_max, 200.0, VGG16), *sessions[1:]]
    afresh = place(stepped, devices)
    sticky = place(stepped, devices, previous=first)
    assert check(sticky, stepped, devices) == []
    assert sticky.devices_used == afresh.devices_used
    before, after = hosts(first), hosts(sticky)
    assert hosts(afresh)["b"] != before["b"]  # what the previous plan is there to prevent
    for session in ("b", "c", "d"):
        assert after[session] == before[session], (session, before, after)
    assert before["a"] < after["a"] and len(after["a"]) == 3


def test_a_lost_device_moves_only_its_own_sessions():
    devices = [Device(f"gpu{i}") for i in range(6)]
    sessions = [Workload(f"s{i}", 60.0 + 25 * i, 200.0, VGG16) for i in range(5)]
    first = place(sessions, devices)
    lost = first.devices[0].device_id
    on_lost = {a.session for a in first.devices[0].assignments}
    rest = [d for d in devices if d.device_id != lost]
    again = place(sessions, rest, previous=first)
    assert check(again, sessions, rest) == []
    before, after = hosts(first), hosts(again)
    for session in before:
        if session not in on_lost:
            assert before[session] <= after[session], (session, before, after)
