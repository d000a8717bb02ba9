"""Schemathesis fuzzes the REST API from its own OpenAPI schema against a real server,
with every check it has: no request, however malformed, gets a 5xx; every status,
header, content type and body is the one documented; a request the schema calls
invalid is refused, and one it calls valid is accepted (the schema states every
constraint the server enforces)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import httpx
import pytest

from support.processes import VigilServer, run_command, wait_for

# What no static schema can say, so these operations are left out of the "valid data
# is accepted" check (and only of it): whether /v1/ask understands a question depends
# on the lines and zones configured, a completion fits the model's context only if
# its prompt's tokens and max_tokens do, and an uploaded model version must be an
# archive of a model that builds and runs.
CONFIG = """
[[operations]]
include-path-regex = "^/v1/(ask|completions|chat/completions|models/[^/]+/versions)$"
checks.positive_data_acceptance.enabled = false
"""


@pytest.mark.slow
def test_fuzzing_the_openapi_schema_finds_no_server_errors_nor_undocumented_behaviour(tmp_path, short_clip):
    clip, _ = short_clip
    # few streams: fuzzed synthetic:// streams render on the CPU
    # its own: the fuzzer adds and deletes streams and apps at will
    srv = VigilServer(tmp_path / "data", config={"limits": {"max_streams": 3, "max_apps": 3}},
                      media_dirs=[clip.parent]).start()
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as api:  # something for the routes to find
            wait_for(lambda: api.get("/readyz").status_code == 200, 120, "ready (the LLM loaded)")
            assert api.post("/v1/streams", json={"name": "s", "url": str(clip), "options": {"loop": True}}
                            ).status_code == 201
            assert api.post("/v1/apps", json={"name": "m", "source": "s", "detector": "motion"}).status_code == 201
        st = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or "schemathesis"
        out = run_command([st, "--config-file", str(config), "run", f"{srv.url}/openapi.json",
                           "--max-examples", "25", "--seed", "7", "--request-timeout", "30",
                           "--exclude-path", "/v1/overview/stream"],  # an endless event stream
                          480)
        assert out.returncode == 0, out.stdout[-8000:] + out.stderr[-2000:]
        assert "No issues found" in out.stdout or "passed" in out.stdout, out.stdout[-3000:]
    finally:
        srv.stop()
