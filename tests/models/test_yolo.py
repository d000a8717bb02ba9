"""YOLO outputs decoded as Ultralytics decodes them (models/yolo.py).

Models here return a known output whatever the frame (duplicates, a low score,
overlapping boxes of different classes, a box in the letterbox padding), saved as
TorchScript and ONNX files; Vigil's detections are compared with Ultralytics' own
`non_max_suppression` and `scale_boxes` (and its `LetterBox`) on the same output.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from engine.engine import Engine
from engine.requests import Request
from models.repository import ModelRepository, RepositoryError
from repo import write_model
from support.processes import VigilServer, run_command

os.environ.setdefault("YOLO_CONFIG_DIR", "/tmp/vigil-tests-ultralytics")
ultralytics = pytest.importorskip("ultralytics", reason="make install adds ultralytics (no deps) for these tests")
from ultralytics.data.augment import LetterBox  # noqa: E402
from ultralytics.utils.nms import non_max_suppression  # noqa: E402
from ultralytics.utils.ops import scale_boxes  # noqa: E402

LABELS = ["person", "car", "bike"]
INPUT = (320, 320)  # [height, width] the model takes
FRAME = np.random.default_rng(1).integers(0, 255, (180, 320, 3), dtype=np.uint8)  # letterboxed with 70 px bars

# (cx, cy, w, h) in network-input pixels, class scores
BOXES = [((120, 180, 40, 80), (0.90, 0.00, 0.00)),  # a person
         ((122, 181, 40, 80), (0.80, 0.00, 0.00)),  # its duplicate: suppressed
         ((125, 185, 44, 76), (0.00, 0.85, 0.00)),  # a car over the person: another class, kept
         ((250, 150, 30, 30), (0.00, 0.00, 0.20)),  # under min_score
         ((260, 200, 20, 40), (0.10, 0.00, 0.60)),  # a bike
         ((40, 75, 30, 30), (0.50, 0.00, 0.00)),    # a person reaching into the top bar: clipped
         ((300, 240, 24, 24), (0.00, 0.30, 0.00)),  # a small car
         ((301, 241, 24, 24), (0.00, 0.29, 0.00))]  # and its duplicate


def v8_output() -> torch.Tensor:
    rows = [list(box) + list(scores) for box, scores in BOXES]
    return torch.tensor(rows, dtype=torch.float32).T.contiguous()  # [4 + C, N]


def v5_output() -> torch.Tensor:
    """The same candidates with an objectness: class scores s become (s / obj, obj)."""
    rows = []
    for box, scores in BOXES:
        obj = max(scores) / 0.95 if max(scores) else 0.0
        rows.append(list(box) + [obj] + [s / obj if obj else 0.0 for s in scores])
    return torch.tensor(rows, dtype=torch.float32)  # [N, 5 + C]


def end2end_output() -> torch.Tensor:
    rows = []
    for (cx, cy, w, h), scores in BOXES[::2]:  # an NMS-free head has already chosen (one low score stays in)
        rows.append([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, max(scores), int(np.argmax(scores))])
    return torch.tensor(rows, dtype=torch.float32)  # [N, 6]


class Fixed(torch.nn.Module):
    """Returns `out` for every image of the batch (the image only sets the batch size)."""

    def __init__(self, out: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("out", out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out.expand(x.shape[0], -1, -1) + x.mean() * 0


def save_torchscript(out: torch.Tensor, path) -> None:
    torch.jit.script(Fixed(out)).save(str(path))


def save_onnx(out: torch.Tensor, path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    const = numpy_helper.from_array(out[None].numpy(), "const")
    zero = numpy_helper.from_array(np.zeros((), np.float32), "zero")
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["x"], ["m"], keepdims=0),
         helper.make_node("Mul", ["m", "zero"], ["z"]),
         helper.make_node("Add", ["const", "z"], ["y"])],
        "fixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, *INPUT])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, *out.shape])], [const, zero])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


SAVERS = {"torchscript": ("model.ts", save_torchscript), "onnx": ("model.onnx", save_onnx)}


def write_yolo(root, adapter: str, kind: str, out: torch.Tensor, name: str = "yolo", **extra) -> str:
    filename, save = SAVERS[adapter]
    folder = root / name / "1"
    folder.mkdir(parents=True, exist_ok=True)
    save(out, folder / filename)
    write_model(root, name, 1, {"adapter": adapter, "factory": None, "weights": filename, "split": [],
                                  "output": kind, "labels": LABELS, "batch_sizes": [1],
                                  "input": {"letterbox": list(INPUT), "profile_frame": [180, 320]}, **extra})
    return name


def reference(kind: str, out: torch.Tensor, conf=0.25, iou=0.7, max_det=300, agnostic=False) -> np.ndarray:
    """Ultralytics' decode: [K, 6] (x1, y1, x2, y2 in frame pixels, score, class), best first."""
    if kind == "yolov5":  # v5's confidence is class score x objectness; Ultralytics' NMS takes v8's layout
        rows = out.clone()
        out = torch.cat([rows[:, :4], rows[:, 5:] * rows[:, 4:5]], 1).T
    det = non_max_suppression(out[None].clone(), conf, iou, agnostic=agnostic, max_det=max_det,
                              end2end=kind == "yolo_end2end")[0]
    det = det[det[:, 4].argsort(descending=True)]
    det[:, :4] = scale_boxes(INPUT, det[:, :4], FRAME.shape[:2])
    return det.numpy()


