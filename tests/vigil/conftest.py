from __future__ import annotations

import httpx
import pytest

from support.processes import VigilServer, wait_for


@pytest.fixture(scope="session")
def server(tmp_path_factory, bundled_clips, short_clip):
    """One `vigil serve` (auth off, snapshots and recording on) with a looping file
    stream and the people counter on it, shared by the REST, gRPC, dashboard and fuzz
    tests. File streams may come from sample_videos/ and the folder of the rendered
    short clip."""
    config = {"snapshots": {"enabled": True}, "recording": {"enabled": True, "segment_s": 2}}
    srv = VigilServer(tmp_path_factory.mktemp("serve") / "data", config=config,
                      media_dirs=[short_clip[0].parent]).start()
    api = httpx.Client(base_url=srv.url, timeout=60)
    try:  # a setup that fails stops the server it started (else it runs on past the session)
        r = api.post("/v1/streams", json={"name": "street", "url": str(bundled_clips[0]), "options": {"loop": True}})
        assert r.status_code == 201, r.text
        spec = {"name": "people", "source": "street", "detector": "scenedet", "classes": ["person"],
                "slo_ms": 1500, "lines": {"midblock": [[0.62, 0.97], [0.62, 0.27]]}}
        r = api.post("/v1/apps", json=spec)
        assert r.status_code == 201, r.text
        wait_for(lambda: api.get("/v1/apps/people/metrics").json()["completed"] > 20, 120, "people app results")
    except BaseException:
        api.close()
        srv.stop()
        raise
    yield srv
    api.close()
    assert srv.stop(), srv.logs()[-3000:]


@pytest.fixture
def api(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client
