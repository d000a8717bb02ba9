"""Hugging Face detectors through `adapter: transformers`: random-initialised DETR and
RT-DETR (from_config; nothing can be downloaded here) saved with save_pretrained, and
Vigil's detections on a bundled frame equal the processor and model called directly,
decoded by `post_process_object_detection`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.engine import Engine
from engine.requests import Request
from models.repository import ModelRepository, RepositoryError
from repo import write_model
from support.clips import BUNDLED

LABELS = {0: "person", 1: "car", 2: "bike", 3: "bus"}
BACKBONE = {"embedding_size": 16, "hidden_sizes": [16, 32, 64, 128], "depths": [1, 1, 1, 1]}
THRESHOLD = 0.05


def detr():
    from transformers import DetrConfig, DetrForObjectDetection, DetrImageProcessor

    cfg = DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False, id2label=LABELS, d_model=64,
                     encoder_layers=1, decoder_layers=1, encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=30,
                     backbone_config={"model_type": "resnet", **BACKBONE, "out_features": ["stage4"]})
    return DetrForObjectDetection(cfg), DetrImageProcessor(size={"shortest_edge": 160, "longest_edge": 320})


def rt_detr():
    from transformers import RTDetrConfig, RTDetrForObjectDetection, RTDetrImageProcessor

    cfg = RTDetrConfig(id2label=LABELS, d_model=64, encoder_hidden_dim=64, encoder_in_channels=[32, 64, 128],
                       decoder_in_channels=[64, 64, 64],
                       decoder_layers=1, num_queries=30, num_denoising=0, encoder_ffn_dim=64, decoder_ffn_dim=64,
                       backbone_config={"model_type": "rt_detr_resnet", **BACKBONE,
                                        "out_features": ["stage2", "stage3", "stage4"]})
    return RTDetrForObjectDetection(cfg), RTDetrImageProcessor(size={"height": 320, "width": 320})


BUILDERS = {"detr": detr, "rt_detr": rt_detr}


@pytest.fixture(scope="module")
def frame() -> np.ndarray:
    import av

    with av.open(str(BUNDLED[1])) as container:
        return next(container.decode(video=0)).to_ndarray(format="rgb24")


def save(root, name: str):
    torch.manual_seed(3)
    model, processor = BUILDERS[name]()
    model.eval()
    folder = write_model(root, "hf", 1, {"adapter": "transformers", "factory": None, "weights": None, "split": [],
                                         "output": "detections", "input": {"profile_frame": [360, 640]},
                                         "postprocess": {"min_score": THRESHOLD}, "batch_sizes": [1, 2]})
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return model, processor


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_detections_equal_post_process_object_detection(tmp_path, frame, name):
    model, processor = save(tmp_path, name)
    with torch.no_grad():
        inputs = processor(images=frame, return_tensors="pt")
        want = processor.post_process_object_detection(model(**inputs), threshold=THRESHOLD,
                                                       target_sizes=[frame.shape[:2]])[0]
    with Engine(ModelRepository(tmp_path), "cpu") as engine:
        engine.load("hf")
        futures = [engine.submit(Request(f"a{i}", "hf", frame, engine.clock(), 600_000.0)) for i in range(3)]
        results = [f.result(timeout=300) for f in futures]  # batched together where the scheduler can
        labels = engine.manager.resolve("hf", None).model.spec.labels
    assert labels == ["person", "car", "bike", "bus"]
    assert len(want["boxes"]) > 3
    for r in results:
        got = r.detections
        assert len(got) == len(want["boxes"])
        np.testing.assert_allclose(got.xyxy, want["boxes"].numpy(), atol=1.0)
        np.testing.assert_allclose(got.confidence, want["scores"].numpy(), atol=1e-4)
        np.testing.assert_array_equal(got.class_id, want["labels"].numpy())


def test_labels_that_disagree_with_the_config_are_named(tmp_path):
    save(tmp_path, "detr")
    folder = tmp_path / "hf" / "1"
    text = (folder / "model.yaml").read_text()
    (folder / "model.yaml").write_text(text + "labels: [a, b]\n")
    with Engine(ModelRepository(tmp_path), "cpu") as engine:
        with pytest.raises(RepositoryError, match="the config's id2label is"):
            engine.load("hf")
