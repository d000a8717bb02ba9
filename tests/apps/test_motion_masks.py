"""Motion masks: a polygon where the motion detector sees nothing move (a tree in the
wind), while the same movement outside it is found; masks are checked like zones."""

from __future__ import annotations

import numpy as np
import pytest

from apps.detectors import build_host_detector
from apps.spec import AppSpec
from core.frames import FrameBlock

H, W = 120, 160


def scene(squares: list[tuple[int, int]]) -> FrameBlock:
    """One frame: a grey street with a bright 12 px square at each (x, y)."""
    image = np.full((1, H, W, 3), 90, np.uint8)
    for x, y in squares:
        image[0, y:y + 12, x:x + 12] = 230
    return FrameBlock("s", 0, np.zeros(1, np.int64), np.zeros(1), np.zeros(1), image)


def boxes_after_moving(detector, path: list[tuple[int, int]]) -> list[np.ndarray]:
    for _ in range(40):  # learn the empty street
        detector.detect(scene([]))
    return [detector.detect(scene([p]))[0].xyxy for p in path]


LEFT_HALF = [[[0.0, 0.0], [0.5, 0.0], [0.5, 1.0], [0.0, 1.0]]]
IN_LEFT = [(10 + 3 * i, 50) for i in range(8)]  # x 10..31 of 160: inside the left half
IN_RIGHT = [(110 + 3 * i, 50) for i in range(8)]


def test_movement_under_a_mask_is_not_motion_and_elsewhere_it_is():
    masked = build_host_detector("motion", {"masks": LEFT_HALF})
    assert all(len(b) == 0 for b in boxes_after_moving(masked, IN_LEFT))
    found = boxes_after_moving(build_host_detector("motion", {"masks": LEFT_HALF}), IN_RIGHT)
    assert all(len(b) == 1 for b in found)
    assert found[0][0][0] >= W / 2 - 2
    unmasked = boxes_after_moving(build_host_detector("motion"), IN_LEFT)  # the same movement, no mask
    assert all(len(b) == 1 for b in unmasked)


def test_the_mask_follows_the_frame_size():
    detector = build_host_detector("motion", {"masks": LEFT_HALF})
    assert detector.ignored(H, W)[:, : W // 2 - 1].all() and not detector.ignored(H, W)[:, W // 2 + 1:].any()
    assert detector.ignored(360, 640).shape == (360, 640)
    assert build_host_detector("motion").ignored(H, W) is None


@pytest.mark.parametrize("masks,says", [
    ([[[0, 0], [1.5, 0], [0, 1]]], "mask 0: point (1.5, 0.0) is outside the frame"),
    ([[[0, 0], [1, 0]]], "at least 3 items"),
    ([[[0, 0], [1, 0], [0]]], "at least 2 items"),
    ([[[0, 0], [1, 0], [1, 1]]] * 33, "at most 32 items"),
])
def test_bad_masks_name_the_problem(masks, says):
    with pytest.raises(ValueError, match="bad detector_options") as err:
        AppSpec(name="m", detector="motion", detector_options={"masks": masks})
    assert says in str(err.value)
