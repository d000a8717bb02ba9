"""REST flows against a real `vigil serve` (uvicorn on a loopback port, SQLite file)."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from support.processes import ROOT, RtspServer, VigilServer, free_port, run_command, wait_for
from tools.docs.metrics_page import metrics_page, scraped_name


def test_health_ready_docs_and_openapi(api):
    assert api.get("/healthz").json() == {"status": "ok"}
    wait_for(lambda: api.get("/readyz").status_code == 200, 60, "ready")
    assert api.get("/docs").status_code == 200
    paths = api.get("/openapi.json").json()["paths"]
    for path in ("/v1/streams", "/v1/streams/{name}", "/v1/apps", "/v1/apps/{name}", "/v1/apps/{name}/metrics",
                 "/v1/models", "/v1/events", "/metrics"):
        assert path in paths


def test_app_metrics_have_the_documented_shape(api):
    m = api.get("/v1/apps/people/metrics").json()
    assert m["slo_ms"] == 1500
    assert 0.0 <= m["slo_attainment"] <= 1.0
    assert set(m["latency_ms"]) == {"p50", "p95", "p99"} and m["latency_ms"]["p50"] > 0
    assert m["throughput_fps"] > 0
    assert isinstance(m["dropped"], dict)
    assert any(k.startswith("scenedet/") for k in m["batch_size"])


def test_stream_crud_and_client_mistakes(api, short_clip):
    clip, _ = short_clip
    r = api.post("/v1/streams", json={"name": "clip", "url": str(clip), "options": {"realtime": False}})
    assert r.status_code == 201
    assert api.post("/v1/streams", json={"name": "clip", "url": str(clip)}).status_code == 409
    for body, field, status in [({"name": "Bad Name", "url": str(clip)}, "name", 422),
                                ({"name": "x1", "url": "/no/such.mp4"}, "url", 404),
                                ({"name": "x2", "url": str(clip), "warp": 9}, "warp", 422),
                                ({"name": "x5", "url": str(clip), "loop": True}, "options", 422),
                                ({"name": "x3", "url": str(clip), "options": {"buffer_frames": 0}}, "buffer_frames",
                                 422),
                                ({"name": "x4"}, "url", 422)]:
        r = api.post("/v1/streams", json=body)
        assert r.status_code == status, (body, r.text)
        assert field in r.text
    assert api.get("/v1/streams/nope").status_code == 404
    names = [s["name"] for s in api.get("/v1/streams").json()]
    assert {"street", "clip"} <= set(names)
    # a file analysed in full waits for its first app: without one it never starts
    time.sleep(1.0)
    # its buffer's worth (32 frames), and the one waiting for room
    assert api.get("/v1/streams/clip").json()["frames_decoded"] <= 33
    r = api.post("/v1/apps", json={"name": "clip-motion", "source": "clip", "detector": "motion"})
    assert r.status_code == 201, r.text
    wait_for(lambda: api.get("/v1/streams/clip").json()["status"] == "ended", 30, "a file ends")
    assert api.get("/v1/apps/clip-motion/metrics").json()["arrived"] == api.get("/v1/streams/clip").json()[
        "frames_decoded"]
    assert api.delete("/v1/apps/clip-motion").status_code == 204
    assert api.delete("/v1/streams/clip").status_code == 204
    assert api.get("/v1/streams/clip").status_code == 404
    assert api.delete("/v1/streams/clip").status_code == 404


def test_app_lifecycle_yaml_patch_and_errors(api):
    spec = yaml.safe_load((ROOT / "apps/builtin/motion.yaml").read_text())
    spec.update(name="motion-a", source="street")
    r = api.post("/v1/apps", content=yaml.safe_dump(spec), headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    assert api.post("/v1/apps", json=spec).status_code == 409
    wait_for(lambda: api.get("/v1/apps/motion-a").json()["status"] == "running", 30, "motion app running")
    r = api.patch("/v1/apps/motion-a", json={"slo_ms": 250, "priority": 3})
    assert r.status_code == 200 and r.json()["spec"]["slo_ms"] == 250
    assert api.get("/v1/apps/motion-a/metrics").json()["slo_ms"] == 250
    r = api.patch("/v1/apps/motion-a", json={"detector": "scenedet"})
    assert r.status_code == 422 and "detector" in r.text
    r = api.patch("/v1/apps/motion-a", json={"slo_ms": -5})
    assert r.status_code == 422 and "slo_ms" in r.text
    assert api.delete("/v1/streams/street").status_code == 409  # apps use it
    assert api.delete("/v1/apps/motion-a").status_code == 204
    assert api.get("/v1/apps/motion-a").status_code == 404


@pytest.mark.parametrize("spec,field,status", [
    ({"name": "a1", "source": "street", "slo_ms": -5}, "slo_ms", 422),
    ({"name": "a2", "source": "street", "detector": "nosuchmodel"}, "detector", 404),  # names nothing there
    ({"name": "a3", "source": "street", "classes": ["dragon"]}, "classes", 422),
    ({"name": "a4", "source": "nostream"}, "source", 404),
    ({"name": "a5", "source": "street", "lines": {"l": [[0, 0], [2, 2]]}}, "lines", 422),
    ({"name": "a6", "source": "street", "colour": "red"}, "colour", 422),
    (["not", "a", "mapping"], "mapping", 422),
])
def test_malformed_app_specs_name_the_field(api, spec, field, status):
    r = api.post("/v1/apps", json=spec)
    assert r.status_code == status, r.text
    assert field in r.json()["detail"]


def test_bad_bodies_are_client_errors(api):
    r = api.post("/v1/apps", content=b"{nope", headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and "JSON" in r.text
    r = api.post("/v1/apps", content=b"a: [", headers={"Content-Type": "application/yaml"})
    assert r.status_code == 422 and "YAML" in r.text
    r = api.post("/v1/apps", content=b"x" * (2 << 20), headers={"Content-Type": "application/json"})
    assert r.status_code == 413


def test_events_filter_and_page(api):
    wait_for(lambda: len(api.get("/v1/events", params={"app": "people"}).json()["events"]) >= 6, 60, "events")
    page1 = api.get("/v1/events", params={"app": "people", "limit": 3}).json()
    assert len(page1["events"]) == 3 and page1["next_after_id"] == page1["events"][-1]["id"]
    page2 = api.get("/v1/events", params={"app": "people", "limit": 3, "after_id": page1["next_after_id"]}).json()
    assert page2["events"][0]["id"] > page1["events"][-1]["id"]
    newest = api.get("/v1/events", params={"app": "people", "limit": 3, "order": "desc"}).json()
    ids = [e["id"] for e in newest["events"]]
    assert ids == sorted(ids, reverse=True) and newest["next_before_id"] == ids[-1] and newest["next_after_id"] is None
    older = api.get("/v1/events", params={"app": "people", "limit": 3, "order": "desc", "before_id": ids[-1]}).json()
    assert older["events"] and all(e["id"] < ids[-1] for e in older["events"])
    starts = api.get("/v1/events", params={"type": "track_start", "limit": 1000}).json()["events"]
    assert starts and all(e["type"] == "track_start" for e in starts)
    assert api.get("/v1/events", params={"type": "explosion"}).status_code == 422
    t = starts[0]["t_ms"]
    window = api.get("/v1/events", params={"since_ms": t, "until_ms": t + 1, "limit": 1000}).json()["events"]
    assert window and all(t <= e["t_ms"] < t + 1 for e in window)


def test_models_list_label_and_status(api):
    models = {m["id"]: m for m in api.get("/v1/models").json()["data"]}
    assert models["scenedet"]["versions_on_disk"] == [1, 2] and 2 in models["scenedet"]["loaded"]
    backbone = next(f for f in models["scenedet"]["fragments"]["2"] if f["name"] == "backbone")
    assert backbone["profile"]["batch_sizes"] and all(ms > 0 for ms in backbone["profile"]["mean_ms"])
    r = api.put("/v1/models/scenedet/labels/canary", json={"version": 1})
    assert r.status_code == 200 and r.json()["labels"]["canary"] == 1
    assert api.put("/v1/models/scenedet/labels/canary", json={"version": 99}).status_code == 409
    assert api.put("/v1/models/scenedet/labels/canary", json={"version": "x"}).status_code == 422
    assert api.post("/v1/models/nosuch/load").status_code == 404
    api.put("/v1/models/scenedet/labels/canary", json={"version": 2})


def test_prometheus_metrics_and_latest_frame(api):
    text = api.get("/metrics").text
    assert 'vigil_app_slo_attainment{app="people",window="1m"}' in text
    assert 'vigil_stream_status{status="live",stream="street"} 1.0' in text
    for counter in ("decoded", "skipped", "not_decoded"):
        assert f'vigil_stream_frames_{counter}_total{{stream="street"}}' in text
    assert "vigil_requests_arrived_total" in text and "vigil_batch_size_bucket" in text
    served = set(re.findall(r"^# TYPE (\w+) (\w+)$", text, re.M))
    assert len(served) > 30
    documented = metrics_page()  # docs/reference/metrics.md
    for name, kind in served:
        if name.endswith("_created"):  # prometheus_client's creation time of each counter and histogram
            continue
        shown = name if kind == "counter" else scraped_name(name, kind)  # a counter's TYPE line has its _total
        assert f"`{shown}`" in documented, f"{name} ({kind}) is served but not documented"
    r = api.get("/v1/apps/people/frame.jpg")
    assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg" and r.content[:2] == b"\xff\xd8"


def test_broken_sources_get_a_status_and_disturb_nothing_else(api, short_clip, bundled_clips):
    bad = short_clip[0].parent / "corrupt.mp4"  # a media folder of the server
    bad.write_bytes(bundled_clips[0].read_bytes()[:20000])
    before = api.get("/v1/apps/people/metrics").json()["completed"]
    assert api.post("/v1/streams", json={"name": "corrupt", "url": str(bad)}).status_code == 201
    dead = f"rtsp://admin:hunter2@127.0.0.1:{free_port()}/cam"
    r = api.post("/v1/streams", json={"name": "dead", "url": dead,
                                      "options": {"backoff_initial_s": 0.2, "backoff_max_s": 1}})
    assert r.status_code == 201 and "hunter2" not in r.text
    wait_for(lambda: api.get("/v1/streams/corrupt").json()["status"] == "failed", 30, "corrupt file failed")
    assert "corrupt.mp4" in api.get("/v1/streams/corrupt").json()["last_error"]
    wait_for(lambda: api.get("/v1/streams/dead").json()["reconnects"] >= 1, 30, "dead camera retried")
    dead_status = api.get("/v1/streams/dead").json()
    assert dead_status["status"] == "reconnecting" and dead_status["url"].startswith("rtsp://***@")
    wait_for(lambda: api.get("/v1/apps/people/metrics").json()["completed"] > before + 20, 60,
             "the people app goes on")
    assert api.get("/v1/streams/street").json()["status"] == "live"
    for name in ("corrupt", "dead"):
        assert api.delete(f"/v1/streams/{name}").status_code == 204


def test_the_server_runs_under_jemalloc_when_it_is_installed(server):
    from vigil.allocator import find_jemalloc

    if find_jemalloc() is None:  # `make test` installs it (libjemalloc2)
        pytest.skip("libjemalloc.so.2 is not installed")
    assert "libjemalloc" in Path(f"/proc/{server.proc.pid}/maps").read_text()
    environ = Path(f"/proc/{server.proc.pid}/environ").read_bytes().split(b"\0")
    assert b"MALLOC_CONF=oversize_threshold:0" in environ


def test_cli_talks_to_the_api(server):
    out = run_command([sys.executable, "-m", "cli", "streams", "list", "--json", "--url", server.url], 60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "street" in [s["name"] for s in json.loads(out.stdout)]
    out = run_command([sys.executable, "-m", "cli", "apps", "get", "nosuch", "--url", server.url], 60, cwd=ROOT)
    assert out.returncode == 1 and "404" in out.stderr


def test_the_documented_streams_add_registers_the_callers_file(server, tmp_path):
    """`vigil streams add lobby sample_videos/street_a.mp4` from the project folder, as the
    docs have it: the positional url is the camera (not the server's --url), and the
    relative path is the caller's, sent absolute."""
    out = run_command([sys.executable, "-m", "cli", "streams", "add", "readme-lobby", "sample_videos/street_a.mp4",
                       "--options", '{"loop": false}', "--url", server.url], 60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    try:
        assert json.loads(out.stdout)["url"] == str(ROOT / "sample_videos" / "street_a.mp4")
    finally:
        httpx.delete(f"{server.url}/v1/streams/readme-lobby", timeout=30)


@pytest.mark.slow
def test_restart_brings_back_streams_and_apps_and_flushes_events(tmp_path, bundled_clips):
    # its own: it stops the server and starts it again
    srv = VigilServer(tmp_path / "data").start()
    camera = RtspServer(bundled_clips[1]).start()
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as api:
            assert api.post("/v1/streams", json={"name": "cam", "url": camera.url}).status_code == 201
            spec = yaml.safe_load((ROOT / "apps/builtin/motion.yaml").read_text())
            spec.update(name="moving", source="cam")
            assert api.post("/v1/apps", json=spec).status_code == 201
            assert api.put("/v1/models/scenedet/labels/canary", json={"version": 1}).status_code == 200
            wait_for(lambda: api.get("/v1/apps/moving/metrics").json()["completed"] > 30, 60, "motion results")
        assert srv.stop()
        events = _stored_events(tmp_path / "data" / "vigil.db", "moving")
        starts, ends = events.count("track_start"), events.count("track_end")
        assert starts > 0 and starts == ends  # graceful: every open track was ended and stored
        srv = VigilServer(tmp_path / "data").start()
        with httpx.Client(base_url=srv.url, timeout=60) as api:
            wait_for(lambda: api.get("/readyz").status_code == 200, 60, "restored")
            assert [s["name"] for s in api.get("/v1/streams").json()] == ["cam"]
            wait_for(lambda: api.get("/v1/apps/moving").json()["status"] == "running", 60, "app back")
            wait_for(lambda: api.get("/v1/apps/moving/metrics").json()["completed"] > 10, 60, "results again")
            wait_for(lambda: api.get("/v1/models/scenedet").json()["labels"].get("canary") == 1, 60,
                     "label restored")
    finally:
        srv.stop()
        camera.stop()


def _stored_events(db, app: str) -> list[str]:
    import sqlite3

    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT type FROM events WHERE app = ?", (app,))]


@pytest.mark.slow
def test_auth_guards_mutations_and_keys_never_reach_the_logs(tmp_path, short_clip):
    clip, _ = short_clip
    # its own: API keys are the whole server's (the shared one runs without)
    srv = VigilServer(tmp_path / "data", api_keys="k1-topsecret,k2-topsecret", media_dirs=[clip.parent]).start()
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as api:
            body = {"name": "c", "url": str(clip)}
            r = api.post("/v1/streams", json=body)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            assert api.post("/v1/streams", json=body, headers={"Authorization": "Bearer nope"}).status_code == 401
            assert api.post("/v1/streams", json=body,
                            headers={"Authorization": "Bearer k2-topsecret"}).status_code == 201
            assert api.get("/v1/streams").status_code == 200  # reading needs no key
            assert api.delete("/v1/streams/c").status_code == 401
            assert api.delete("/v1/streams/c", headers={"Authorization": "Bearer k1-topsecret"}).status_code == 204
    finally:
        srv.stop()
    assert "topsecret" not in srv.logs()


def test_grafana_dashboard_queries_series_the_server_exports(api):
    import re

    text = api.get("/metrics").text
    exported = set()
    for line in text.splitlines():  # '# TYPE name kind', also for series with no samples yet
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            exported |= {name, f"{name}_total"} if kind == "counter" else {name}
            if kind == "histogram":
                exported |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    dashboard = json.loads((ROOT / "configs/grafana/vigil-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    names = {n for e in exprs for n in re.findall(r"\b(vigil_[a-z_]+)", e)}
    missing = sorted(n for n in names if n not in exported)
    assert not missing, f"the Grafana dashboard queries series nobody exports: {missing}"
