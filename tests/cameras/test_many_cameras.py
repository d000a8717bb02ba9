"""Several cameras on one shared model through the real pipeline (`vigil serve`, looping
files, the people counter on each): more frames than two cores can detect. How many
cameras that takes depends on the CPU: twelve offer about 170 frames a second, which
overloaded one machine and was served whole on a CPU 1.6 times as fast (and eight, 111
a second, were served whole on the first). So the count comes from the model's own
profile on this machine, as the server reports it: enough cameras to offer what the
lanes could run with no host work at all, which the served path, which also decodes and
tracks on the same cores, cannot reach. The highest-priority app keeps its SLO while
the others are shed, equal apps share the misses, an app with min_fps gives up rate
first, and the overload is visible in the API, in /metrics and in the log."""

from __future__ import annotations

import math
import re
import time

import httpx
import pytest

from support.processes import VigilServer, wait_for

pytestmark = pytest.mark.exclusive  # the overload it makes is measured against this machine's own profile

MIN_N, MAX_N = 12, 40
CLIP_FPS, HIGH_FPS = 15.0, 5.0
WINDOW_S = 30.0


def cameras_to_overload(model: dict, lanes: int) -> int:
    """Cameras whose frames a second reach what `lanes` lanes would run of the person
    path (backbone and person head) at its best batch size, by the loaded profile."""
    fragments = {f["name"]: f["profile"] for f in model["fragments"][str(max(model["loaded"]))]}
    backbone, head = fragments["backbone"], fragments["person_head"]
    best = max(b / (backbone["mean_ms"][k] + head["mean_ms"][k]) for k, b in enumerate(backbone["batch_sizes"]))
    device_fps = lanes * 1000.0 * best
    return max(MIN_N, min(MAX_N, 1 + math.ceil((device_fps - HIGH_FPS) / CLIP_FPS)))


def spec(i: int, n: int) -> dict:
    s = {"name": f"cam{i}", "source": f"cam{i}", "detector": "scenedet", "classes": ["person"], "slo_ms": 1000,
         "priority": 10 if i == 0 else 0}
    if i == 0:
        s["fps"] = HIGH_FPS  # the priority camera: a small share of what the shared model serves
    if i == n - 1:
        s["min_fps"] = 3.0  # the one that may give up rate
    return s


def clip(clips: list, i: int, n: int):
    """The equal cameras watch the same footage: equal loads (tracking and static-frame
    skipping cost what the scene asks, and scenes differ)."""
    return clips[1 % len(clips)] if 1 <= i <= n - 2 else clips[i % len(clips)]


@pytest.fixture(scope="module")
def measured(tmp_path_factory, bundled_clips):
    srv = VigilServer(tmp_path_factory.mktemp("many") / "data", config={"llm_model": None}).start()
    api = httpx.Client(base_url=srv.url, timeout=60)
    try:
        # Load (and, on a fresh clone, profile) SceneDet before any stream decodes: a
        # profile measured beside four decoders would be wrong, and would take the
        # first two minutes of the test.
        r = api.post("/v1/models/scenedet/load", json={}, timeout=600)
        assert r.status_code == 200 and r.json()["loaded"], r.text
        lanes = api.get("/v1/overview").json()["device"]["lanes"]
        n = cameras_to_overload(api.get("/v1/models/scenedet").json(), lanes)
        print(f"{n} cameras")
        for i in range(n):
            r = api.post("/v1/streams", json={"name": f"cam{i}", "url": str(clip(bundled_clips, i, n)),
                                              "options": {"loop": True}})
            assert r.status_code == 201, r.text
            assert api.post("/v1/apps", json=spec(i, n)).status_code == 201
        wait_for(lambda: all(api.get(f"/v1/apps/cam{i}/metrics").json()["completed"] > 10 for i in range(n)), 120,
                 "every app gets results")
        time.sleep(10)  # past the start, the governor has settled
        before = [api.get(f"/v1/apps/cam{i}/metrics").json() for i in range(n)]
        # the low camera's state through the window: overload is a state that comes and
        # goes with the load (hysteresis), so it is judged over the window, not at its end
        samples, end = [], time.monotonic() + WINDOW_S
        while time.monotonic() < end:
            m = api.get("/v1/apps/cam1/metrics").json()
            stream = {s["name"]: s for s in api.get("/v1/streams").json()}["cam1"]
            samples.append((m["load"]["overloaded"], m["latency_all_ms"]["p99"], stream["overloaded"]))
            time.sleep(2.0)
        after = [api.get(f"/v1/apps/cam{i}/metrics").json() for i in range(n)]
        streams = api.get("/v1/streams").json()
        metrics = api.get("/metrics").text
        yield before, after, streams, metrics, srv, samples, n
    finally:
        api.close()
        srv.stop()


