"""No silent garbage: an app whose model was trained on the synthetic range only says so
on any other footage (at start, in its status, on its dashboard card, in `vigil run`'s
table), and an app whose model reports a crowd no scene holds says that too; on the
range's own clips neither is said."""

from __future__ import annotations

import pytest

from apps.spec import load_spec
from runtime.offline import RunOptions, run_offline
from support.footage import need_vtest
from support.processes import RtspServer, wait_for
from vigil.report import format_table

pytestmark = pytest.mark.slow

SYNTHETIC = "trained on the synthetic range's renders only"


def test_scenedet_on_real_footage_warns_and_on_the_range_does_not(tmp_path, bundled_clips):
    vtest = need_vtest()
    specs = [load_spec("people-counter-scenedet"), load_spec("motion")]
    real = run_offline(str(vtest), specs, RunOptions(tmp_path / "real", video=False, max_frames=64, device="cpu"))
    said = real["apps"]["people-counter-scenedet"]["warnings"]
    assert any(SYNTHETIC in w for w in said), said
    # SceneDet finds people all over vtest.avi's grass and paving
    assert any("person a frame" in w and "does not fit this footage" in w for w in said), said
    assert real["apps"]["motion"]["warnings"] == []  # a host detector claims no domain
    assert f"WARNING people-counter-scenedet: scenedet was {SYNTHETIC}" in format_table(real)
    ranged = run_offline(str(bundled_clips[0]), specs[:1], RunOptions(tmp_path / "range", video=False, max_frames=64,
                                                                       device="cpu"))
    assert ranged["apps"]["people-counter-scenedet"]["warnings"] == []


def test_the_same_app_on_an_rtsp_camera_warns_in_its_status_and_card(api, bundled_clips):
    camera = RtspServer(bundled_clips[0]).start()  # the range's own pixels, but a camera: nothing says so
    try:
        assert api.post("/v1/streams", json={"name": "warned-cam", "url": camera.url}).status_code == 201
        spec = {"name": "warned-people", "source": "warned-cam", "detector": "scenedet", "classes": ["person"]}
        assert api.post("/v1/apps", json=spec).status_code == 201
        wait_for(lambda: SYNTHETIC in (api.get("/v1/apps/warned-people").json()["warning"] or ""), 90,
                 "the app's warning")
        card = next(c for c in api.get("/v1/overview").json()["apps"] if c["name"] == "warned-people")
        assert SYNTHETIC in card["warning"]
        # the shared server's app on a bundled clip of the range says nothing of it
        assert SYNTHETIC not in (api.get("/v1/apps/people").json()["warning"] or "")
    finally:
        api.delete("/v1/apps/warned-people")
        api.delete("/v1/streams/warned-cam")
        camera.stop()
