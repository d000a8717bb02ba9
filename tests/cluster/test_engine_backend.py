"""A backend that runs Vigil's engine on a real Ray cluster on loopback (one node with
one logical GPU, one cluster for the module): the scheduler places a SceneDet session
on it, the router sends it rendered frames, and what comes back is what the engine
finds in this process on the same frames."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from cluster.engine_backend import EngineBackend, session_model
from cluster.local import local_cluster, loopback

loopback()  # before Ray is imported
ray = pytest.importorskip("ray")

from cluster.backend import BackendConfig, start_backend  # noqa: E402
from cluster.epochs import EpochPolicy  # noqa: E402
from cluster.placement import Assignment, DevicePlan, Workload  # noqa: E402
from cluster.router import Router  # noqa: E402
from cluster.scheduler import scheduler_handle  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.profiles import Profile  # noqa: E402
from engine.requests import Request  # noqa: E402
from models.repository import ModelRepository  # noqa: E402
from sample_videos.render import RenderConfig, Renderer  # noqa: E402
from vigil.settings import MODELS_DIR  # noqa: E402

SESSION = "scenedet:2"
SLO_MS = 60_000.0  # the answers are checked here, not the speed: no frame may miss


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)
    return value


@pytest.fixture(scope="module")
def routed():
    with local_cluster(nodes=1, gpus_per_node=1) as (_, nodes):
        # no epoch in the module's time: a few test requests read as a rate near 0, and an
        # epoch would plan the session off its device
        scheduler = scheduler_handle(EpochPolicy(beacon_s=0.5, epoch_s=3600.0, min_epoch_s=3600.0))
        backend = start_backend(BackendConfig("e0", beacon_s=0.5, executor="engine", models_dir=str(MODELS_DIR)),
                                nodes[0].node_id)
        ray.get(scheduler.add_session.remote(Workload(SESSION, 5.0, SLO_MS, Profile.linear(20.0, 30.0, 8, "p", "cpu"))))
        router = Router(scheduler, "test-engine", refresh_s=0.1)
        wait_for(lambda: router.devices(SESSION), 30, "the session routed to the engine backend")
        wait_for(lambda: (r := ray.get(backend.report.remote())) and SESSION in r["sessions"] and not r["loading"],
                 300, "the table applied and its model loaded (profiled on a fresh clone)")
        try:
            yield router, backend
        finally:
            router.close()


def test_session_names_a_model_and_maybe_its_version():
    assert session_model("scenedet") == ("scenedet", None)
    assert session_model("scenedet:2") == ("scenedet", 2)
    for bad in ("", ":2", "scenedet:two"):
        with pytest.raises(ValueError, match="model name or name:version"):
            session_model(bad)


def test_backend_config_wants_a_repository_with_the_engine_and_only_then():
    with pytest.raises(ValueError, match="models_dir"):
        BackendConfig("e", executor="engine")
    with pytest.raises(ValueError, match="models_dir"):
        BackendConfig("e", models_dir="configs/models")
    with pytest.raises(ValueError, match="'sleep' or 'engine'"):
        BackendConfig("e", executor="gpu")


def test_frames_sent_through_the_router_come_back_with_the_engines_detections(routed):
    router, backend = routed
    frames = [f.image for _, f in zip(range(4), Renderer(RenderConfig(seed=9300)).frames(every=30))]
    futures = router.submit(SESSION, [(i, SLO_MS, image) for i, image in enumerate(frames)])
    replies = [f.result(timeout=300) for f in futures]
    assert [outcome for outcome, _ in replies] == ["ok"] * len(frames), replies
    with Engine(ModelRepository(MODELS_DIR), "cpu") as engine:
        engine.load("scenedet")
        here = [engine.submit(Request("t", "scenedet", image, engine.clock(), SLO_MS, 2)).result(120).detections
                for image in frames]
    assert sum(len(d) for d in here) > 0  # the frames have something to find
    for (_, result), mine in zip(replies, here):
        there = result.detections
        assert len(there) == len(mine)
        np.testing.assert_allclose(there.xyxy, mine.xyxy, atol=0.5)
        np.testing.assert_allclose(there.confidence, mine.confidence, atol=1e-3)
        assert there.class_id.tolist() == mine.class_id.tolist()
    report = ray.get(backend.report.remote())
    assert report["outcomes"].get("ok", 0) >= len(frames) and report["arrived"][SESSION] >= len(frames)


def test_a_request_that_cannot_make_its_deadline_is_dropped_and_one_for_another_session_is_not_here(routed):
    _, backend = routed
    image = np.zeros((360, 640, 3), np.uint8)
    late = ray.get(backend.submit.remote(SESSION, [(100, 0.001, image)]))
    assert late == [(100, "deadline", None)]
    stray = ray.get(backend.submit.remote("othermodel", [(101, 1000.0, image)]))
    assert stray == [(101, "not_here", None)]


def test_a_malformed_request_gets_an_error_and_the_device_stays_routed(routed):
    router, _ = routed
    router.refresh()
    assert router.devices(SESSION) == ("e0",)
    reply = router.submit(SESSION, [(200, 1000.0)])[0].result(timeout=60)  # no frame
    assert reply == ("error", None)
    assert router.devices(SESSION) == ("e0",) and router.outcomes["backend_lost"] == 0


class FakeEngine:
    """The engine's model verbs, recorded (a unit test of the table logic)."""

    def __init__(self, fail: set[str] = frozenset()) -> None:
        self.loaded: dict[str, set[int]] = {}
        self.calls: list[tuple] = []
        self.fail = set(fail)

    def versions(self, name: str) -> list[int]:
        return sorted(self.loaded.get(name, ()))

    def load(self, name: str, versions: list[int] | None = None) -> list[int]:
        self.calls.append(("load", name, versions))
        if name in self.fail:
            raise RuntimeError(f"{name}: no such model")
        self.loaded.setdefault(name, set()).update(versions or [1])
        return self.versions(name)

    def unload(self, name: str) -> list[int]:
        self.calls.append(("unload", name))
        return sorted(self.loaded.pop(name))


def table(*sessions: str) -> tuple[DevicePlan, dict[str, Workload]]:
    workloads = {s: Workload(s, 1.0, 1000.0, Profile.linear(1.0, 1.0, 4, "p", "cpu")) for s in sessions}
    plan = DevicePlan("d", 100.0, 10.0, tuple(Assignment(s, 1.0, 1) for s in sessions), 0.0)
    return plan, workloads


def test_tables_load_what_their_sessions_name_skip_bad_names_and_retry_failed_loads():
    backend = EngineBackend(BackendConfig("d", executor="engine", models_dir="unused"))
    backend.engine = FakeEngine(fail={"broken"})

    async def apply(version: int, *sessions: str) -> None:
        await backend.apply(version, *table(*sessions))

    asyncio.run(apply(1, "scenedet", "yolo:3", "yolo:three", "broken"))
    assert sorted(backend.sessions) == ["broken", "scenedet", "yolo:3"]  # the bad name is left out
    assert ("load", "scenedet", None) in backend.engine.calls and ("load", "yolo", [3]) in backend.engine.calls
    assert backend.loading == set()
    backend.engine.calls.clear()
    backend.engine.fail.clear()
    asyncio.run(apply(2, "scenedet:2", "broken"))
    # yolo is unloaded; scenedet's version 2 and the model whose load failed are loaded now
    assert backend.engine.calls == [("unload", "yolo"), ("load", "broken", None), ("load", "scenedet", [2])]
    asyncio.run(apply(1, "yolo"))  # an older table changes nothing
    assert sorted(backend.sessions) == ["broken", "scenedet:2"]