def served(root, frame=FRAME):
    with Engine(ModelRepository(root), "cpu") as engine:
        engine.load("yolo")
        result = engine.submit(Request("t", "yolo", frame, engine.clock(), 60_000.0)).result(timeout=60)
    dets = result.outputs["model"]
    order = np.argsort(-dets.confidence, kind="stable")
    return np.column_stack([dets.xyxy[order], dets.confidence[order], dets.class_id[order]])


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert len(got) == len(want), (got, want)
    np.testing.assert_allclose(got[:, :4], want[:, :4], atol=1.0)
    np.testing.assert_allclose(got[:, 4], want[:, 4], atol=1e-4)
    np.testing.assert_array_equal(got[:, 5], want[:, 5])


@pytest.mark.parametrize("adapter", sorted(SAVERS))
@pytest.mark.parametrize("kind, make", [("yolo", v8_output), ("yolov5", v5_output),
                                        ("yolo_end2end", end2end_output)])
def test_detections_equal_ultralytics_decode(tmp_path, adapter, kind, make):
    out = make()
    write_yolo(tmp_path, adapter, kind, out)
    want = reference(kind, out)
    assert_same(served(tmp_path), want)
    if kind == "yolo":  # what the output holds: the duplicate and the low score go, the car stays
        assert sorted(want[:, 5].astype(int).tolist()) == [0, 0, 1, 1, 2]
        assert want[:, 1].min() == 0.0  # the box reaching into the bar is clipped to the frame


def test_postprocess_settings_match_ultralytics_arguments(tmp_path):
    out = v8_output()
    write_yolo(tmp_path, "torchscript", "yolo", out,
               postprocess={"min_score": 0.55, "nms_iou": 0.5, "max_detections": 2, "class_agnostic": True})
    assert_same(served(tmp_path), reference("yolo", out, conf=0.55, iou=0.5, max_det=2, agnostic=True))


def test_letterbox_equals_ultralytics_letterbox():
    from models.yolo import letterbox

    for shape in [(180, 320), (360, 640), (480, 270), (101, 77)]:
        frame = np.random.default_rng(shape[0]).integers(0, 255, (*shape, 3), dtype=np.uint8)
        want = LetterBox(new_shape=INPUT, auto=False)(image=frame)
        np.testing.assert_array_equal(letterbox(frame, INPUT), want)


def test_an_output_that_does_not_fit_its_kind_fails_the_load_by_name(tmp_path):
    out = torch.zeros(9, 6)  # 5 classes' worth, where the labels name 3
    write_yolo(tmp_path, "torchscript", "yolo", out)
    with Engine(ModelRepository(tmp_path), "cpu") as engine:
        with pytest.raises(RepositoryError) as exc:
            engine.load("yolo")
    message = str(exc.value)
    assert "yolo/1/model.yaml" in message and "[batch, 4 + 3 classes, boxes]" in message and "[9, 6]" in message


@pytest.mark.parametrize("field, value, says", [
    ("postprocess", {"min_score": float("nan")}, "min_score"),
    ("postprocess", {"nms_iou": 0}, "nms_iou"),
    ("postprocess", {"max_detections": 10 ** 9}, "max_detections"),
    ("input", {"letterbox": [640, 640], "scale": 0.5}, "one of scale, size and letterbox"),
    ("input", {"letterbox": [0, 640]}, "between 1 and 8192"),
    ("labels", [], "needs its class names"),
])
def test_bad_yolo_settings_are_refused_by_field(tmp_path, field, value, says):
    write_yolo(tmp_path, "torchscript", "yolo", v8_output(), **{field: value})
    with pytest.raises(RepositoryError, match=says):
        ModelRepository(tmp_path).spec("yolo", 1)


