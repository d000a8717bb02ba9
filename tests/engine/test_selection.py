"""Adaptive model selection: the decision on numbers, then the engine under a load step."""

import numpy as np
import pytest

from engine.engine import Engine
from engine.requests import ADAPTIVE, Request
from engine.selection import RateMeter, VersionCost, capacity, choose_version
from factories import make_profile
from models.repository import ModelRepository
from repo import tiny_state, write_model

FAST = VersionCost(1, quality=0.85, capacity_per_s=400)
ACCURATE = VersionCost(2, quality=0.95, capacity_per_s=100)


@pytest.mark.parametrize("rate, current, expected", [
    (20, None, 2),     # light load: the accurate one
    (65, 2, 2),        # busy but within 90% of its capacity: stay
    (95, 2, 1),        # past 90%: the fast one
    (80, 1, 1),        # back below 90% of v2, but not below 70%: stay fast (hysteresis)
    (60, 1, 2),        # below 70% of v2: back to accurate
    (1000, 2, 1),      # overloaded everywhere: the fastest
])
def test_choose_version(rate, current, expected):
    assert choose_version([FAST, ACCURATE], rate, current) == expected


def test_capacity_respects_twice_the_batch_latency():
    p = make_profile(per_item_ms=10, fixed_ms=5)  # l(b) = 5 + 10 b
    # 2 l(b) <= 100 -> b <= 4 (l = 45): 4 / 45 ms = 88.9/s
    assert capacity([p], 100) == pytest.approx(4 * 1000 / 45)
    assert capacity([p, p], 100) == pytest.approx(2 * 1000 / 50)  # two fragments in a row


def test_rate_meter_follows_a_step():
    meter = RateMeter(tau_ms=500)
    for i in range(200):
        meter.add(i * 10.0)  # 100/s for 2 s
    assert meter.rate_per_s == pytest.approx(100, rel=0.1)
    meter.add(200 * 10.0 + 3000)  # 3 s of silence
    assert meter.rate_per_s < 5


def two_versions(tmp_path) -> tuple[Engine, list[float]]:
    """Model m in versions 1 (fast) and 2 (accurate), on an engine with a fake clock."""
    for v in (1, 2):
        write_model(tmp_path, "m", v, {"quality": 0.8 + 0.1 * v, "split": []}, state=tiny_state(head_seed=v),
                    config={"version_policy": {"latest": 2}})
    now = [0.0]
    return Engine(ModelRepository(tmp_path), "cpu", clock=lambda: now[0], adapt_profiles=False), now


def give_known_costs(engine: Engine) -> None:
    """v1 sustains 400/s within the SLO, v2 100/s; host costs, measured on real time, are
    forgotten (the tests run on fake time)."""
    for v, per_item in ((1, 1.0), (2, 4.0)):
        frag = engine.manager.versions["m"][v].model.fragments["model"]
        engine.manager.sessions[frag.hash].profile = make_profile(per_item_ms=per_item, fixed_ms=1,
                                                                  fragment_hash=frag.hash)
    engine.observed.host.clear()


def test_engine_switches_versions_under_a_load_step_and_back(tmp_path):
    engine, now = two_versions(tmp_path)
    try:
        engine.load("m")
        give_known_costs(engine)
        frame = np.zeros((32, 32, 3), np.uint8)

        def drive(rate: float, seconds: float) -> list[int]:
            versions = []
            for _ in range(int(rate * seconds)):
                now[0] += 1000.0 / rate
                r = engine.submit(Request("app", "m", frame, now[0], 1e9, ADAPTIVE)).result(timeout=10)
                versions.append(r.version)
            return versions

        assert set(drive(20, 2.0)[5:]) == {2}  # light: accurate
        assert drive(300, 2.0)[-1] == 1        # a step up: fast
        assert drive(20, 3.0)[-1] == 2         # and back
        kinds = [(e["from_version"], e["to_version"]) for e in engine.selections()]
        assert kinds == [(None, 2), (2, 1), (1, 2)]
        from prometheus_client import generate_latest
        text = generate_latest(engine.metrics.registry).decode()
        assert 'vigil_model_selected_version{app="app",model="m"} 2.0' in text
    finally:
        engine.close()


def test_each_apps_switches_are_reported_on_its_own_stream(tmp_path):
    """Two streams, an adaptive app on each, blocks in flight on both at once: every
    model_selected event names its own app's stream (the engine hands each switch back
    on the Result of the request that saw it)."""
    import dataclasses

    from apps.spec import parse_spec
    from factories import make_block
    from runtime.pipeline import build_runners, observe_block, submit_block

    engine, now = two_versions(tmp_path)
    try:
        runners = {}
        for stream in ("s1", "s2"):
            spec = parse_spec({"name": f"app-{stream}", "detector": "m", "select": "adaptive", "slo_ms": 600000.0})
            runners[stream] = build_runners([spec], engine, stream, (32, 24), 25.0, source="synthetic://street")
        give_known_costs(engine)
        events = {"s1": [], "s2": []}
        for k, rate in enumerate([20] * 3 + [400] * 150 + [20] * 15):  # frames/s per stream: a step up and back
            flights = {}
            for stream in ("s1", "s2"):  # both streams' blocks in flight before either is observed
                now[0] += 4 * 1000.0 / rate / 2
                block = dataclasses.replace(make_block(num_frames=4, start=4 * k), stream_id=stream)
                flights[stream] = submit_block(block, runners[stream], engine, lambda: now[0])
            for stream, flight in flights.items():
                observe_block(flight, runners[stream], engine, lambda e, _frames, s=stream: events[s].extend(e))
        for stream, got in events.items():
            switches = [e for e in got if e.type == "model_selected"]
            assert len(switches) >= 2, (stream, switches)  # the first choice and the step up at least
            assert {(e.app, e.stream) for e in switches} == {(f"app-{stream}", stream)}
    finally:
        engine.close()
