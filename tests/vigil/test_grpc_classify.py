"""A classifier's result reaches gRPC Predict: its top classes with their scores."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from support.clips import BUNDLED
from support.processes import VigilServer, run_command

LABELS = ["bus", "car", "person", "bike", "tree", "sign"]
SPEC = {"name": "cls", "adapter": "torchvision", "arch": "resnet18", "weights": "random", "seed": 5,
        "config": {"num_classes": len(LABELS)}, "split": ["backbone", "head"], "output": "classification",
        "labels": LABELS, "input": {"size": [64, 64], "profile_frame": [360, 640]}, "batch_sizes": [1, 2]}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    repo = tmp_path_factory.mktemp("cls-repo")
    (repo / "cls" / "1").mkdir(parents=True)
    (repo / "cls" / "1" / "model.yaml").write_text(yaml.safe_dump(SPEC))
    # its own: a repository holding the classifier
    server = VigilServer(tmp_path_factory.mktemp("cls-serve") / "data",
                         config={"model_repository": str(repo), "llm_model": None}).start(120)
    yield server, repo
    server.stop()


@pytest.fixture(scope="module")
def frame() -> np.ndarray:
    import av

    with av.open(str(BUNDLED[0])) as container:
        return next(container.decode(video=0)).to_ndarray(format="rgb24")


def test_predict_returns_the_classifiers_top_classes(served, frame):
    from models.registry import load_model
    from models.repository import ModelRepository
    from vigil.grpc_api import GrpcClient

    server, repo = served
    model = load_model(ModelRepository(repo).spec("cls", 1), repo / "cls" / "1", 1, "cpu")
    probs = model.infer(frame[None])[0]["head"].probs
    want = [(LABELS[i], float(probs[i])) for i in np.argsort(-probs)[:5]]
    client = GrpcClient(f"127.0.0.1:{server.grpc_port}", timeout_s=120)
    try:
        reply = client.predict("cls", frame, slo_ms=60_000, priority=10, raw=True)  # the same pixels
    finally:
        client.close()
    got = [(c.label, c.score) for c in reply.classifications]
    assert [g[0] for g in got] == [w[0] for w in want]
    np.testing.assert_allclose([g[1] for g in got], [w[1] for w in want], atol=1e-5)
    assert len(reply.detections) == 0


def test_vigil_run_carries_the_classifiers_classes_into_events_and_summary(served, tmp_path):
    import json
    import sys

    import av

    from models.registry import load_model
    from models.repository import ModelRepository

    _, repo = served
    (tmp_path / "app.yaml").write_text(yaml.safe_dump({"name": "scene", "detector": "cls", "slo_ms": 60000,
                                                       "min_confidence": 0.0, "top_k": 3}))
    out = tmp_path / "out"
    done = run_command([sys.executable, "-m", "cli", "run", str(BUNDLED[0]), "--models", str(repo), "--app",
                        str(tmp_path / "app.yaml"), "--out", str(out), "--no-video", "--detections", "--max-frames",
                        "8", "-q"], 300)
    assert done.returncode == 0, done.stderr
    model = load_model(ModelRepository(repo).spec("cls", 1), repo / "cls" / "1", 1, "cpu")
    with av.open(str(BUNDLED[0])) as container:
        frames = [f.to_ndarray(format="rgb24") for f, _ in zip(container.decode(video=0), range(8))]
    want = [[LABELS[c] for c, _ in model.infer(f[None])[0]["head"].top(3)] for f in frames]
    rows = [json.loads(line) for line in (out / "detections.jsonl").read_text().splitlines()]
    assert [[label for label, _ in r["classes"]] for r in rows] == want
    best = [w[0] for w in want]
    changes = [e for e in map(json.loads, (out / "events.jsonl").read_text().splitlines())
               if e["type"] == "class_change"]
    assert [e["class"] for e in changes] == [b for i, b in enumerate(best) if i == 0 or best[i - 1] != b]
    summary = json.loads((out / "summary.json").read_text())["apps"]["scene"]["classes"]
    assert summary["frames"] == {b: best.count(b) for b in sorted(set(best))} and summary["current"] == best[-1]
