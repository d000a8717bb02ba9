"""Soak: `vigil serve` with two RTSP cameras (GStreamer's RTSP server) and one file,
three apps, for N minutes; one camera is killed for 10 s half-way and restarted.

Reports the server's RSS after warm-up and at the end (growth as a ratio), each
stream's status, reconnects and gaps, the time the killed camera took to be live again,
and each app's SLO attainment as the API and /metrics report it.

    python -m bench.soak [--minutes 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx

from vigil.settings import ROOT, SAMPLES_DIR

sys.path.insert(0, str(ROOT / "tests"))

from support.processes import RtspServer, VigilServer, wait_for  # noqa: E402
from support.watch import rss_mb  # noqa: E402
from vigil.report import print_json  # noqa: E402


def run(minutes: float, log=print) -> dict:
    clips = sorted(SAMPLES_DIR.glob("*.mp4"))
    cams = [RtspServer(clips[0], mount="north").start(), RtspServer(clips[1], mount="south").start()]
    data = Path(tempfile.mkdtemp(prefix="vigil-soak-")) / "data"
    srv = VigilServer(data).start()
    api = httpx.Client(base_url=srv.url, timeout=60)
    out: dict = {"minutes": minutes}
    try:
        for name, url, opts in (("cam-north", cams[0].url, {"backoff_max_s": 5.0}),
                                ("cam-south", cams[1].url, {"backoff_max_s": 5.0}),
                                ("file", str(clips[2]), {"loop": True})):
            r = api.post("/v1/streams", json={"name": name, "url": url, "options": opts})
            r.raise_for_status()
        apps = [{"name": "people-north", "source": "cam-north", "detector": "scenedet", "classes": ["person"],
                 "slo_ms": 1500, "priority": 5, "lines": {"midblock": [[0.62, 0.97], [0.62, 0.27]]}},
                {"name": "vehicles-south", "source": "cam-south", "detector": "scenedet", "classes": ["car", "bike"],
                 "slo_ms": 1500, "fps": 10, "lines": {"westgate": [[0.1, 0.45], [0.1, 0.78]]}},
                {"name": "motion-file", "source": "file", "detector": "motion", "slo_ms": 1000, "fps": 5}]
        for spec in apps:
            api.post("/v1/apps", json=spec).raise_for_status()
        wait_for(lambda: all(api.get(f"/v1/apps/{a['name']}").json()["status"] == "running" for a in apps), 180,
                 "apps running")
        warmup_s = 60.0
        time.sleep(warmup_s)
        rss_start = rss_mb(srv.proc.pid)
        log(f"warm: rss {rss_start:.0f} MB")
        total_s = minutes * 60.0
        t0 = time.monotonic()
        samples = []
        killed = False
        while time.monotonic() - t0 < total_s - warmup_s:
            elapsed = time.monotonic() - t0
            if not killed and elapsed > (total_s - warmup_s) / 2:
                log("killing cam-north for 10 s")
                cams[0].stop()
                time.sleep(10.0)
                cams[0] = RtspServer(clips[0], port=cams[0].port, mount="north").start()
                back = time.monotonic()
                wait_for(lambda: api.get("/v1/streams/cam-north").json()["status"] == "live", 60, "cam-north live")
                out["recovery_s"] = round(time.monotonic() - back, 2)
                out["backoff_max_s"] = 5.0
                log(f"cam-north live again {out['recovery_s']} s after the restart")
                killed = True
            samples.append(rss_mb(srv.proc.pid))
            if len(samples) % 6 == 0:
                log(f"{elapsed:.0f} s: rss {samples[-1]:.0f} MB")
            time.sleep(5.0)
        rss_end = rss_mb(srv.proc.pid)
        out.update(rss_start_mb=round(rss_start, 1), rss_end_mb=round(rss_end, 1),
                   rss_max_mb=round(max(samples + [rss_end]), 1), rss_growth=round(rss_end / rss_start - 1, 4),
                   rss_trend_mb=[round(x) for x in samples[::6]])
        out["streams"] = {s["name"]: {k: s[k] for k in ("status", "frames_decoded", "frames_dropped", "reconnects",
                                                        "gaps", "last_gap_ms")} for s in api.get("/v1/streams").json()}
        out["apps"] = {}
        for a in apps:
            m = api.get(f"/v1/apps/{a['name']}/metrics").json()
            out["apps"][a["name"]] = {k: m[k] for k in ("slo_ms", "slo_attainment", "slo_attainment_1m",
                                                         "latency_ms", "throughput_fps", "dropped")}
        metrics = api.get("/metrics").text
        out["prometheus_attainment_lines"] = [line for line in metrics.splitlines()
                                              if line.startswith("vigil_app_slo_attainment{")]
        out["server_alive"] = srv.proc.poll() is None
    finally:
        api.close()
        out["graceful_stop"] = srv.stop()
        for c in cams:
            c.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = run(args.minutes, log=lambda m: print(m, file=sys.stderr, flush=True))
    print_json(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
