"""gRPC round trips against a real `vigil serve`: Predict, StreamBlocks, GetModelStatus,
and auth."""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest

from streams import open_source
from support.processes import VigilServer
from vigil.grpc_api import GrpcClient, encode_image
from vigil.proto import vigil_pb2 as pb


@pytest.fixture(scope="module")
def frames(bundled_clips):
    clip = bundled_clips[0]
    truth = json.loads(clip.with_name(clip.stem + ".gt.json").read_text())
    src = open_source(str(clip))
    out = []
    for f in src.frames():
        out.append(f.image)
        if len(out) == 60:
            break
    src.close()
    return out, truth


def iou(a, b) -> float:
    x0, y0, x1, y1 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x1 - x0) * max(0.0, y1 - y0)
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def test_predict_finds_the_objects_of_a_frame(server, frames):
    images, truth = frames
    client = GrpcClient(f"127.0.0.1:{server.grpc_port}")
    i = 59
    gt = [(o["xyxy"], o["class"]) for o in truth["frames"][i]["objects"] if o["class"] in ("car", "person", "bike")]
    assert gt, "the frame has objects"
    for raw in (False, True):
        # ahead of the full-rate stream the server also runs (on a busy machine it overloads
        # two cores, and earliest-deadline-first would serve a long SLO only at its end)
        reply = client.predict("scenedet", images[i], version="stable", raw=raw, slo_ms=5000, priority=10)
        assert reply.model_spec.version == 1
        found = [((d.x0, d.y0, d.x1, d.y1), d.label) for d in reply.detections if d.confidence >= 0.3]
        matched = sum(any(iou(box, fb) > 0.5 and cls == fl for fb, fl in found) for box, cls in gt)
        assert matched >= 0.6 * len(gt), (found, gt)
    client.close()


def test_predict_errors_have_status_codes(server, frames):
    client = GrpcClient(f"127.0.0.1:{server.grpc_port}")
    with pytest.raises(grpc.RpcError) as err:
        client.predict("nosuch", frames[0][0])
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as err:
        client.stub.Predict(pb.PredictRequest(model_spec=pb.ModelSpec(name="scenedet"),
                                              image=pb.Image(encoded=b"not a jpeg")))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "encoded" in err.value.details()
    bad = pb.Image(pixels=pb.Tensor(shape=[4, 4, 3], dtype="uint8", data=b"\0" * 10))
    with pytest.raises(grpc.RpcError) as err:
        client.stub.Predict(pb.PredictRequest(model_spec=pb.ModelSpec(name="scenedet"), image=bad))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    for slo_ms in (float("inf"), float("nan"), 1e9, -1):
        with pytest.raises(grpc.RpcError) as err:
            client.predict("scenedet", frames[0][0], slo_ms=slo_ms)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "slo_ms" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        client.predict("scenedet", frames[0][0], version="nolabel")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    client.close()


def test_stream_blocks_returns_a_result_per_frame(server, frames):
    images, _ = frames
    client = GrpcClient(f"127.0.0.1:{server.grpc_port}")

    def blocks():
        for b in range(3):
            yield pb.Block(stream_id="remote", block_id=b, model_spec=pb.ModelSpec(name="scenedet", version=2),
                           slo_ms=5000, labels=["car"],
                           frames=[pb.Frame(frame_id=b * 4 + k, pts_ms=(b * 4 + k) * 66.7,
                                            image=encode_image(images[b * 4 + k])) for k in range(4)])

    results = list(client.stream_blocks(blocks()))
    assert [r.block_id for r in results] == [0, 1, 2]
    assert [f.frame_id for r in results for f in r.frames] == list(range(12))
    assert all(r.version == 2 for r in results)
    labels = {d.label for r in results for f in r.frames for d in f.detections}
    assert labels <= {"car", "bike"} and "car" in labels  # only the vehicle head ran
    client.close()


def test_model_status(server):
    client = GrpcClient(f"127.0.0.1:{server.grpc_port}")
    status = client.model_status("scenedet")
    assert [v.version for v in status.versions] == [1, 2]
    assert {v.state for v in status.versions} <= {"AVAILABLE", "ON_DISK"}
    assert status.labels["stable"] == 1
    assert [v.version for v in client.model_status("scenedet", "stable").versions] == [1]
    client.close()


@pytest.mark.slow
def test_grpc_auth(tmp_path):
    # its own: API keys are the whole server's (the shared one runs without)
    srv = VigilServer(tmp_path / "data", api_keys="grpc-key").start()
    try:
        anonymous = GrpcClient(f"127.0.0.1:{srv.grpc_port}")
        with pytest.raises(grpc.RpcError) as err:
            anonymous.model_status("scenedet")
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        keyed = GrpcClient(f"127.0.0.1:{srv.grpc_port}", api_key="grpc-key")
        assert keyed.model_status("scenedet").versions
        wrong = GrpcClient(f"127.0.0.1:{srv.grpc_port}", api_key="nope")
        with pytest.raises(grpc.RpcError) as err:
            wrong.predict("scenedet", np.zeros((8, 8, 3), np.uint8))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        srv.stop()
