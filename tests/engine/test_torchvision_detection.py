"""torchvision detectors through `adapter: torchvision`: with seeded random weights
(nothing can be downloaded here) and a low score threshold, so that there are many
boxes, Vigil's detections on a bundled frame equal the model called directly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision

from engine.engine import Engine, Request
from engine.repository import ModelRepository, RepositoryError
from repo import write_model
from support.clips import BUNDLED

ARCHS = {
    "fasterrcnn_mobilenet_v3_large_320_fpn": {"box_score_thresh": 0.0},
    "ssdlite320_mobilenet_v3_large": {"score_thresh": 0.001},
    "retinanet_resnet50_fpn": {"score_thresh": 0.01, "min_size": 320, "max_size": 640},
}
CLASSES = 5


@pytest.fixture(scope="module")
def frame() -> np.ndarray:
    import av

    with av.open(str(BUNDLED[0])) as container:
        return next(container.decode(video=0)).to_ndarray(format="rgb24")


def write_detector(root, arch: str, config: dict, seed: int = 7) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = torchvision.models.get_model(arch, weights=None, weights_backbone=None, num_classes=CLASSES,
                                         **config).eval()
    folder = write_model(root, "det", 1, {"adapter": "torchvision", "arch": arch, "factory": None,
                                          "weights": "model.pt", "split": [], "output": "detections",
                                          "config": {"num_classes": CLASSES, **config},
                                          "labels": ["__background__", "person", "car", "bike", "bus"],
                                          "input": {"profile_frame": [360, 640]}, "batch_sizes": [1]},
                         state={})
    torch.save(model.state_dict(), folder / "model.pt")
    return model


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_detections_equal_the_model_called_directly(tmp_path, frame, arch):
    model = write_detector(tmp_path, arch, ARCHS[arch])
    with torch.inference_mode():
        want = model([torch.from_numpy(frame).permute(2, 0, 1).float().div(255.0)])[0]
    with Engine(ModelRepository(tmp_path), "cpu") as engine:
        engine.load("det")
        got = engine.submit(Request("t", "det", frame, engine.clock(), 600_000.0)).result(timeout=300).detections
    assert len(want["boxes"]) > 10  # random weights at a low threshold: plenty to compare
    assert len(got) == len(want["boxes"])
    np.testing.assert_allclose(got.xyxy, want["boxes"].numpy(), atol=1.0)
    np.testing.assert_allclose(got.confidence, want["scores"].numpy(), atol=1e-4)
    np.testing.assert_array_equal(got.class_id, want["labels"].numpy())


def test_labels_must_name_every_class_with_the_background_first(tmp_path):
    write_model(tmp_path, "det", 1, {"adapter": "torchvision", "arch": "ssdlite320_mobilenet_v3_large",
                                     "factory": None, "weights": "random", "split": [], "output": "detections",
                                     "config": {"num_classes": 3}, "labels": ["person", "car"],
                                     "batch_sizes": [1]})
    with Engine(ModelRepository(tmp_path), "cpu") as engine:
        with pytest.raises(RepositoryError, match="has 3 classes .* labels lists 2"):
            engine.load("det")


def test_an_unknown_architecture_lists_the_detectors(tmp_path):
    write_model(tmp_path, "det", 1, {"adapter": "torchvision", "arch": "yolov99", "factory": None,
                                     "weights": "random", "split": [], "batch_sizes": [1]})
    with Engine(ModelRepository(tmp_path), "cpu") as engine:
        with pytest.raises(RepositoryError, match="unknown torchvision architecture 'yolov99'.*ssdlite320"):
            engine.load("det")
