"""Numbers from a user are finite and bounded: in app specs, their live changes and
stream options. (An `fps: Infinity` once spun the sampler forever, a
`lost_track_s: Infinity` killed the stream's worker, a NaN backoff reconnected
28,854 times in 5 s.)"""

from __future__ import annotations

import json

import pytest

from support.watch import still_serving, watch

JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize("patch,field", [
    ({"fps": float("inf")}, "fps"), ({"fps": 1e9}, "fps"), ({"fps": float("nan")}, "fps"),
    ({"slo_ms": float("inf")}, "slo_ms"), ({"min_confidence": float("nan")}, "min_confidence"),
    ({"tracker": {"lost_track_s": float("inf")}}, "tracker.lost_track_s"),
    ({"tracker": {"lost_track_s": 1e6}}, "tracker.lost_track_s"),
    ({"skip_static": {"max_skip_s": float("inf")}}, "skip_static.max_skip_s"),
    ({"lines": {"l": [[0.1, float("nan")], [0.5, 0.5]]}}, "lines.l"),
    ({"detector": "motion", "detector_options": {"threshold": float("inf")}}, "detector_options"),
    ({"priority": True}, "priority"), ({"fps": "5"}, "fps"),
])
def test_app_specs_refuse_numbers_out_of_bounds(api, patch, field):
    spec = {"name": "bad", "source": "a", "detector": "scenedet", **patch}
    r = api.post("/v1/apps", content=json.dumps(spec), headers=JSON)
    assert r.status_code == 422 and field in r.json()["detail"], r.text
    assert api.get("/v1/apps/bad").status_code == 404


@pytest.mark.parametrize("patch,field", [({"fps": float("inf")}, "fps"), ({"fps": 1e9}, "fps"),
                                         ({"slo_ms": -1}, "slo_ms"), ({"priority": 11}, "priority")])
def test_live_changes_refuse_them_too(guarded, api, patch, field):
    with watch(guarded) as w:
        r = api.patch("/v1/apps/people", content=json.dumps(patch), headers=JSON)
    assert r.status_code == 422 and field in r.json()["detail"], r.text
    assert api.get("/v1/apps/people").json()["spec"]["fps"] == 5  # unchanged
    w.held()


@pytest.mark.parametrize("options,field", [
    ({"backoff_initial_s": float("nan")}, "backoff_initial_s"), ({"backoff_max_s": float("inf")}, "backoff_max_s"),
    ({"open_timeout_s": 1e9}, "open_timeout_s"), ({"buffer_frames": 10**9}, "buffer_frames"),
    ({"max_reconnects": -1}, "max_reconnects"), ({"loop": "yes"}, "loop"), ({"buffer_frames": True}, "buffer_frames"),
])
def test_stream_options_refuse_them(api, options, field):
    body = {"name": "bad", "url": "sample_videos/street_c.mp4", "options": options}
    r = api.post("/v1/streams", content=json.dumps(body), headers=JSON)
    assert r.status_code == 422 and field in r.json()["detail"], r.text
    assert api.get("/v1/streams/bad").status_code == 404


def test_synthetic_urls_are_bounded(api):
    for query in ("size=100000x100000", "fps=1e9", "duration=inf", "density=nan"):
        r = api.post("/v1/streams", json={"name": "synth", "url": f"synthetic://street?{query}"})
        if r.status_code == 201:  # accepted as a URL; the renderer refuses it and the stream fails
            from support.processes import wait_for

            wait_for(lambda: api.get("/v1/streams/synth").json()["status"] == "failed", 30, "failed")
            assert "must be" in api.get("/v1/streams/synth").json()["last_error"]
            assert api.delete("/v1/streams/synth").status_code == 204
        else:
            assert r.status_code == 422, r.text


def test_the_server_is_fine_after_all_of_them(guarded):
    still_serving(guarded)
