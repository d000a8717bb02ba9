"""coco's detections, from the native TensorFlow.js loader (models/tfjs) and decoders
(models/anchor_free.py), equal TensorFlow.js's own: the same graph files run by
@tensorflow/tfjs-backend-cpu (pure JavaScript) on node, decoded and suppressed in
JavaScript (tests/support/tfjs_reference.mjs), on real frames of vtest.avi. Both get
the same network input, the frame as Vigil resized it; boxes are compared in frame pixels."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.registry import load_model
from models.repository import read_spec
from support.footage import assert_same_detections, frames, need_coco, need_tfjs_reference, need_vtest
from support.processes import ROOT, run_command

pytestmark = pytest.mark.slow

FRAMES = [40, 200, 360, 520, 680]  # about 10 s apart, from 3 to 9 people in view
# what each version's graph computes beside its decoded detections, compared raw on the first frame
RAW = {1: {"detections": "tower_0/detections", "heatmap": "tower_0/keypoints"},
       2: {f"out{i}": f"Identity{'_' + str(i) if i else ''}" for i in range(6)}}
BOX_PX, SCORE = 1.0, 1e-3


def reference(model, inputs: list[np.ndarray], frame_sizes: list[tuple[int, int]], tmp_path) -> dict:
    spec = model.spec
    files = []
    for i, image in enumerate(inputs):
        files.append(tmp_path / f"input{i}.u8")
        files[-1].write_bytes(np.ascontiguousarray(image).tobytes())
    request = {"model": str(model.folder / spec.weights), "kind": spec.output, "inputs": [str(f) for f in files],
               "hw": list(spec.input.size), "mean": list(spec.input.mean), "std": list(spec.input.std),
               "nchw": spec.output == "gfl", "outputs": RAW[model.version], "raw": list(RAW[model.version])[:1],
               "min_score": spec.postprocess.min_score, "nms_iou": spec.postprocess.nms_iou,
               "max_detections": spec.postprocess.max_detections, "frames": [list(s) for s in frame_sizes],
               "labels": len(spec.labels)}
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    proc = run_command(["node", str(ROOT / "tests/support/tfjs_reference.mjs"), str(path)], 500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((tmp_path / "request.result.json").read_text())


def matched(ours, theirs: np.ndarray) -> None:
    mine = np.concatenate([ours.xyxy, ours.confidence[:, None], ours.class_id[:, None]], 1)
    assert_same_detections(mine, theirs, BOX_PX, SCORE, "TensorFlow.js's")


@pytest.mark.parametrize("version", [1, 2])
def test_coco_detections_equal_tensorflow_js(version, tmp_path):
    vtest, coco = need_vtest(), need_coco()
    need_tfjs_reference()
    model = load_model(read_spec(coco / str(version) / "model.yaml", "coco"), coco / str(version), version, "cpu")
    images = frames(vtest, FRAMES)
    inputs = [model.preprocess(image[None])[0].permute(1, 2, 0).cpu().numpy() for image in images]
    sizes = [(image.shape[1], image.shape[0]) for image in images]
    theirs = reference(model, inputs, sizes, tmp_path)
    ours = model.infer(np.stack(images))  # one batch of five: the batch is no part of the answer
    assert sum(len(t) for t in theirs["detections"]) >= 3 * len(FRAMES), "vtest.avi has people in every frame"
    for frame, found, expected in zip(FRAMES, ours, theirs["detections"]):
        try:
            matched(found["model"], np.array(expected, np.float64).reshape(-1, 6))
        except AssertionError as exc:
            raise AssertionError(f"frame {frame}: {exc}") from None
    # the graph itself, output by output, on the first frame
    module = model.fragments["model"].module
    (key, raw), = theirs["raw"].items()
    import torch

    from models.tfjs.graph import read_graph
    from models.tfjs.module import GraphModule

    full = GraphModule(read_graph(module.path), {key: RAW[version][key]}).eval()
    with torch.no_grad():
        x = model.preprocess(images[0][None])[0][None].float().div(255.0)
        mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in (model.spec.input.mean, model.spec.input.std))
        mine = full((x - mean) / std)[key].numpy()
    assert list(mine.shape) == raw["shape"]
    assert np.abs(mine - np.array(raw["data"], np.float32).reshape(raw["shape"])).max() <= 1e-3
