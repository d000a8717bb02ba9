"""`vigil serve --cluster`, started as a user starts it: `ray start --head` (loopback,
one logical GPU), then `vigil serve --cluster ADDRESS`, which starts an engine backend
on the GPU. A file analysed in full through the cluster counts what `vigil run` counts
on it in this process, every frame answered, each frame's backbone run once for both
apps; the plan is in the API and on the dashboard (Chromium). Each stream decodes in an
ingest actor and its apps run in an app actor: both killed mid-file, each is restarted
and nothing is lost or counted twice."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest
from fastapi.testclient import TestClient
from playwright.sync_api import sync_playwright

from apps.spec import load_spec
from cluster.front import connect
from cluster.local import RayHead
from models.repository import ModelRepository
from runtime.offline import RunOptions, run_offline
from support.browser import ARGS, CHROMIUM
from support.processes import VigilServer, free_port, wait_for
from vigil.api import build_app
from vigil.service import Vigil
from vigil.settings import MODELS_DIR, Cluster, Settings

pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # a Ray head and `vigil serve --cluster`, or a server that waits out a bad address

APPS = ("people-counter-scenedet", "vehicle-counter-scenedet")  # two apps on one frame: the backbone runs once for both


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    from sample_videos.render import RenderConfig, write_clip

    out = tmp_path_factory.mktemp("clips") / "walk.mp4"
    write_clip(RenderConfig(seed=5, duration_s=6.0), out)  # people cross both lines
    return out


@pytest.fixture(scope="module")
def api(tmp_path_factory, clip):
    head = RayHead(tmp_path_factory.mktemp("ray")).start()
    server = None
    try:
        server = VigilServer(tmp_path_factory.mktemp("serve") / "data",
                             config={"llm_model": None, "recording": {"enabled": True}},
                             media_dirs=[clip.parent], extra=["--cluster", head.address]).start(timeout_s=180)
        with httpx.Client(base_url=server.url, timeout=180) as client:
            yield client
    finally:
        try:
            if server is not None:
                assert server.stop(), server.logs()[-3000:]
        finally:
            head.stop()


def test_a_file_through_the_cluster_counts_what_an_offline_run_counts(api, clip, tmp_path):
    r = api.post("/v1/streams", json={"name": "walk", "url": str(clip), "options": {"realtime": False}})
    assert r.status_code == 201, r.text
    for app in APPS:  # the first one loads SceneDet: it returns once the backend serves it
        r = api.post("/v1/apps", json={**load_spec(app).model_dump(mode="json"), "source": "walk"})
        assert r.status_code == 201, r.text
    wait_for(lambda: api.get("/v1/streams/walk").json()["status"] == "ended", 600, "the clip to end")
    here = run_offline(str(clip), [load_spec(app) for app in APPS], RunOptions(tmp_path, video=False))
    assert here["error"] is None
    completed = {}
    for app in APPS:
        m = wait_for(lambda: (m := api.get(f"/v1/apps/{app}/metrics").json())["completed"] > 0
                     and m["completed"] + m["skipped"] + sum(m["dropped"].values()) >= m["arrived"] and m,
                     120, f"every frame of {app} answered")
        assert m["dropped"] == {} and m["completed"] > 50, m
        completed[app] = m["completed"]
        counts = api.get(f"/v1/apps/{app}").json()["counts"]
        mine = here["apps"][app]
        assert counts["tracks"] == mine["tracks"], (app, counts, mine)
        assert {n: (c["in"], c["out"]) for n, c in counts["lines"].items()} == \
            {n: (c["in"], c["out"]) for n, c in mine["lines"].items()}, app
    people = api.get("/v1/apps/people-counter-scenedet").json()["counts"]["lines"]
    assert sum(c["in"] + c["out"] for c in people.values()) > 0  # the clip has crossings

    plan = api.get("/v1/cluster").json()
    (device, report), = plan["backend_reports"].items()
    assert device.endswith("-gpu0") and "scenedet:2" in report["sessions"]
    # every answer came from there; both apps' requests for a frame went as one group
    # with one input key, so each fragment ran once per frame, not once per app (an app
    # that skipped a static frame sent none)
    assert report["outcomes"].get("ok", 0) + report["outcomes"].get("late", 0) >= sum(completed.values())
    ran = {fragment: sum(int(b) * n for b, n in sizes.items()) for fragment, sizes in report["batches"].items()}
    assert ran and max(ran.values()) <= max(completed.values()), (ran, completed)


def _events(api, stream: str) -> list[tuple]:
    got = api.get("/v1/events", params={"stream": stream, "limit": 10_000}).json()["events"]
    return sorted((e["type"], e["t_ms"], e["track_id"], e.get("line") or e.get("zone") or "") for e in got)


def test_killed_ingest_and_app_actors_are_restarted_and_nothing_is_lost_or_counted_twice(api, clip, tmp_path):
    """Each stream decodes in an ingest actor and its apps run in an app actor, both
    away from the front door. Their processes are killed (SIGKILL) mid-file, one after
    the other: Ray restarts each, the file goes on after the last frame taken, the apps
    from their last block's checkpoint, and the tracks, line counts and stored events
    are those of an offline run on the file in this process."""
    import json
    import os
    import shutil
    import signal

    from vigil.settings import SAMPLES_DIR

    long_clip = clip.parent / "street_b.mp4"  # 30 s: long enough to kill two actors in turn
    shutil.copy(SAMPLES_DIR / "street_b.mp4", long_clip)
    spec = load_spec("people-counter-scenedet").model_copy(update={"name": "b-people"})
    r = api.post("/v1/streams", json={"name": "b", "url": str(long_clip), "options": {"realtime": False}})
    assert r.status_code == 201, r.text
    r = api.post("/v1/apps", json={**spec.model_dump(mode="json"), "source": "b"})
    assert r.status_code == 201, r.text
    actors = wait_for(lambda: (a := api.get("/v1/streams/b").json()["actors"])["ingest"].get("pid")
                      and a["apps"].get("pid") and a, 120, "both actors up")
    # two processes of their own (the server answers after both are killed)
    assert len({actors["ingest"]["pid"], actors["apps"]["pid"], os.getpid()}) == 3

    def completed() -> int:
        return api.get("/v1/apps/b-people/metrics").json()["completed"]

    wait_for(lambda: completed() >= 60, 120, "a fifth of the clip analysed")
    os.kill(actors["ingest"]["pid"], signal.SIGKILL)
    again = wait_for(lambda: (a := api.get("/v1/streams/b").json()["actors"])["ingest"].get("pid") not in
                     (None, actors["ingest"]["pid"]) and a, 120, "the ingest actor restarted")
    assert again["ingest"]["restarts"] >= 1
    done = completed()
    assert done < 400, "the clip ended before the app actor could be killed mid-file"
    wait_for(lambda: completed() >= done + 30, 120, "frames analysed after the restart")
    os.kill(actors["apps"]["pid"], signal.SIGKILL)
    wait_for(lambda: api.get("/v1/streams/b").json()["status"] == "ended", 600, "the clip to end")
    def answered() -> dict | None:
        m = api.get("/v1/apps/b-people/metrics").json()
        return m if m["arrived"] >= 450 and m["completed"] + m["skipped"] + sum(m["dropped"].values()) >= \
            m["arrived"] else None

    try:
        m = wait_for(answered, 120, "every frame of the clip sent and answered")
    except TimeoutError:
        pytest.fail(f"not every frame sent and answered: {api.get('/v1/apps/b-people/metrics').json()}, "
                    f"stream {api.get('/v1/streams/b').json()}")
    assert m["dropped"] == {}, m
    status = api.get("/v1/streams/b").json()
    assert status["actors"]["apps"]["restarts"] >= 1  # its calls found it lost, and went on

    here = run_offline(str(long_clip), [spec], RunOptions(tmp_path, video=False))
    assert here["error"] is None
    mine = here["apps"]["b-people"]
    # every frame analysed once: none lost, none analysed twice across the restarts
    assert m["arrived"] == m["completed"] + m["skipped"] == mine["frames"] == 450, m
    counts = api.get("/v1/apps/b-people").json()["counts"]
    assert counts["tracks"] == mine["tracks"] and counts["tracks"] > 10
    assert {n: (c["in"], c["out"]) for n, c in counts["lines"].items()} == \
        {n: (c["in"], c["out"]) for n, c in mine["lines"].items()}
    # and every event stored once. Which track an event names may differ from the
    # offline run's: the backend batches frames otherwise, and a batch's size moves a
    # detection's score in its last bits (1e-6), which can tip a tie between tracks
    served = _events(api, "b")
    assert len(set(served)) == len(served)
    offline = [json.loads(line) for line in open(here["outputs"]["events"])]
    assert Counter((e[0], e[3]) for e in served) == \
        Counter((e["type"], e.get("line") or e.get("zone") or "") for e in offline)
    # the ingest actor recorded the stream where the server cuts clips, across its restart
    clip_mp4 = api.get("/v1/streams/b/clip.mp4", params={"start_ms": 2000, "end_ms": 28000})
    assert clip_mp4.status_code == 200 and clip_mp4.content[4:8] == b"ftyp", clip_mp4.text[:300]


def test_the_plan_is_in_the_api_and_on_the_dashboard(api):
    plan = api.get("/v1/cluster").json()
    placed = {s["session"]: s for d in plan["devices"] for s in d["sessions"]}
    assert "scenedet:2" in placed and placed["scenedet:2"]["batch"] >= 1
    assert plan["history"] and plan["history"][-1]["devices_used"] >= 1
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page()
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{api.base_url}/dashboard")
            page.locator("#cluster-devices .session").first.wait_for(timeout=30_000)
            shown = page.locator("#cluster-devices").inner_text()
            assert "scenedet:2" in shown and plan["devices"][0]["device"] in shown
            assert "backends used" in page.locator("#cluster-plan").inner_text()
            assert errors == []
        finally:
            browser.close()


def test_a_server_without_a_cluster_says_so_and_a_bad_address_is_named(tmp_path):
    service = Vigil(Settings(data_dir=tmp_path, device="cpu", grpc_port=0, llm_model=None))
    try:
        reply = TestClient(build_app(service)).get("/v1/cluster")
        assert reply.status_code == 404 and "--cluster" in reply.json()["detail"]
    finally:
        service.close()
    for bad in ("http://head:6379", "head", "head:port", "a b:1"):
        with pytest.raises(ValueError, match="address"):
            Cluster(address=bad)
    nobody = f"127.0.0.1:{free_port()}"  # Ray would try to join it for ever
    with pytest.raises(ConnectionError, match=f"cluster {nobody}: no Ray head answers"):
        connect(nobody, ModelRepository(MODELS_DIR))
