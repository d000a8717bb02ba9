"""coco's detections are the same on every path a user takes to them: gRPC `Predict` to
`vigil serve` (raw pixels), and `vigil run --detections`, as the model called directly
on the same decoded frames, which tests/models/test_tfjs_parity.py holds equal to
TensorFlow.js's own. Boxes within 1 px in frame pixels, scores within 1e-3, the same
classes: the parity test's bar."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from models.registry import load_model
from models.repository import read_spec
from streams import open_source
from support.footage import assert_same_detections, need_coco, need_vtest
from support.processes import run_command
from vigil.grpc_api import GrpcClient

pytestmark = pytest.mark.slow

FRAMES = 6
BOX_PX, SCORE = 1.0, 1e-3


@pytest.fixture(scope="module")
def decoded():
    """vtest.avi's first frames as Vigil decodes them (PyAV), and coco's versions."""
    vtest, coco = need_vtest(), need_coco()
    src = open_source(str(vtest))
    images = []
    for frame in src.frames():
        images.append(frame.image)
        if len(images) == FRAMES:
            break
    src.close()
    models = {v: load_model(read_spec(coco / str(v) / "model.yaml", "coco"), coco / str(v), v, "cpu") for v in (1, 2)}
    return images, models


def rows(detections, labels) -> np.ndarray:
    """[N, 6] x1, y1, x2, y2, score, class index, by score."""
    out = np.array([[*d[:4], d[4], labels.index(d[5])] for d in detections], np.float64).reshape(-1, 6)
    return out[np.argsort(-out[:, 4], kind="stable")]


def direct(model, image) -> np.ndarray:
    d = model.infer(image[None])[0]["model"]
    labels = list(model.spec.labels)
    return rows([(*box, score, labels[c]) for box, score, c in zip(d.xyxy, d.confidence, d.class_id)], labels)


def same(got: np.ndarray, want: np.ndarray, where: str) -> None:
    assert_same_detections(got, want, BOX_PX, SCORE, f"{where}: the model's own")


@pytest.mark.parametrize("version", [1, 2])
def test_grpc_predict_gives_what_the_model_gives(server, decoded, version):
    images, models = decoded
    model = models[version]
    labels = list(model.spec.labels)
    client = GrpcClient(f"127.0.0.1:{server.grpc_port}", timeout_s=120)
    try:
        for i in (0, FRAMES - 1):
            reply = client.predict("coco", images[i], version=version, raw=True, slo_ms=60_000, priority=10)
            assert reply.model_spec.version == version
            got = rows([(d.x0, d.y0, d.x1, d.y1, d.confidence, d.label) for d in reply.detections], labels)
            want = direct(model, images[i])
            assert len(want) >= 3, "vtest.avi has people in view"
            same(got, want, f"Predict coco:{version}, frame {i}")
    finally:
        client.close()


def test_vigil_run_detections_give_what_the_model_gives(tmp_path, decoded):
    import yaml

    images, models = decoded
    model = models[2]  # what an app gets: the latest
    labels = list(model.spec.labels)
    (tmp_path / "app.yaml").write_text(yaml.safe_dump({"name": "everything", "detector": "coco", "slo_ms": 60000}))
    out = tmp_path / "out"
    done = run_command([sys.executable, "-m", "cli", "run", str(need_vtest()), "--app", str(tmp_path / "app.yaml"),
                        "--out", str(out), "--no-video", "--detections", "--max-frames", str(FRAMES), "-q"], 300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = [json.loads(line) for line in (out / "detections.jsonl").read_text().splitlines()]
    assert [r["frame_id"] for r in found] == list(range(FRAMES))
    for row, image in zip(found, images):
        got = rows([(*d["box"], d["score"], d["label"]) for d in row["detections"]], labels)
        same(got, direct(model, image), f"vigil run --detections, frame {row['frame_id']}")


def test_a_people_counter_and_a_vehicle_counter_on_one_camera_run_coco_once_a_frame(tmp_path):
    from apps.spec import load_spec
    from runtime.offline import RunOptions, run_offline

    specs = [load_spec("people-counter"), load_spec("vehicle-counter")]
    assert {s.detector for s in specs} == {"coco"} and len({s.fps for s in specs}) == 1
    summary = run_offline(str(need_vtest()), specs, RunOptions(tmp_path, video=False, max_frames=60))
    inferences = {name: app["inferences"] for name, app in summary["apps"].items()}
    assert inferences["people-counter"] == inferences["vehicle-counter"] >= 25, inferences
    (fragment, batches), = summary["batch_sizes"].items()
    assert fragment.startswith("coco")
    # each frame both apps asked for ran through the network once
    assert sum(int(size) * n for size, n in batches.items()) == inferences["people-counter"], batches
