"""Schemathesis fuzzes the REST API from its own OpenAPI schema against a real server:
no request, however malformed, may get a 5xx."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx

from support.processes import VigilServer, wait_for


def test_fuzzing_the_openapi_schema_finds_no_server_errors(tmp_path, short_clip):
    clip, _ = short_clip
    config = tmp_path / "vigil.yaml"  # few streams: fuzzed synthetic:// streams render on the CPU
    config.write_text("limits:\n  max_streams: 3\n  max_apps: 3\n")
    srv = VigilServer(tmp_path / "data", extra=["--config", str(config)]).start()
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as api:  # something for the routes to find
            wait_for(lambda: api.get("/readyz").status_code == 200, 120, "ready (the LLM loaded)")
            assert api.post("/v1/streams", json={"name": "s", "url": str(clip), "loop": True}).status_code == 201
            assert api.post("/v1/apps", json={"name": "m", "source": "s", "detector": "motion"}).status_code == 201
        st = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or "schemathesis"
        out = subprocess.run([st, "run", f"{srv.url}/openapi.json", "--checks", "not_a_server_error",
                              "--max-examples", "25", "--seed", "7", "--request-timeout", "30",
                              "--exclude-path", "/v1/overview/stream"],  # an endless event stream
                             capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
        assert "No issues found" in out.stdout or "passed" in out.stdout, out.stdout[-3000:]
    finally:
        srv.stop()
