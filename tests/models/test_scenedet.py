"""The trained SceneDet versions in configs/models: they load, split, share nothing they
should not, and find the objects of a frame rendered from a held-out seed."""

import numpy as np
import pytest

from engine.engine import Engine
from engine.requests import Request
from models.detection_eval import box_iou
from models.repository import ModelRepository
from sample_videos.render import RenderConfig, Renderer
from vigil.settings import MODELS_DIR

CLASSES = ("person", "car", "bike")


@pytest.fixture(scope="module")
def engine():
    with Engine(ModelRepository(MODELS_DIR), "cpu") as e:
        e.load("scenedet")
        yield e


def test_both_versions_load_with_labels_and_three_fragments(engine):
    models = engine.models()["scenedet"]
    assert sorted(models["versions"]) == [1, 2]
    assert models["labels"] == {"stable": 1, "canary": 2}
    for v in (1, 2):
        names = [f["name"] for f in models["versions"][v]["fragments"]]
        parents = {f["name"]: f["parent"] for f in models["versions"][v]["fragments"]}
        assert names == ["backbone", "person_head", "vehicle_head"]
        assert parents == {"backbone": None, "person_head": "backbone", "vehicle_head": "backbone"}
        assert models["versions"][v]["random_weights"] is False


@pytest.mark.parametrize("version", [1, 2])
def test_detects_the_objects_of_a_held_out_frame(engine, version):
    frames = [f for _, f in zip(range(3), Renderer(RenderConfig(seed=9300)).frames(every=40))]
    found = total = 0
    for frame in frames:
        result = engine.submit(Request("t", "scenedet", frame.image, engine.clock(), 60_000.0, version)).result(60)
        dets = result.detections
        dets = dets[dets.confidence >= 0.3]
        for c, name in enumerate(CLASSES):
            gt = np.array([o["xyxy"] for o in frame.objects if o["class"] == name and o["visible"] >= 0.6],
                          np.float32).reshape(-1, 4)
            mine = dets.xyxy[dets.class_id == c]
            total += len(gt)
            if len(gt) and len(mine):
                found += int((box_iou(gt, mine).max(axis=1) >= 0.5).sum())
    assert total >= 15  # a busy street
    assert found / total >= 0.85, f"version {version} found {found} of {total}"


def test_people_only_requests_run_only_the_person_head(engine):
    frame = next(Renderer(RenderConfig(seed=9301)).frames()).image
    result = engine.submit(Request("t", "scenedet", frame, engine.clock(), 60_000.0, 2, labels=("person",))).result(60)
    assert set(result.outputs) == {"person_head"}
    assert set(result.detections.class_id.tolist()) <= {0}


def test_a_group_of_outputs_is_postprocessed_as_each_alone(engine, monkeypatch):
    """`postprocess_many` decodes a CenterNet head once for a group of items of one frame
    size, and gives each the detections `postprocess` gives it alone."""
    import torch

    import models.scenedet as scenedet

    model = engine.manager.versions["scenedet"][2].model
    gen = torch.Generator().manual_seed(7)
    outputs = [{"heatmap": torch.randn(1, 48, 80, generator=gen) * 3, "offset": torch.rand(2, 48, 80, generator=gen),
                "size": torch.randn(2, 48, 80, generator=gen)} for _ in range(5)]
    alone = [model.postprocess("person_head", o, (640, 360)) for o in outputs]
    calls = []
    real = scenedet.decode
    monkeypatch.setattr(scenedet, "decode", lambda head, *a, **k: calls.append(len(head["heatmap"])) or real(head, *a, **k))
    grouped = model.postprocess_many("person_head", outputs, [(640, 360)] * 5)
    assert calls == [5]  # one decode for the group
    assert sum(len(d) for d in alone) > 20
    for mine, want in zip(grouped, alone):
        np.testing.assert_array_equal(mine.xyxy, want.xyxy)
        np.testing.assert_array_equal(mine.confidence, want.confidence)
        np.testing.assert_array_equal(mine.class_id, want.class_id)
    calls.clear()  # items of different frame sizes: each on its own
    mixed = model.postprocess_many("person_head", outputs[:2], [(640, 360), (1280, 720)])
    assert calls == [1, 1]
    np.testing.assert_array_equal(mixed[1].xyxy, model.postprocess("person_head", outputs[1], (1280, 720)).xyxy)
