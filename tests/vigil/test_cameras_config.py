"""Cameras declared in the server config (`cameras:`), as a user writes them: created
at start through the same services as the API (a bad one says what the API would, and
the others still come up), changed by POST /v1/config/reload and by SIGHUP."""

from __future__ import annotations

import signal

import httpx
import pytest
import yaml

from support.processes import VigilServer, wait_for


def config(clip, cameras: list[dict]) -> dict:
    return {"llm_model": None, "caption_every_s": 0, "cameras": cameras}


@pytest.fixture(scope="module")
def server(tmp_path_factory, short_clip):
    clip, _ = short_clip
    cameras = [
        {"name": "gate", "url": str(clip), "options": {"loop": True},
         "apps": ["people-counter-scenedet", {"name": "gate-cars", "detector": "scenedet", "classes": ["car"]}]},
        {"name": "yard", "url": str(clip), "options": {"loop": True},
         "apps": [{"name": "yard-motion", "detector": "motion"}]},
        {"name": "bad", "url": str(clip), "options": {"loop": True},
         "apps": [{"name": "bad-app", "detector": "nope"}, {"name": "bad-motion", "detector": "motion"}]},
    ]
    # its own: the cameras are its config
    srv = VigilServer(tmp_path_factory.mktemp("cameras") / "data", config=config(clip, cameras),
                      media_dirs=[clip.parent]).start()
    api = httpx.Client(base_url=srv.url, timeout=60)
    try:
        wait_for(lambda: api.get("/readyz").status_code == 200, 120, "ready")
        yield srv, api, clip
    finally:
        api.close()
        srv.stop()


def names(api, what: str) -> set[str]:
    return {x["name"] for x in api.get(f"/v1/{what}").json()}


def rewrite(srv, clip, cameras: list[dict]) -> None:
    data = yaml.safe_load(srv.config_path.read_text())
    data["cameras"] = cameras
    srv.config_path.write_text(yaml.safe_dump(data))


def test_declared_cameras_come_up_and_a_bad_app_says_what_the_api_would(server):
    srv, api, _ = server
    assert {"gate", "yard", "bad"} <= names(api, "streams")
    assert names(api, "apps") == {"gate-people-counter-scenedet", "gate-cars", "yard-motion",
                                  "bad-motion"}  # its twin ran
    assert api.get("/v1/apps/gate-people-counter-scenedet").json()["spec"]["source"] == "gate"
    api_says = api.post("/v1/apps", json={"name": "x", "source": "gate", "detector": "nope"}).json()["detail"]
    assert "nope" in api_says
    wait_for(lambda: f"cameras[2] (bad): apps[0] (bad-app): {api_says}" in srv.logs(), 10, "the bad app named")


def test_a_reload_applies_the_file_as_it_is_now_and_leaves_the_apis_own(server):
    srv, api, clip = server
    assert api.post("/v1/apps", json={"name": "mine", "source": "gate", "detector": "motion"}).status_code == 201
    rewrite(srv, clip, [
        {"name": "gate", "url": str(clip), "options": {"loop": True, "buffer_frames": 8},  # options changed
         "apps": ["people-counter-scenedet"]},  # gate-cars dropped
        {"name": "lot", "url": str(clip), "options": {"loop": True}, "apps": [{"name": "lot-motion",
                                                                               "detector": "motion"}]},
    ])  # yard and bad dropped
    r = api.post("/v1/config/reload")
    assert r.status_code == 200, r.text
    report = r.json()
    assert {"app gate-cars", "app yard-motion", "stream yard", "app bad-motion", "stream bad"} <= \
        set(report["removed"]), report
    assert {"stream lot", "app lot-motion"} <= set(report["added"]) and "stream gate" in report["changed"], report
    assert names(api, "apps") == {"gate-people-counter-scenedet", "lot-motion", "mine"}  # the API's app is back on gate
    assert api.get("/v1/streams/gate").json()["options"]["buffer_frames"] == 8
    assert "yard" not in names(api, "streams")


def test_a_broken_file_changes_nothing_and_sighup_reloads(server):
    srv, api, clip = server
    before = names(api, "apps")
    good = srv.config_path.read_text()
    srv.config_path.write_text(good + "\ncameras: [{name: lot}]\n")  # no url
    r = api.post("/v1/config/reload")
    assert r.status_code == 422 and "url" in r.json()["detail"], r.text
    assert names(api, "apps") == before
    data = yaml.safe_load(good)
    data["cameras"][0]["apps"].append({"name": "gate-motion", "detector": "motion"})
    srv.config_path.write_text(yaml.safe_dump(data))
    srv.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "gate-motion" in names(api, "apps"), 20, "SIGHUP to add gate-motion")
    assert srv.proc.poll() is None


def test_a_patched_stream_starts_again_with_its_apps(server, bundled_clips):
    srv, api, clip = server
    apps = {a for a in names(api, "apps") if api.get(f"/v1/apps/{a}").json()["spec"]["source"] == "gate"}
    assert apps
    r = api.patch("/v1/streams/gate", json={"url": str(bundled_clips[0]), "options": {"buffer_frames": 16}})
    assert r.status_code == 200, r.text
    assert r.json()["options"]["buffer_frames"] == 16 and r.json()["options"]["loop"] is True
    assert r.json()["url"].endswith(bundled_clips[0].name)
    assert {a for a in names(api, "apps") if api.get(f"/v1/apps/{a}").json()["spec"]["source"] == "gate"} == apps
    bad = api.patch("/v1/streams/gate", json={"options": {"buffer_frames": 0}})
    assert bad.status_code == 422 and "buffer_frames" in bad.text, bad.text
    assert api.get("/v1/streams/gate").json()["options"]["buffer_frames"] == 16  # nothing changed
    assert api.patch("/v1/streams/nope", json={}).status_code == 404
