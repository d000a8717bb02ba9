"""State that must not lie: labels set over the API survive loads, an app without its
model says so (and its card is red), restarts never reuse a run's times or ids, and a
bad spec stored by an older server does not stop the others."""

from __future__ import annotations

import json
import sqlite3

import httpx
import pytest

from support.processes import ROOT, VigilServer, wait_for


def test_a_label_set_over_the_api_survives_load_and_reload(api):
    assert api.put("/v1/models/scenedet/labels/stable", json={"version": 2}).status_code == 200
    try:
        for action in ("load", "reload"):
            r = api.post(f"/v1/models/scenedet/{action}")
            assert r.status_code == 200 and r.json()["labels"]["stable"] == 2, r.text
        assert api.get("/v1/models/scenedet").json()["labels"]["stable"] == 2
    finally:
        api.put("/v1/models/scenedet/labels/stable", json={"version": 1})


def test_apps_of_an_unloaded_model_are_degraded_and_their_cards_red(guarded, api):
    from playwright.sync_api import sync_playwright

    from support.browser import ARGS, CHROMIUM

    assert api.post("/v1/models/scenedet/unload").status_code == 200
    try:
        wait_for(lambda: api.get("/v1/apps/people").json()["status"] == "degraded", 30, "people degraded")
        app = api.get("/v1/apps/people").json()
        assert "not loaded" in app["error"]
        overview = {a["name"]: a["status"] for a in api.get("/v1/overview").json()["apps"]}
        assert overview["people"] == "degraded" and overview["moving"] == "running"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            page = browser.new_page()
            page.goto(f"{guarded.url}/dashboard")
            page.locator('.card[data-app="people"].bad').wait_for(timeout=15_000)
            assert "degraded" in page.locator('.card[data-app="people"] .pill').first.inner_text()
            # the other model's card, read in one go: red only for its own numbers, never for the unload
            moving = page.locator('.card[data-app="moving"]').evaluate(
                "c => ({cls: c.className.split(' '), att: c.querySelector('.att-1m').textContent,"
                " status: c.querySelector('h2 .pill').textContent})")
            assert moving["status"] == "running"
            if "bad" in moving["cls"]:
                assert moving["att"].endswith("%") and float(moving["att"][:-1]) < 90.0, moving
            browser.close()
        assert guarded.logs().count("app people on stream a is degraded") == 1  # said once, not per block
    finally:
        assert api.post("/v1/models/scenedet/load").status_code == 200
    wait_for(lambda: api.get("/v1/apps/people").json()["status"] == "running", 60, "people running again")


def _events(api, **params) -> list[dict]:
    out, after = [], 0
    while True:
        page = api.get("/v1/events", params={**params, "after_id": after, "limit": 1000}).json()
        out += page["events"]
        if page["next_after_id"] is None:
            return out
        after = page["next_after_id"]


@pytest.mark.slow
def test_a_restart_starts_a_new_run_whose_times_and_ids_never_mix_with_the_last(tmp_path):
    data = tmp_path / "data"
    clip = str(ROOT / "sample_videos" / "street_c.mp4")
    # its own: it stops the server and starts it again
    srv = VigilServer(data).start()
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as api:
            assert api.post("/v1/streams", json={"name": "f", "url": clip,
                                                 "options": {"realtime": False}}).status_code == 201
            assert api.post("/v1/apps", json={"name": "m", "source": "f", "detector": "motion"}).status_code == 201
            wait_for(lambda: api.get("/v1/streams/f").json()["status"] == "ended", 120, "the file played")
        assert srv.stop()
        # an app stored by an older server, before specs were bounded: it must not stop the rest
        bad = {"name": "old", "source": "f", "detector": "motion", "tracker": {"lost_track_s": float("inf")}}
        with sqlite3.connect(data / "vigil.db") as db:
            db.execute("INSERT INTO apps VALUES (?, ?, 0)", ("old", json.dumps(bad)))
        srv = VigilServer(data).start()
        with httpx.Client(base_url=srv.url, timeout=60) as api:
            wait_for(lambda: api.get("/v1/streams/f").json()["status"] == "ended", 120, "played again")
            events = _events(api, stream="f")
            assert api.get("/v1/apps/m").json()["status"] == "running"
            assert api.get("/v1/apps/old").status_code == 404
    finally:
        srv.stop()
    assert "stored app 'old'" in srv.logs() and "tracker.lost_track_s" in srv.logs()
    runs = {e["run"] for e in events}
    assert runs == {1, 2}
    first = [e["t_ms"] for e in events if e["run"] == 1]
    second = [e["t_ms"] for e in events if e["run"] == 2]
    assert min(second) > max(first)  # the second run's time goes on after the first
    starts = [(e["app"], e["run"], e["track_id"]) for e in events if e["type"] == "track_start"]
    assert len(starts) == len(set(starts)) and len(starts) > 4
