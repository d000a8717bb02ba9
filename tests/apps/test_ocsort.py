"""apps/ocsort.py against the reference it re-implements, Roboflow's `OCSORTTracker`,
frame by frame on seeded random scenes: people that walk, hide and come back, clutter,
scores on both sides of the threshold, frames skipped, a repeated time and one that
goes backwards. The ids, the order of the answer and the filter states must agree."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import supervision as sv
from trackers import OCSORTTracker

from apps.ocsort import OCSort


def _scene(rng: np.random.Generator, frames: int, people: int):
    """Yields (boxes, scores, time in s) per frame."""
    centre = rng.uniform(50, 550, (people, 2))
    velocity = rng.normal(0, 4, (people, 2))
    size = rng.uniform(20, 80, (people, 2))
    t = 0.0
    for _ in range(frames):
        t += rng.choice([1, 1, 1, 2, 3, 0.98, 1.03, 1.07, 0.95, 7]) / 15.0  # skipped frames, jitter, a long gap
        roll = rng.random()
        stamp = t - 0.1 if roll < 0.02 else (t - 1 / 15.0 if roll < 0.04 else t)
        centre += velocity + rng.normal(0, 1.5, centre.shape)
        velocity += rng.normal(0, 0.5, velocity.shape)
        visible = rng.random(people) > 0.25
        boxes = np.concatenate([centre - size / 2, centre + size / 2], 1)[visible] + rng.normal(0, 2, (visible.sum(), 4))
        clutter = rng.uniform(0, 600, (rng.integers(0, 3), 2))
        boxes = np.concatenate([boxes, np.concatenate([clutter, clutter + 30], 1)])
        order = rng.permutation(len(boxes))
        yield boxes[order].astype(np.float32), rng.uniform(0.05, 1.0, len(boxes)).astype(np.float32)[order], stamp


@pytest.mark.parametrize("seed", range(6))
def test_ids_order_and_filters_match_the_reference_frame_by_frame(seed):
    rng = np.random.default_rng(seed)
    options = dict(lost_track_buffer=int(rng.integers(5, 60)), frame_rate=float(rng.choice([5.0, 15.0, 30.0])),
                   minimum_consecutive_frames=int(rng.integers(1, 5)),
                   minimum_iou_threshold=float(rng.uniform(0.05, 0.4)),
                   high_conf_det_threshold=float(rng.uniform(0.1, 0.6)))
    reference, ours = OCSORTTracker(**options), OCSort(**options)
    last_seen: dict[int, int] = {}
    came_back = 0  # ids matched again after two or more frames without
    for frame, (boxes, scores, t) in enumerate(_scene(rng, 200, int(rng.integers(2, 20)))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the reference warns of the repeated and backward times
            expected = reference.update(sv.Detections(xyxy=boxes, confidence=scores), timestamp=t)
        index, ids = ours.update(boxes, scores, t)
        assert ids.tolist() == expected.tracker_id.tolist(), f"frame {frame}"
        assert np.array_equal(boxes[index], expected.xyxy), f"frame {frame}"
        states = np.array([track.state_estimator.kf.state for track in reference.tracks]).reshape(-1, 7, 1)
        np.testing.assert_allclose(ours._x, states, rtol=1e-9, atol=1e-9, err_msg=f"frame {frame}")
        seen = set(ids[ids >= 0].tolist())
        came_back += sum(1 for i in seen if frame - last_seen.get(i, frame) > 2)
        last_seen.update(dict.fromkeys(seen, frame))
    assert came_back > 0, "the scene never lost a track and found it again, so ORU went untested"


def test_a_frame_rate_that_is_not_positive_is_named():
    with pytest.raises(ValueError, match="frame_rate"):
        OCSort(lost_track_buffer=30, frame_rate=0.0, minimum_consecutive_frames=3, minimum_iou_threshold=0.3,
               high_conf_det_threshold=0.5)


def _ocsort(height_iou: bool) -> OCSort:
    return OCSort(lost_track_buffer=30, frame_rate=10.0, minimum_consecutive_frames=1, minimum_iou_threshold=0.1,
                  high_conf_det_threshold=0.25, height_iou=height_iou)


def test_height_iou_is_the_iou_times_the_share_of_height_the_boxes_have_in_common():
    a, b = np.array([[0, 0, 10, 40]], np.float64), np.array([[0, 20, 10, 60], [0, 0, 10, 40]], np.float64)
    # IoU 200 / 600 and 20 of 60 rows in common; the same box keeps its IoU of 1
    np.testing.assert_allclose(_ocsort(True)._overlap(a, b), [[1 / 9, 1.0]])
    np.testing.assert_allclose(_ocsort(False)._overlap(a, b), [[1 / 3, 1.0]])


@pytest.mark.parametrize("height_iou", [False, True])
def test_someone_farther_away_does_not_take_over_a_track_by_height(height_iou):
    """A near person is missed for a frame while a farther one, higher in the picture and
    overlapping the near one's box, is seen: by IoU alone the farther one continues the
    near one's track; modulated by height it starts its own."""
    tracker = _ocsort(height_iou)
    near, far = np.array([[20, 30, 32, 70]], np.float32), np.array([[22, 20, 30, 45]], np.float32)
    for i in range(5):
        _, ids = tracker.update(near, np.ones(1, np.float32), i / 10.0)
    _, far_ids = tracker.update(far, np.ones(1, np.float32), 0.5)
    assert (far_ids.tolist() == ids.tolist()) is not height_iou