def attainment(measured, i: int) -> float:
    before, after = measured[0][i], measured[1][i]
    return (after["within_slo"] - before["within_slo"]) / max(1, after["arrived"] - before["arrived"])


def test_the_high_priority_camera_keeps_its_slo(measured):
    before, after = measured[0], measured[1]
    offered = sum(a["arrived"] - b["arrived"] for a, b in zip(after, before)) / WINDOW_S
    served = sum(a["within_slo"] - b["within_slo"] for a, b in zip(after, before)) / WINDOW_S
    print(f"offered {offered:.1f} frames/s, served in SLO {served:.1f}")
    assert served < 0.9 * offered, (served, offered)  # overloaded indeed: the test means something
    n = measured[6]
    everyone = [attainment(measured, i) for i in range(n)]
    # (at least 0.95 on an idle machine, 0.83 with a third of it taken by another process,
    # 0.79-0.88 with the server held to 0.85 of a core, and 0.79 in a CI run whose machine
    # served 20 of the 168 frames/s offered; the old scheduler starved it: under 5 results
    # in 5 minutes). How high it stays on a starved machine is issue 14's bench figure;
    # here, that it is served first, well above the others:
    assert everyone[0] >= 0.75, everyone
    # the lower priorities are shed first: the priority camera misses at most half the
    # share the lower ones miss on average (how much they miss depends on the machine)
    low = sum(everyone[1:]) / (n - 1)
    assert 1 - everyone[0] <= 0.5 * (1 - low), everyone


def test_equal_cameras_share_the_misses(measured):
    equal = [attainment(measured, i) for i in range(1, measured[6] - 1)]  # priority 0, no min_fps, one clip
    assert max(equal) - min(equal) <= 0.1, equal


def test_the_camera_with_min_fps_gives_up_rate(measured):
    n = measured[6]
    load = measured[1][n - 1]["load"]
    assert load["overloaded"] and load["rate_fps"] < load["full_fps"], load
    assert load["rate_fps"] >= 3.0
    rate_shed = re.search(rf'^vigil_app_shed_total{{app="cam{n - 1}",reason="rate"}} (\S+)$', measured[3], re.M)
    assert rate_shed and float(rate_shed.group(1)) > 0


def test_the_overload_is_visible(measured):
    before, after, streams, metrics, srv, samples, _ = measured
    low = after[1]
    print("cam1:", low["load"], low["latency_ms"], low["latency_all_ms"], "through the window:", samples)
    most = len(samples) / 2
    assert sum(app for app, _, _ in samples) >= most, samples  # overloaded most of the window
    assert sum(p99 == "inf" for _, p99, _ in samples) >= most, samples  # its drops count as misses ...
    assert low["latency_ms"]["p50"] <= 1000 * 1.5  # ... where the completed-only figure looks fine
    assert re.search(r'^vigil_app_shed_total\{app="cam1",reason="deadline"\} [1-9]', metrics, re.M), \
        [m for m in metrics.splitlines() if "shed" in m]
    assert sum(stream for _, _, stream in samples) >= most, samples  # the stream shows it too
    wait_for(lambda: "app cam1 is overloaded" in srv.logs(), 15, "the log saying cam1 is overloaded")
