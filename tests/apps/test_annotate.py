"""Labels of several apps on one frame: none is drawn over another (apps/annotate.py)."""

import numpy as np

from apps.annotate import Overlay, draw_overlays

PERSON = (300, 200, 340, 290)  # one walker, a person to one app and a moving blob to another


def boxes(*labelled: tuple[tuple[int, int, int, int], str]) -> Overlay:
    return Overlay(zones=(), lines=(), boxes=tuple((*box, text) for box, text in labelled), frame_class=None)


def overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_labels_of_apps_around_one_object_do_not_cover_one_another():
    people = boxes((PERSON, "#8 person"), ((345, 205, 385, 295), "#9 person"))  # and a neighbour close by
    motion = boxes(((298, 196, 342, 292), "#8 motion"), ((346, 204, 386, 296), "#2 motion"))
    img = np.zeros((576, 768, 3), np.uint8)
    rects = draw_overlays(img, [(people, 0), (motion, 2)])
    assert len(rects) == 4
    assert not any(overlap(a, b) for i, a in enumerate(rects) for b in rects[i + 1:]), rects
    assert rects[0][1] < PERSON[1] <= rects[0][3] <= PERSON[1] + 5  # the first app's label: above its box
    assert rects[0][0] == PERSON[0]
    alone = np.zeros_like(img)
    draw_overlays(alone, [(people, 0)])
    x0, y0, x1, y1 = rects[0]
    assert np.array_equal(img[y0:y1, x0:x1], alone[y0:y1, x0:x1])  # "#8 person" reads as it does alone


def test_a_label_at_the_frames_edge_stays_inside_it():
    img = np.zeros((100, 160, 3), np.uint8)
    [rect] = draw_overlays(img, [(boxes(((150, 0, 160, 40), "#12 person")), 0)])
    assert 0 <= rect[0] and rect[2] <= 160 and 0 <= rect[1] and rect[3] <= 100
