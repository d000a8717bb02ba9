"""torchvision detectors through `adapter: torchvision`: with seeded random weights
(nothing can be downloaded here) and a low score threshold, so that there are many
boxes, Vigil's detections on a bundled frame equal the model called directly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision

from engine.engine import Engine
from engine.requests import Request
from models.repository import ModelRepository, RepositoryError
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


def write_detector(root, arch: str, config: dict, seed: int = 7, split=(), name: str = "det",
                   backbone_of: torch.nn.Module | None = None) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = torchvision.models.get_model(arch, weights=None, weights_backbone=None, num_classes=CLASSES,
                                         **config).eval()
    if backbone_of is not None:
        model.backbone.load_state_dict(backbone_of.backbone.state_dict())
    folder = write_model(root, name, 1, {"adapter": "torchvision", "arch": arch, "factory": None,
                                          "weights": "model.pt", "split": list(split), "output": "detections",
                                          "config": {"num_classes": CLASSES, **config},
                                          "labels": ["__background__", "person", "car", "bike", "bus"],
                                          "input": {"profile_frame": [360, 640]}, "batch_sizes": [1]},
                         state={})
    torch.save(model.state_dict(), folder / "model.pt")
    return model


def direct(model: torch.nn.Module, frame: np.ndarray) -> dict:
    with torch.inference_mode():
        return model([torch.from_numpy(frame).permute(2, 0, 1).float().div(255.0)])[0]


def assert_equal(got, want: dict) -> None:
    assert len(want["boxes"]) > 10  # random weights at a low threshold: plenty to compare
    assert len(got) == len(want["boxes"])
    np.testing.assert_allclose(got.xyxy, want["boxes"].numpy(), atol=1.0)
    np.testing.assert_allclose(got.confidence, want["scores"].numpy(), atol=1e-4)
    np.testing.assert_array_equal(got.class_id, want["labels"].numpy())


@pytest.mark.slow
@pytest.mark.parametrize("split", [(), ("backbone", "head")], ids=["whole", "split"])
@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_detections_equal_the_model_called_directly(tmp_path, frame, arch, split):
    model = write_detector(tmp_path, arch, ARCHS[arch], split=split)
    with Engine(ModelRepository(tmp_path), "cpu") as engine:
        engine.load("det")
        got = engine.submit(Request("t", "det", frame, engine.clock(), 600_000.0)).result(timeout=300).detections
        fragments = sorted(s.label for s in engine.manager.sessions.values())
    assert fragments == (["det/backbone", "det/head"] if split else ["det/model"])
    assert_equal(got, direct(model, frame))


@pytest.mark.slow
def test_detectors_with_one_backbone_share_its_fragment(tmp_path, frame):
    arch = "fasterrcnn_mobilenet_v3_large_320_fpn"
    split = ("backbone", "head")
    a = write_detector(tmp_path, arch, ARCHS[arch], split=split, name="det")
    b = write_detector(tmp_path, arch, ARCHS[arch], seed=8, split=split, name="other", backbone_of=a)
    with Engine(ModelRepository(tmp_path), "cpu") as engine:
        engine.load("det")
        engine.load("other")
        sessions = list(engine.manager.sessions.values())
        futures = [engine.submit(Request(n, n, frame, engine.clock(), 600_000.0, input_key="f1"))
                   for n in ("det", "other")]
        got = [f.result(timeout=300).detections for f in futures]
    assert len(sessions) == 3  # one backbone, two heads
    assert_equal(got[0], direct(a, frame))
    assert_equal(got[1], direct(b, frame))


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
