"""False-positive controls (apps/filters.py): per-class size, shape and score, and
object masks, on constructed detections and through an app's events."""

from __future__ import annotations

import numpy as np
import pytest
from test_app import LABELS, feed

from apps.app import App
from apps.filters import DetectionFilter
from apps.spec import SpecError, parse_spec
from factories import box_at, make_detections

SIZE = (200, 100)  # frame area 20000 px


def kept(spec: dict, boxes, classes, scores=None) -> list[int]:
    """Indices of the detections the spec's filter keeps."""
    f = DetectionFilter(parse_spec({"name": "t", **spec}), LABELS, SIZE)
    return [int(i) for i in np.flatnonzero(f.keep(make_detections(boxes, classes, scores)))]


def test_area_and_ratio_bounds_apply_per_class_with_a_default():
    small = box_at(50, 50, 4, 10)  # 40 px: 0.002 of the frame
    large = box_at(100, 50, 40, 50)  # 2000 px: 0.1
    wide = box_at(150, 50, 40, 10)  # ratio 4
    spec = {"filters": {"person": {"min_area": 0.01}, "*": {"max_ratio": 2.0}}}
    # a person must be at least 1% of the frame (no ratio bound of its own); a car is
    # held to the default: at most twice as wide as high, whatever its size
    assert kept(spec, [small, large, wide], [0, 0, 0]) == [1, 2]
    assert kept(spec, [small, large, wide], [1, 1, 1]) == [0, 1]


def test_a_class_score_overrides_min_confidence_both_ways():
    boxes = [box_at(50, 50), box_at(100, 50), box_at(150, 50)]
    spec = {"min_confidence": 0.5, "filters": {"car": {"min_score": 0.8}, "bike": {"min_score": 0.2}}}
    assert kept(spec, boxes, [0, 1, 2], [0.6, 0.6, 0.3]) == [0, 2]
    assert kept({"min_confidence": 0.5}, boxes, [0, 1, 2], [0.6, 0.6, 0.3]) == [0, 1]


def test_a_mask_hides_its_classes_by_the_box_bottom_centre():
    mask = {"polygon": [[0, 0.5], [0.5, 0.5], [0.5, 1], [0, 1]], "classes": ["car"]}  # bottom-left quarter
    foot_in = box_at(50, 60, 10, 20)  # bottom centre (50, 70): inside
    head_in = box_at(50, 40, 10, 10)  # its centre in the upper half, bottom centre (50, 45): outside
    assert kept({"masks": [mask]}, [foot_in, head_in, foot_in], [1, 1, 0]) == [1, 2]  # the person stays
    every = {"polygon": mask["polygon"]}
    assert kept({"masks": [every]}, [foot_in, foot_in], [0, 1]) == []


def test_detections_inside_a_mask_never_produce_events():
    walk = [[(70 + 4 * i, 50, 0)] for i in range(12)] + [[] for _ in range(8)]
    base = {"name": "t", "detector": "scenedet", "classes": ["person"], "lines": {"gate": [[0.5, 1.0], [0.5, 0.0]]},
            "tracker": {"min_hits": 2, "lost_track_s": 0.5}}
    open_app = App(parse_spec(base), "cam", SIZE, 10.0, LABELS)
    assert any(e.type == "line_cross" for e in feed(open_app, walk))  # the walk does cross
    masked = App(parse_spec({**base, "masks": [{"polygon": [[0.2, 0], [0.9, 0], [0.9, 1], [0.2, 1]]}]}),
                 "cam", SIZE, 10.0, LABELS)
    assert feed(masked, walk) == []
    assert masked.counts()["tracks"] == 0 and masked.num_detections == 0


def test_a_minimum_over_its_maximum_keeps_none_of_that_class():
    boxes = [box_at(50, 50), box_at(100, 50)]
    assert kept({"filters": {"person": {"min_area": 0.5, "max_area": 0.1}}}, boxes, [0, 1]) == [1]


@pytest.mark.parametrize("spec, says", [
    ({"filters": {"person": {"min_area": 2}}}, "filters.person.min_area"),
    ({"filters": {"person": {"min_ratio": float("nan")}}}, "filters.person.min_ratio"),
    ({"masks": [{"polygon": [[0, 0], [1, 1]]}]}, "at least 3 points"),
    ({"masks": [{"polygon": [[0, 0], [1, 0], [1, 1.5]]}]}, "outside the frame"),
    ({"detector": "motion", "filters": {"dog": {}}}, "'dog' is not produced by detector 'motion'"),
    ({"detector": "motion", "masks": [{"polygon": [[0, 0], [1, 0], [1, 1]], "classes": ["dog"]}]}, "'dog'"),
])
def test_bad_filters_and_masks_are_named(spec, says):
    with pytest.raises(SpecError, match=None) as err:
        parse_spec({"name": "t", **spec})
    assert says in str(err.value), str(err.value)


def test_the_docs_example_is_a_valid_spec():
    import re
    from pathlib import Path

    import yaml

    guide = (Path(__file__).resolve().parents[2] / "docs/guides/apps.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"^```yaml\n(.*?)^```", guide, re.M | re.S)]
    example = next(b for b in blocks if isinstance(b, dict) and "masks" in b and "name" not in b)
    spec = parse_spec({"name": "t", **example})
    assert spec.filters["person"].min_score == 0.6 and spec.masks[0].classes == ["car"]


def test_a_live_min_confidence_reaches_the_filter():
    base = {"name": "t", "detector": "scenedet", "classes": ["person"], "tracker": {"min_hits": 2}}
    app = App(parse_spec(base), "cam", SIZE, 10.0, LABELS)
    app.reconfigure(parse_spec({**base, "min_confidence": 0.95}))
    assert feed(app, [[(70 + 4 * i, 50, 0)] for i in range(6)]) == []  # scores of 0.9 fall short now

