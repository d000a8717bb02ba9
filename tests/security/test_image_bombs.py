"""Image bombs and odd tensors over gRPC: refused from the header, before decoding.
(A 631-byte JPEG declaring 30000 x 30000 once took RSS from 813 to 3484 MB.)"""

from __future__ import annotations

import struct
import zlib
from concurrent.futures import ThreadPoolExecutor

import cv2
import grpc
import numpy as np
import pytest

from support.watch import KEY, still_serving, watch
from vigil.grpc_api import GrpcClient
from vigil.proto import vigil_pb2 as pb


def jpeg_declaring(width: int, height: int) -> bytes:
    """A small real JPEG whose frame header claims another size."""
    data = bytearray(cv2.imencode(".jpg", np.zeros((16, 16, 3), np.uint8))[1].tobytes())
    at = data.find(b"\xff\xc0")
    data[at + 5:at + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def png_declaring(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk + struct.pack(">I", zlib.crc32(chunk)) +
            b"\x00\x00\x00\x00IEND\xaeB`\x82")


@pytest.fixture
def client(guarded):
    c = GrpcClient(f"127.0.0.1:{guarded.grpc_port}", api_key=KEY, timeout_s=30)
    yield c
    c.close()


def predict(client: GrpcClient, image: pb.Image):
    return client.stub.Predict(pb.PredictRequest(model_spec=pb.ModelSpec(name="scenedet"), image=image),
                               metadata=client.metadata, timeout=30)


@pytest.mark.parametrize("image,message", [
    (pb.Image(encoded=jpeg_declaring(30000, 30000)), "limits.max_image_pixels"),
    (pb.Image(encoded=jpeg_declaring(65000, 65000)), "limits.max_image_pixels"),
    (pb.Image(encoded=png_declaring(30000, 30000)), "limits.max_image_pixels"),
    (pb.Image(encoded=jpeg_declaring(1, 1)), "too small"),
    (pb.Image(pixels=pb.Tensor(shape=[1, 1, 3], dtype="uint8", data=b"\0" * 3)), "too small"),
    (pb.Image(pixels=pb.Tensor(shape=[1, 5_000_000, 3], dtype="uint8", data=b"\0" * 15_000_000)), "too small"),
    (pb.Image(pixels=pb.Tensor(shape=[5000, 5000, 3], dtype="uint8", data=b"\0" * 75)), "limits.max_image_pixels"),
    (pb.Image(encoded=b"GIF89a" + b"\0" * 100), "not a JPEG or PNG"),
])
def test_bombs_and_odd_shapes_are_invalid_argument(guarded, client, image, message):
    assert len(jpeg_declaring(30000, 30000)) < 700
    with watch(guarded) as w:
        with pytest.raises(grpc.RpcError) as err:
            predict(client, image)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in err.value.details()
    w.held(max_growth_mb=100)


def test_eight_bombs_at_once_cost_nothing(guarded, client):
    bomb = pb.Image(encoded=jpeg_declaring(30000, 30000))
    with watch(guarded) as w, ThreadPoolExecutor(8) as pool:
        def one(_):
            try:
                predict(client, bomb)
            except grpc.RpcError as exc:
                return exc.code()

        codes = list(pool.map(one, range(32)))
    assert set(codes) == {grpc.StatusCode.INVALID_ARGUMENT}
    w.held(max_growth_mb=100)
    frame = np.random.default_rng(0).integers(0, 255, (360, 640, 3), dtype=np.uint8)
    assert client.predict("scenedet", frame).model_spec.name == "scenedet"  # a normal call after them
    still_serving(guarded)
