"""What the list commands and `vigil apps metrics` print for a person (cli/tables.py), and
that `--json` prints the API's answer unchanged for scripts."""

from __future__ import annotations

import json
import time

import pytest

from cli import tables
from cli.main import main

MODELS = {"object": "list", "data": [
    {"id": "coco", "kind": "vision", "versions_on_disk": [1, 2], "loaded": [2], "labels": {"stable": 1, "canary": 2},
     "error": None, "license": {"spdx": "MIT", "authors": "Vladimir Mandic", "url": "https://x"},
     "fragments": {"2": [{"name": "model", "profile": {"latency_ms": [1, 2, 3]}}]}},
    {"id": "yolo", "kind": "vision", "versions_on_disk": [1], "loaded": [], "labels": {}, "license": None,
     "error": "yolo/1/model.yaml: output: a yolo output is [batch, 4 + 3 classes, boxes]; the model gave [1, 9, 6]"
              " for a batch of 1", "fragments": {}},
    {"id": "smollm2-135m-instruct", "kind": "llm", "parent": None, "answers": False,
     "license": {"spdx": "Apache-2.0", "authors": "HF"}},
    {"id": "smollm2-135m-instruct:scene", "kind": "llm", "parent": "smollm2-135m-instruct", "answers": True,
     "license": {"spdx": "Apache-2.0", "authors": "HF"}},
]}
METRICS = {"app": "lobby", "slo_ms": 1000.0, "slo_attainment": 0.4861, "slo_attainment_1m": 0.5,
           "slo_attainment_1h": None,
           "latency_ms": {"p50": 293.16, "p95": 404.99, "p99": 435.95},
           "latency_all_ms": {"p50": 310.0, "p95": "inf", "p99": "inf"}, "throughput_fps": 7.0,
           "load": {"overloaded": True, "shed_share": 0.0615, "rate_fps": 15.0, "full_fps": 15.0},
           "arrived": 72, "completed": 35, "within_slo": 35, "skipped": 0, "dropped": {"deadline": 37},
           "batch_size": {"scenedet/backbone": {"1": 1, "2": 17}},
           "counts": {"tracks": 7,
                      "lines": {"midblock": {"in": 2, "out": 5, "by_class": {"person": {"in": 2, "out": 5}}}},
                      "zones": {"crosswalk": {"entered": 3, "occupancy": {"person": 2}}}}}


def rows(text: str) -> list[list[str]]:
    """A table's rows, split on its columns' runs of two or more spaces (header first)."""
    import re

    lines = [line for line in text.splitlines() if line.strip()]
    return [re.split(r"\s{2,}", line.strip()) for line in lines if not set(line.strip()) <= {"-", " "}]


def test_models_list_shows_versions_labels_the_licence_and_why_a_load_failed_not_profiles():
    text = tables.models_table(MODELS)
    table = rows(text.split("\n\n")[0])
    assert table[0] == ["name", "kind", "on disk", "loaded", "labels", "licence", "last error"]
    assert table[1] == ["coco", "vision", "1, 2", "2", "canary=2 stable=1", "MIT", "-"]
    assert table[2][:6] == ["yolo", "vision", "1", "-", "-", "-"] and table[2][6].startswith("yolo/1/model.yaml")
    assert table[3][:2] == ["smollm2-135m-instruct", "llm"] and "Apache-2.0" in table[3]
    assert table[4][:2] == ["smollm2-135m-instruct:scene", "lora of smollm2-135m-instruct, answers"]
    assert "profile" not in text and "latency_ms" not in text
    # the reason cut to fit its column is printed whole below the table
    assert text.split("\n\n")[1] == f"yolo: {MODELS['data'][1]['error']}"


def test_the_columns_line_up():
    assert tables.table(["name", "n"], [["a", 1.0], ["longer", None]]).splitlines() == [
        "name    n", "------  -", "a       1", "longer  -"]


@pytest.mark.parametrize("t_ms, shown", [
    (3866.667, "0:03.9"),  # a file's stream time: into the file
    (61_250.0, "1:01.2"),
    (None, None),
])
def test_stream_times_read_as_time_into_the_file(t_ms, shown):
    assert tables.stream_time(t_ms) == shown


def test_a_live_cameras_time_is_its_local_clock_time():
    t_ms = 1_796_651_313_300.0
    assert tables.stream_time(t_ms) == time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t_ms / 1000))


def test_events_list_is_a_table_with_readable_times_and_what_happened():
    body = {"events": [
        {"id": 7, "type": "line_cross", "app": "people", "stream": "gate", "t_ms": 12_500.0, "track_id": 3,
         "class": "person", "line": "walkway", "direction": "in", "box": [1, 2, 3, 4]},
        {"id": 8, "type": "zone_dwell", "app": "people", "stream": "gate", "t_ms": 14_000.0, "track_id": 3,
         "class": "person", "zone": "door", "dwell_ms": 30_000.0},
        {"id": 9, "type": "model_selected", "app": "people", "stream": "gate", "t_ms": 15_000.0, "track_id": -1,
         "class": "", "model": "coco", "from_version": 2, "to_version": 1}],
        "next_after_id": 9, "next_before_id": None}
    table = rows(tables.events_table(body).split("\n\n")[0])
    assert table[0] == ["id", "time", "stream", "app", "type", "track", "class", "detail"]
    assert table[1] == ["7", "0:12.5", "gate", "people", "line_cross", "3", "person", "walkway in"]
    assert table[2][-1] == "zone door, stayed 30.0 s"
    assert table[3][5:] == ["-", "-", "coco v2 -> v1"]
    assert "--after-id 9" in tables.events_table(body)
    assert tables.events_table({"events": [], "next_after_id": None}).splitlines()[2] == "(no events)"


def test_app_metrics_say_what_unbounded_means_and_show_the_counts():
    text = tables.metrics_text(METRICS)
    assert "inf" not in text
    assert "p95 unbounded, p99 unbounded" in text
    assert "(unbounded: more than 5% of the requests were dropped, and a drop counts as never answered)" in text
    assert "72 arrived, 35 completed (35 within the SLO), 37 dropped (37 deadline)" in text
    assert "48.6% of requests since start (last minute 50.0%, last hour -)" in text
    assert "line midblock: 2 in, 5 out (person 2/5)" in text
    assert "zone crosswalk: 3 entered, 2 inside now" in text
    assert "7 tracks" in text and "overloaded" in text


def test_finite_percentiles_need_no_note():
    finite = {**METRICS, "latency_all_ms": {"p50": 310.0, "p95": 420.0, "p99": 500.0}}
    assert "unbounded" not in tables.metrics_text(finite)
    assert tables.unbounded_note({"p50": 1.0, "p95": 2.0, "p99": "inf"}).startswith("unbounded: more than 1%")


class Canned:
    """A RestClient that answers every call with `body` (what the server would)."""

    body: object = None

    def __init__(self, url, api_key=None) -> None:
        pass

    def call(self, method, path, body=None, params=None, content_type=None):
        return Canned.body


@pytest.mark.parametrize("argv, body, human", [
    (["models", "list"], MODELS, "licence"),
    (["apps", "metrics", "lobby"], METRICS, "unbounded"),
    (["events", "list"], {"events": [], "next_after_id": None}, "(no events)"),
    (["streams", "list"], [], "(none)"),
    (["apps", "list"], [], "(none)"),
])
def test_lists_print_for_a_person_and_json_prints_the_apis_answer(argv, body, human, monkeypatch, capsys):
    monkeypatch.setattr("vigil.client.RestClient", Canned)
    Canned.body = body
    assert main(argv) == 0
    assert human in capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == body
