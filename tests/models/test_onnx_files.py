"""ONNX files that fix their own shapes and name their outputs (an ssdlite-style export:
boxes, scores and labels per image, batch 1)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.engine import Engine
from engine.requests import Request
from models.repository import ModelRepository, RepositoryError
from repo import write_model

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

BOXES = np.array([[10, 8, 30, 40], [50, 20, 90, 60], [0, 0, 5, 5]], np.float32)  # in the 64x96 input
SCORES = np.array([0.9, 0.6, 0.1], np.float32)
LABELS = np.array([1, 2, 1], np.int64)
FRAME = np.zeros((128, 192, 3), np.uint8)  # twice the input: boxes come back doubled


def save_detector(path) -> None:
    """Input [1, 3, 64, 96]; outputs `det_boxes` [3, 4], `det_scores` [3], `det_labels` [3]."""
    consts = [numpy_helper.from_array(a, n) for a, n in ((BOXES, "b"), (SCORES, "s"), (LABELS, "l"))]
    zero = numpy_helper.from_array(np.zeros((), np.float32), "zero")
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], keepdims=0), helper.make_node("Mul", ["m", "zero"], ["z"]),
             helper.make_node("Add", ["b", "z"], ["det_boxes"]), helper.make_node("Add", ["s", "z"], ["det_scores"]),
             helper.make_node("Identity", ["l"], ["det_labels"])]
    graph = helper.make_graph(nodes, "ssd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 96])],
                              [helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, [3, 4]),
                               helper.make_tensor_value_info("det_scores", TensorProto.FLOAT, [3]),
                               helper.make_tensor_value_info("det_labels", TensorProto.INT64, [3])],
                              consts + [zero])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def write(root, **spec) -> None:
    folder = root / "ssd" / "1"
    folder.mkdir(parents=True, exist_ok=True)
    save_detector(folder / "model.onnx")
    write_model(root, "ssd", 1, {"adapter": "onnx", "factory": None, "weights": "model.onnx", "split": [],
                                 "output": "detections", "labels": ["__background__", "person", "car"],
                                 "outputs": {"boxes": "det_boxes", "scores": "det_scores", "labels": "det_labels"},
                                 "input": {"profile_frame": [128, 192]}, "postprocess": {"min_score": 0.3},
                                 **spec})


def test_named_outputs_and_a_fixed_batch_and_size_come_from_the_file(tmp_path):
    write(tmp_path)  # model.yaml keeps the default batch sizes [1, 2, 4, 8, 16] and gives no size
    with Engine(ModelRepository(tmp_path), "cpu") as engine:
        engine.load("ssd")
        futures = [engine.submit(Request(f"a{i}", "ssd", FRAME, engine.clock(), 600_000.0)) for i in range(5)]
        results = [f.result(timeout=120).detections for f in futures]  # five at once, run one at a time
        spec = engine.manager.resolve("ssd", None).model.spec
    assert spec.batch_sizes == [1] and spec.input.size == (64, 96)
    for dets in results:
        np.testing.assert_allclose(dets.xyxy, BOXES[:2] * 2)
        np.testing.assert_allclose(dets.confidence, SCORES[:2])
        np.testing.assert_array_equal(dets.class_id, LABELS[:2])


@pytest.mark.parametrize("spec, says", [
    ({"input": {"size": [32, 32], "profile_frame": [128, 192]}},
     r"input.size: model.onnx takes a fixed \[height, width\] of \[64, 96\]; model.yaml says \[32, 32\]"),
    ({"input": {"scale": 0.5, "profile_frame": [128, 192]}}, "give input.size or input.letterbox instead"),
    ({"outputs": {"boxes": "det_boxes", "scores": "nope", "labels": "det_labels"}},
     "has no output 'nope' \\(its outputs: det_boxes, det_scores, det_labels\\)"),
])
def test_a_model_yaml_that_disagrees_with_the_file_is_named(tmp_path, spec, says):
    write(tmp_path, **spec)
    with Engine(ModelRepository(tmp_path), "cpu") as engine:
        with pytest.raises(RepositoryError, match=says):
            engine.load("ssd")


def test_named_outputs_need_all_three_roles(tmp_path):
    write(tmp_path, outputs={"boxes": "det_boxes"})
    with pytest.raises(RepositoryError, match=r"outputs: name the outputs \['boxes', 'scores', 'labels'\]"):
        ModelRepository(tmp_path).spec("ssd", 1)
