"""The hardening suite: `vigil serve` attacked the way a hostile client, a careless
integrator and a broken camera would, each attack watched from outside
(tests/support/watch.py).

One guarded server is shared by the suite, as the attacks were first tried: loopback,
API keys set, two looping file streams, three apps (two on the detector, one motion),
captions on. Tests that need a server of their own (restarts, a full disk, the fd
limit, a taken port) start one. Its RSS is followed from the moment it is warm to its
stop: every attack together, watched or not, may add at most MAX_SERVER_GROWTH_MB.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from support.processes import ROOT, VigilServer, wait_for
from support.watch import APPS, AUTH, KEY, LIMITS, WATCHED, Peak, rss_peak

PEAKS: list[Peak] = []  # the guarded server's, once its session is over


def pytest_terminal_summary(terminalreporter):
    """What the server did during each watched attack: RSS over its baseline, the
    slowest /healthz, and how often /healthz was asked again on a new connection; and
    the guarded server's largest rise in RSS over the whole suite."""
    for p in PEAKS:
        terminalreporter.section("guarded server's RSS")
        terminalreporter.write_line(f"{p.growth_mb:+7.0f} MB RSS at its largest rise, from {p.baseline_mb:.0f} to "
                                    f"{p.peak_mb:.0f} MB ({p.samples} samples), at its top during {p.peak_test}")
        terminalreporter.write_line(f"{p.rise_mb:+7.0f} MB RSS, the most any test added, during {p.rise_test}")
    if WATCHED:
        terminalreporter.section("attacks watched")
        for test, w in WATCHED:
            terminalreporter.write_line(f"{w.growth_mb:+7.0f} MB RSS (baseline {w.baseline_mb:.0f}), slowest /healthz "
                                        f"{w.slowest_health_s * 1000:5.0f} ms, {w.samples:4d} samples, "
                                        f"{w.retries} asked again: {test}")

@pytest.fixture(scope="session")
def media(tmp_path_factory) -> Path:
    """A media folder beside sample_videos/, holding a text file that is not a video."""
    folder = tmp_path_factory.mktemp("media")
    (folder / "notes.nfo").write_text("router password: hunter2-nfo\n" * 40)
    return folder


@pytest.fixture(scope="session")
def guarded(tmp_path_factory, media) -> VigilServer:
    srv = VigilServer(tmp_path_factory.mktemp("guarded") / "data", api_keys=KEY, config={"limits": LIMITS},
                      media_dirs=[media]).start()
    try:  # a setup that fails stops the server it started (else it runs on past the session)
        with httpx.Client(base_url=srv.url, timeout=60, headers=AUTH) as api:
            wait_for(lambda: api.get("/readyz").status_code == 200, 120, "ready (the LLM loaded)")
            for name, clip in (("a", "street_a.mp4"), ("b", "street_b.mp4")):
                r = api.post("/v1/streams", json={"name": name, "url": str(ROOT / "sample_videos" / clip),
                                                  "options": {"loop": True}})
                assert r.status_code == 201, r.text
            for spec in APPS:
                assert api.post("/v1/apps", json=spec).status_code == 201
            wait_for(lambda: all(api.get(f"/v1/apps/{a['name']}/metrics").json()["completed"] > 10
                                 for a in APPS), 120, "every app has results")
    except BaseException:
        srv.stop()
        raise
    with rss_peak(srv) as peak:  # from here it is warm: the LLM loaded, every app has results
        yield srv
    stopped = srv.stop()
    PEAKS.append(peak)
    peak.held()
    assert stopped, srv.logs()[-3000:]


@pytest.fixture
def api(guarded):
    with httpx.Client(base_url=guarded.url, timeout=60, headers=AUTH) as client:
        yield client


@pytest.fixture
def anon(guarded):
    """A client without a key."""
    with httpx.Client(base_url=guarded.url, timeout=60) as client:
        yield client
