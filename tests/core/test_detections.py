"""core/detections.py: `data`, the per-box extras, is validated against the boxes and
goes wherever they go. Each extra is built from its boxes (`_tagged`), so a test can
tell whether it still sits beside the box it belongs to."""

from __future__ import annotations

import numpy as np
import pytest

from core.detections import Detections
from factories import box_at


def _tagged(xs: list[float], tracker_id: list[int] | None = None) -> Detections:
    """Boxes centred at `xs`, with two extras that name their box: "x" [N] and
    "embedding" [N, 2] (x and -x)."""
    x = np.array(xs, np.float64)
    boxes = np.array([box_at(v, 50.0) for v in xs], np.float32).reshape(-1, 4)
    return Detections(boxes, np.full(len(xs), 0.9), np.zeros(len(xs)),
                      None if tracker_id is None else np.array(tracker_id),
                      {"x": x, "embedding": np.stack([x, -x], 1).reshape(-1, 2)})


def _assert_aligned(d: Detections, xs: list[float]) -> None:
    """Each box's extras are still its own, and there are the boxes `xs`."""
    np.testing.assert_allclose(d.centers[:, 0], xs)
    np.testing.assert_allclose(d.data["x"], xs)
    np.testing.assert_allclose(d.data["embedding"], np.stack([xs, [-v for v in xs]], 1).reshape(-1, 2))


def test_data_defaults_to_empty_and_existing_calls_still_work():
    d = Detections(np.zeros((2, 4)), [0.5, 0.6], [1, 2])
    assert d.data == {} and d.tracker_id.tolist() == [-1, -1]
    assert Detections.empty().data == {} and len(Detections.empty()) == 0


@pytest.mark.parametrize("value, shape", [
    (np.zeros(3), "(3,)"),  # one box too many
    (np.zeros((1, 5)), "(1, 5)"),  # one too few
    (np.float32(1.0), "()"),  # no first dimension at all
])
def test_an_extra_without_one_entry_per_box_is_refused_naming_its_key_and_shapes(value, shape):
    with pytest.raises(ValueError, match=rf"data\['colour'\].*{shape}.*2 boxes"):
        Detections(np.zeros((2, 4)), [0.5, 0.6], [1, 2], data={"colour": value})


def test_data_is_a_copy_of_the_callers_dict():
    given = {"x": np.arange(2)}
    d = Detections(np.zeros((2, 4)), [0.5, 0.6], [1, 2], data=given)
    given["y"] = np.arange(2)
    assert list(d.data) == ["x"]


def test_an_extra_given_as_a_list_becomes_an_array():
    d = Detections(np.zeros((2, 4)), [0.5, 0.6], [1, 2], data={"name": ["a", "b"]})
    assert isinstance(d.data["name"], np.ndarray) and d[np.array([False, True])].data["name"].tolist() == ["b"]


@pytest.mark.parametrize("index, kept", [
    (np.array([True, False, True, False]), [10.0, 30.0]),  # a boolean mask
    (np.array([3, 0]), [40.0, 10.0]),  # an index array, reordering
    ([2], [30.0]),  # a list
    (slice(1, 3), [20.0, 30.0]),  # a slice
    (np.int64(1), [20.0]),  # one box, still [1, ...]
    (np.zeros(4, bool), []),  # nothing
])
def test_indexing_keeps_each_boxs_extras_with_it(index, kept):
    d = _tagged([10.0, 20.0, 30.0, 40.0])[index]
    assert set(d.data) == {"x", "embedding"}
    assert d.data["embedding"].shape == (len(kept), 2)
    _assert_aligned(d, kept)


def test_with_tracker_id_keeps_the_extras():
    d = _tagged([10.0, 20.0]).with_tracker_id(np.array([7, 8]))
    assert d.tracker_id.tolist() == [7, 8]
    _assert_aligned(d, [10.0, 20.0])


def test_concat_joins_the_extras_in_the_order_of_the_boxes():
    d = Detections.concat([_tagged([10.0, 20.0], [1, 2]), _tagged([30.0], [3])])
    assert d.tracker_id.tolist() == [1, 2, 3]
    _assert_aligned(d, [10.0, 20.0, 30.0])
    assert list(d.data) == ["x", "embedding"]  # the first part's order


def test_concat_ignores_empty_parts_whatever_their_extras():
    d = Detections.concat([Detections.empty(), _tagged([10.0]), _tagged([])[np.zeros(0, bool)], _tagged([20.0])])
    _assert_aligned(d, [10.0, 20.0])
    assert Detections.concat([Detections.empty(), _tagged([])]).data == {}
    assert len(Detections.concat([])) == 0


def test_concat_of_parts_with_different_extras_is_refused_naming_the_keys():
    other = Detections(np.zeros((1, 4)), [0.5], [0], data={"colour": np.zeros((1, 3))})
    with pytest.raises(ValueError, match=r"\['embedding', 'x'\].*\['colour'\]"):
        Detections.concat([_tagged([10.0]), other])
    with pytest.raises(ValueError, match=r"\['embedding', 'x'\].*\[\]"):
        Detections.concat([_tagged([10.0]), Detections(np.zeros((1, 4)), [0.5], [0])])
