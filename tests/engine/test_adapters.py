"""Each adapter loads a real file and runs through the engine."""

import numpy as np
import pytest
import torch

from engine.engine import Engine
from engine.requests import Request
from models.repository import ModelRepository
from repo import TINY_INPUT, write_model
from tiny_models import Chain

FRAME = np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)


def run_once(root, name, frame=FRAME):
    with Engine(ModelRepository(root), "cpu") as engine:
        engine.load(name)
        result = engine.submit(Request("t", name, frame, engine.clock(), 60_000.0)).result(timeout=60)
        return result, engine


def test_torchvision_split_into_backbone_and_head(tmp_path):
    write_model(tmp_path, "rn", 1, {"adapter": "torchvision", "arch": "resnet18", "factory": None,
                                    "weights": "random", "seed": 3, "config": {"num_classes": 5},
                                    "split": ["backbone", "head"], "output": "classification",
                                    "batch_sizes": [1, 2]})
    result, engine = run_once(tmp_path, "rn")
    probs = result.outputs["head"].probs
    assert result.classes.top(1)[0][0] == int(probs.argmax())
    assert probs.shape == (5,) and probs.sum() == pytest.approx(1.0, abs=1e-4)
    labels = sorted(i.label for i in engine.manager.sessions.values())
    assert labels == ["rn/backbone", "rn/head"]
    assert engine.models()["rn"]["versions"][1]["random_weights"] is True


def _chain_model(tmp_path, adapter, filename, save):
    torch.manual_seed(0)
    model = Chain().eval()
    folder = tmp_path / "c" / "1"
    folder.mkdir(parents=True)
    save(model, folder / filename)
    write_model(tmp_path, "c", 1, {"adapter": adapter, "factory": None, "weights": filename, "split": [],
                                   "input": TINY_INPUT, "batch_sizes": [1, 2]})
    x = torch.from_numpy(FRAME).permute(2, 0, 1).float().div(255)[None]
    return model(x)[0].detach().numpy()


def test_torchscript_file(tmp_path):
    expected = _chain_model(tmp_path, "torchscript", "model.ts", lambda m, p: torch.jit.script(m).save(str(p)))
    result, _ = run_once(tmp_path, "c")
    np.testing.assert_allclose(result.outputs["model"], expected, rtol=1e-4, atol=1e-5)


def test_torch_export_file(tmp_path):
    def save(model, path):
        torch.export.save(torch.export.export(model, (torch.rand(2, 3, 32, 32),),
                                              dynamic_shapes=({0: torch.export.Dim.AUTO},)), str(path))
    expected = _chain_model(tmp_path, "torch_export", "model.pt2", save)
    result, _ = run_once(tmp_path, "c")
    np.testing.assert_allclose(result.outputs["model"], expected, rtol=1e-4, atol=1e-5)


def test_a_torch_export_files_fixed_batch_and_size_are_served(tmp_path):
    torch.manual_seed(0)
    model = Chain().eval()
    folder = tmp_path / "c" / "1"
    folder.mkdir(parents=True)
    torch.export.save(torch.export.export(model, (torch.rand(2, 3, 32, 32),)), str(folder / "model.pt2"))
    # model.yaml gives no size and the default batch sizes: the file's [2, 3, 32, 32] decides
    write_model(tmp_path, "c", 1, {"adapter": "torch_export", "factory": None, "weights": "model.pt2", "split": [],
                                   "input": {"profile_frame": [32, 32]}, "batch_sizes": [1, 2, 4]})
    frames = [np.random.default_rng(i).integers(0, 255, (32, 32, 3), dtype=np.uint8) for i in range(3)]
    with Engine(ModelRepository(tmp_path), "cpu") as engine:
        engine.load("c")
        futures = [engine.submit(Request(f"a{i}", "c", f, engine.clock(), 600_000.0)) for i, f in enumerate(frames)]
        results = [f.result(timeout=120).outputs["model"] for f in futures]  # a batch of 2 and a padded 1
        spec = engine.manager.resolve("c", None).model.spec
    assert spec.batch_sizes == [2] and spec.input.size == (32, 32)
    for frame, got in zip(frames, results):
        x = torch.from_numpy(frame).permute(2, 0, 1).float().div(255)[None]
        np.testing.assert_allclose(got, model(x)[0].detach().numpy(), rtol=1e-4, atol=1e-5)


def test_onnx_file(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    # y = global average of each channel: [N, 3, H, W] -> [N, 3, 1, 1] -> [N, 3]
    graph = helper.make_graph(
        [helper.make_node("GlobalAveragePool", ["x"], ["p"]),
         helper.make_node("Flatten", ["p"], ["y"], axis=1)],
        "avg", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    folder = tmp_path / "o" / "1"
    folder.mkdir(parents=True)
    onnx.save(model, str(folder / "model.onnx"))
    write_model(tmp_path, "o", 1, {"adapter": "onnx", "factory": None, "weights": "model.onnx", "split": [],
                                   "input": TINY_INPUT, "batch_sizes": [1, 2]})
    result, _ = run_once(tmp_path, "o")
    np.testing.assert_allclose(result.outputs["model"], FRAME.reshape(-1, 3).mean(0) / 255, rtol=1e-4)


def test_corrupt_onnx_file_is_named(tmp_path):
    folder = tmp_path / "o" / "1"
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(b"garbage")
    write_model(tmp_path, "o", 1, {"adapter": "onnx", "factory": None, "weights": "model.onnx", "split": []})
    from models.repository import RepositoryError
    with pytest.raises(RepositoryError, match="model.onnx is not a valid ONNX model"):
        run_once(tmp_path, "o")


@pytest.mark.parametrize("adapter, config", [("opencv_hog", {"upscale": 1.0}),
                                              ("opencv_haar", {"cascade": "haarcascade_fullbody.xml"})])
def test_opencv_detectors(tmp_path, adapter, config):
    write_model(tmp_path, "cv", 1, {"adapter": adapter, "factory": None, "weights": None, "split": [],
                                    "config": config, "output": "detections", "labels": ["person"],
                                    "batch_sizes": [1]})
    frame = np.full((160, 96, 3), 128, np.uint8)
    result, _ = run_once(tmp_path, "cv", frame)
    assert len(result.detections) == 0  # a flat grey frame has nobody in it


def test_opencv_bad_cascade_is_named(tmp_path):
    write_model(tmp_path, "cv", 1, {"adapter": "opencv_haar", "factory": None, "weights": None, "split": [],
                                    "config": {"cascade": "nope.xml"}, "output": "detections"})
    from models.repository import RepositoryError
    with pytest.raises(RepositoryError, match="config: cascade: 'nope.xml' is not one of OpenCV's cascades"):
        run_once(tmp_path, "cv")


def test_a_classifier_whose_output_does_not_fit_its_labels_fails_its_load(tmp_path):
    from models.repository import RepositoryError

    write_model(tmp_path, "rn", 1, {"adapter": "torchvision", "arch": "resnet18", "factory": None,
                                    "weights": "random", "config": {"num_classes": 5}, "split": [],
                                    "output": "classification", "labels": ["a", "b", "c"], "batch_sizes": [1]})
    with pytest.raises(RepositoryError, match=r"rn/1/model.yaml: output: a classification output is \[3 classes\]"
                                              r" per image .*; one image's was \[5\]"):
        run_once(tmp_path, "rn")
