from pathlib import Path

import pytest

from apps.spec import SpecError, builtin_names, load_spec, parse_spec
from runtime.offline import REAL_APPS
from sample_videos.preset import STREET

ROOT = Path(__file__).resolve().parents[2]
VALID = {"name": "cam-1", "detector": "motion", "slo_ms": 500}


def test_builtins_load_and_the_ranges_match_the_street_preset():
    assert {"people-counter", "vehicle-counter", "people-counter-scenedet", "vehicle-counter-scenedet",
            "motion"} <= set(builtin_names())
    for name in REAL_APPS:  # for real cameras, any of them: no geometry of the range's street
        spec = load_spec(name)
        assert spec.detector in ("coco", "motion") and not spec.lines and not spec.zones, name
    assert set(load_spec("vehicle-counter").classes) == {"car", "truck", "bus", "motorcycle", "bicycle"}
    for name in ("people-counter-scenedet", "vehicle-counter-scenedet"):
        spec = load_spec(name)
        assert spec.detector == "scenedet"
        for line, points in spec.lines.items():
            assert points == STREET.lines[line], f"{name}: line {line} drifted from the preset"
        for zone, polygon in spec.zones.items():
            assert tuple(tuple(p) for p in polygon) == STREET.zones[zone], f"{name}: zone {zone} drifted"


def test_the_demos_people_counter_is_the_builtin_with_a_line_across_vtests_walkway():
    demo = load_spec(str(ROOT / "configs/apps/vtest-people-counter.yaml"))
    assert demo.model_copy(update={"lines": {}}) == load_spec("people-counter")
    assert list(demo.lines) == ["walkway"]


@pytest.mark.parametrize("patch, fragment", [
    ({"slo_ms": -5}, "slo_ms: Input should be greater than 0; was -5"),
    ({"name": "Bad Name"}, "name: must be lowercase"),
    ({"detector": "Yolo V8"}, "detector: must name a model in the repository"),
    ({"fps": 0}, "fps: Input should be greater than 0"),
    ({"min_confidence": 2}, "min_confidence: Input should be less than or equal to 1"),
    ({"lines": {"a": [[0.1, 0.1]]}}, "lines.a"),
    ({"lines": {"a": [[0.1, 0.1], [0.1, 0.1]]}}, "two equal points"),
    ({"lines": {"a": [[0.1, 0.1], [1.5, 0.1]]}}, "outside the frame; coordinates are normalized"),
    ({"zones": {"z": [[0, 0], [1, 1]]}}, "zone 'z' needs at least 3 points"),
    ({"classes": ["car"]}, "classes: 'car' is not produced by detector 'motion'"),
    ({"slo": 100}, "slo: unknown field; check the spelling"),
    ({"tracker": {"min_hits": 0}}, "tracker.min_hits: Input should be greater than or equal to 1"),
    ({"tracker": {"kind": "sort"}}, "tracker.kind: Input should be 'bytetrack' or 'ocsort'; was 'sort'"),
    # an unknown field lists the fields of the model it is in, not the app's
    ({"tracker": {"hits": 2}}, "tracker.hits: unknown field; check the spelling (fields: lost_track_s, min_hits,"),
    ({"skip_static": {"cells": 2}}, "skip_static.cells: unknown field; check the spelling (fields: threshold,"),
    ({"tracker": {"kind": "bytetrack", "appearance": {}}},
     "tracker.appearance needs kind: ocsort; kind is bytetrack"),
    ({"tracker": {"appearance": {"gate": 0}}}, "tracker.appearance.gate: Input should be greater than 0"),
    ({"tracker": {"kind": "bytetrack", "height_iou": True}},
     "tracker.height_iou needs kind: ocsort; kind is bytetrack"),
    ({"tracker": {"class_groups": [["motion", "car"]]}}, "classes: 'car' is not produced by detector 'motion'"),
    ({"tracker": {"class_groups": [["motion"]]}}, "tracker.class_groups.0: List should have at least 2 items"),
])
def test_bad_fields_are_named_with_the_value(patch, fragment):
    with pytest.raises(SpecError) as info:
        parse_spec({**VALID, **patch}, origin="cam.yaml")
    assert "cam.yaml: " in str(info.value)
    assert fragment in str(info.value)


@pytest.mark.parametrize("tracker", [{"kind": "bytetrack", "height_iou": True},
                                     {"kind": "bytetrack", "appearance": {"gate": 5.0}},
                                     {"kind": "ocsort", "height_iou": True}, {"height_iou": True},
                                     {"kind": "bytetrack"}, {"kind": "bytetrack", "appearance": None}])
def test_the_schema_refuses_what_the_spec_refuses(tracker):
    """A client generating requests from the OpenAPI schema (schemathesis did) must not
    be able to make a tracker the server refuses."""
    import jsonschema

    from apps.spec import TrackerOptions

    schema_says = jsonschema.Draft202012Validator(TrackerOptions.model_json_schema()).is_valid(tracker)
    try:
        parse_spec({**VALID, "tracker": tracker})
        spec_says = True
    except SpecError:
        spec_says = False
    assert schema_says == spec_says


def test_missing_name_and_non_mapping():
    with pytest.raises(SpecError, match="name: Field required"):
        parse_spec({"detector": "motion"})
    with pytest.raises(SpecError, match="an app spec is a mapping"):
        parse_spec(["name"])


def test_load_spec_errors(tmp_path):
    with pytest.raises(SpecError, match="unknown app 'nope'"):
        load_spec("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(SpecError, match="bad.yaml: not valid YAML"):
        load_spec(str(bad))
    good = tmp_path / "good.yaml"
    good.write_text("name: good\ndetector: hog\nclasses: [person]\n")
    assert load_spec(str(good)).detector == "hog"