@pytest.fixture(scope="module")
def yolo_server(tmp_path_factory):
    """`vigil serve` over a repository that holds only the ONNX YOLO model."""
    root = tmp_path_factory.mktemp("yolo-repo")
    write_yolo(root, "onnx", "yolo", v8_output())
    # the same layout with every score under min_score: it never finds anything
    write_yolo(root, "torchscript", "yolo", v8_output() * torch.tensor([1, 1, 1, 1, 0.1, 0.1, 0.1])[:, None], "blind")
    # its own: a repository holding the YOLO models
    server = VigilServer(tmp_path_factory.mktemp("yolo-serve") / "data",
                         config={"model_repository": str(root), "llm_model": None, "quiet_after_s": 4}).start(120)
    yield server
    server.stop()


def test_grpc_predict_returns_ultralytics_detections(yolo_server):
    from vigil.grpc_api import GrpcClient

    client = GrpcClient(f"127.0.0.1:{yolo_server.grpc_port}", timeout_s=120)
    try:
        reply = client.predict("yolo", FRAME, slo_ms=60_000, priority=10)
    finally:
        client.close()
    got = np.array([[d.x0, d.y0, d.x1, d.y1, d.confidence, LABELS.index(d.label)] for d in reply.detections])
    assert_same(got[np.argsort(-got[:, 4], kind="stable")], reference("yolo", v8_output()))


def test_an_app_whose_model_finds_nothing_says_so(yolo_server):
    import httpx

    from support.clips import BUNDLED
    from support.processes import wait_for

    api = httpx.Client(base_url=yolo_server.url, timeout=30)
    api.post("/v1/streams", json={"name": "cam", "url": str(BUNDLED[0]), "options": {"loop": True}}).raise_for_status()
    for name, model in (("sees", "yolo"), ("blind", "blind")):
        api.post("/v1/apps", json={"name": name, "source": "cam", "detector": model, "classes": ["person", "car"],
                                   "slo_ms": 60000, "fps": 3}).raise_for_status()
    wait_for(lambda: api.get("/v1/apps/blind").json()["warning"] is not None, 120, "the blind app's warning")
    warning = api.get("/v1/apps/blind").json()["warning"]
    assert "no detections of ['person', 'car']" in warning and "fit its kind and labels" in warning
    sees = api.get("/v1/apps/sees").json()
    assert sees["status"] == "running" and sees["warning"] is None


@pytest.mark.slow
@pytest.mark.parametrize("kind, make", [("yolo", v8_output), ("yolov5", v5_output),
                                        ("yolo_end2end", end2end_output)])
def test_vigil_run_writes_ultralytics_detections_and_tracks_them(tmp_path, kind, make):
    import json
    import sys

    import yaml

    from runtime.video import VideoWriter

    root = tmp_path / "repo"
    write_yolo(root, "onnx", kind, make())
    clip = tmp_path / "clip.mp4"
    writer = VideoWriter(clip, 10.0, (FRAME.shape[1], FRAME.shape[0]))
    for _ in range(6):
        writer.write(FRAME)
    writer.close()
    (tmp_path / "app.yaml").write_text(yaml.safe_dump({"name": "finder", "detector": "yolo", "slo_ms": 60000,
                                                       "min_confidence": 0.0, "tracker": {"min_hits": 2}}))
    out = tmp_path / "out"
    done = run_command([sys.executable, "-m", "cli", "run", str(clip), "--models", str(root), "--app",
                        str(tmp_path / "app.yaml"), "--out", str(out), "--no-video", "--detections", "-q"], 300)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (out / "detections.jsonl").read_text().splitlines()]
    assert [r["frame_id"] for r in rows] == list(range(6))
    want = reference(kind, make())
    for row in rows:
        got = np.array([[*d["box"], d["score"], LABELS.index(d["label"])] for d in row["detections"]])
        assert_same(got[np.argsort(-got[:, 4], kind="stable")], want)
    summary = json.loads((out / "summary.json").read_text())
    # they reach the app's tracker (the person and the car on it overlap: the tracker may hold them as one)
    assert 1 <= summary["apps"]["finder"]["tracks"] <= len(want)
