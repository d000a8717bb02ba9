"""gRPC API (vigil/proto/vigil.proto): Predict, StreamBlocks, GetModelStatus, as thin
adapters over the engine and the service, plus a Python client.

Auth: when API keys are configured every call needs metadata
`authorization: Bearer KEY` (UNAUTHENTICATED otherwise). Errors map to status codes:
an unknown model NOT_FOUND, a bad image or field INVALID_ARGUMENT, a dropped request
DEADLINE_EXCEEDED or RESOURCE_EXHAUSTED.

An encoded image's size is read from its header before anything is decoded: a few
hundred bytes of JPEG can declare 30000 x 30000 pixels, which would take gigabytes to
decode. Past `limits.max_image_pixels` (or under MIN_IMAGE_SIDE a side) it is refused.
"""

from __future__ import annotations

from concurrent import futures
from typing import TYPE_CHECKING, Iterable, Iterator

import cv2
import grpc
import numpy as np

from apps.spec import MAX_SLO_MS
from core.detections import Detections
from engine.requests import Dropped, Request
from runtime.jpeg import rgb_jpeg
from vigil.proto import vigil_pb2 as pb, vigil_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from vigil.service import Vigil

DEFAULT_SLO_MS = 1000.0
MAX_MESSAGE_BYTES = 64 << 20
MIN_IMAGE_SIDE = 16  # smaller than any model's stride: nothing to detect in it


class _Invalid(Exception):
    pass


def _check_size(what: str, width: int, height: int, max_pixels: int) -> None:
    if width * height > max_pixels:
        raise _Invalid(f"{what}: {width}x{height} is {width * height} pixels, over {max_pixels} "
                       "(limits.max_image_pixels)")
    if min(width, height) < MIN_IMAGE_SIDE:
        raise _Invalid(f"{what}: {width}x{height} is too small; each side needs at least {MIN_IMAGE_SIDE} pixels")


SOF_MARKERS = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def declared_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR or a JPEG's frame header, without decoding."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 24:
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 4 <= len(data):
            if data[i] != 0xFF:
                break
            marker = data[i + 1]
            if marker == 0xFF:  # fill byte
                i += 1
                continue
            if marker in (0x01, *range(0xD0, 0xD9)):  # markers without a length
                i += 2
                continue
            length = int.from_bytes(data[i + 2:i + 4], "big")
            if marker in SOF_MARKERS and i + 9 <= len(data):
                return int.from_bytes(data[i + 7:i + 9], "big"), int.from_bytes(data[i + 5:i + 7], "big")
            i += 2 + length
    raise _Invalid("image.encoded: not a JPEG or PNG image")


def decode_image(image: pb.Image, max_pixels: int = 4096 * 4096) -> np.ndarray:
    """[H, W, 3] uint8 RGB from an encoded image or a raw tensor."""
    kind = image.WhichOneof("kind")
    if kind == "encoded":
        _check_size("image.encoded", *declared_size(image.encoded), max_pixels)
        buf = np.frombuffer(image.encoded, np.uint8)
        bgr = cv2.imdecode(buf, cv2.IMREAD_COLOR)
        if bgr is None:
            raise _Invalid("image.encoded: not a JPEG or PNG image OpenCV can decode")
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    if kind == "pixels":
        t = image.pixels
        shape = tuple(t.shape)
        if t.dtype not in ("", "uint8") or len(shape) != 3 or shape[2] != 3 or min(shape) < 1:
            raise _Invalid(f"image.pixels: need shape [H, W, 3] and dtype uint8; got {list(shape)[:8]} {t.dtype!r}")
        _check_size("image.pixels", shape[1], shape[0], max_pixels)
        if len(t.data) != shape[0] * shape[1] * 3:
            raise _Invalid(f"image.pixels: data has {len(t.data)} bytes; shape {list(shape)} needs "
                           f"{shape[0] * shape[1] * 3}")
        return np.frombuffer(t.data, np.uint8).reshape(shape)
    raise _Invalid("image: set `encoded` (JPEG/PNG bytes) or `pixels` (a [H, W, 3] uint8 tensor)")


def encode_image(rgb: np.ndarray, raw: bool = False) -> pb.Image:
    if raw:
        return pb.Image(pixels=pb.Tensor(shape=list(rgb.shape), dtype="uint8", data=np.ascontiguousarray(rgb).tobytes()))
    return pb.Image(encoded=rgb_jpeg(rgb, 90))


def _version_ref(spec: pb.ModelSpec) -> int | str | None:
    which = spec.WhichOneof("version_choice")
    return spec.version if which == "version" else spec.label if which == "label" else None


TOP_K = 5


def _classifications(result, labels: tuple[str, ...]) -> list[pb.Classification]:
    """A classifier's top classes with their probabilities, best first."""
    classes = result.classes
    if classes is None:
        return []
    return [pb.Classification(label=labels[i] if i < len(labels) else f"class_{i}", score=p)
            for i, p in classes.top(TOP_K)]


def _detections(dets: Detections, labels: tuple[str, ...]) -> list[pb.Detection]:
    return [pb.Detection(x0=float(b[0]), y0=float(b[1]), x1=float(b[2]), y1=float(b[3]), confidence=float(c),
                         label=labels[int(k)] if 0 <= int(k) < len(labels) else str(int(k)))
            for b, c, k in zip(dets.xyxy, dets.confidence, dets.class_id)]


DROP_CODES = {"deadline": grpc.StatusCode.DEADLINE_EXCEEDED, "invalid": grpc.StatusCode.INVALID_ARGUMENT,
              "unavailable": grpc.StatusCode.UNAVAILABLE}


class VigilServicer(pb_grpc.VigilServicer):
    def __init__(self, service: "Vigil") -> None:
        self.service = service
        self.engine = service.engine
        self.max_pixels = service.settings.limits.max_image_pixels

    def _auth(self, context: grpc.ServicerContext) -> None:
        if not self.service.settings.authorized(dict(context.invocation_metadata()).get("authorization")):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid API key: send metadata "
                                                           "'authorization: Bearer KEY'")

    def _resolve(self, spec: pb.ModelSpec, context: grpc.ServicerContext) -> tuple[int | str | None, tuple[str, ...]]:
        name = spec.name
        if name not in self.service.repository.model_names():
            context.abort(grpc.StatusCode.NOT_FOUND, f"no model {name!r} in the repository")
        ref = _version_ref(spec)
        try:
            self.engine.ensure_loaded(name)
            labels = self.engine.labels(name, ref)
        except (LookupError, ValueError) as exc:
            context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        except Exception as exc:  # a model that fails to load
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"model {name!r} cannot load: {exc}")
        return ref, labels

    def _request(self, peer: str, spec: pb.ModelSpec, ref, image: np.ndarray, slo_ms: float, priority: int,
                 labels: Iterable[str], key=None) -> Request:
        if not (0 <= slo_ms <= MAX_SLO_MS):  # (NaN fails this too)
            raise _Invalid(f"slo_ms must be in [0, {MAX_SLO_MS:g}]; was {slo_ms}")
        return Request(f"grpc:{peer}", spec.name, image, self.engine.clock(), slo_ms or DEFAULT_SLO_MS, ref,
                       max(0, min(10, priority)), tuple(labels) or None, key)

    def Predict(self, request: pb.PredictRequest, context: grpc.ServicerContext) -> pb.PredictResponse:
        self._auth(context)
        ref, labels = self._resolve(request.model_spec, context)
        try:
            image = decode_image(request.image, self.max_pixels)
            req = self._request("predict", request.model_spec, ref, image, request.slo_ms, request.priority,
                                request.labels)
            result = self.engine.submit(req).result()
        except _Invalid as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Dropped as exc:
            code = DROP_CODES.get(exc.reason, grpc.StatusCode.RESOURCE_EXHAUSTED)
            context.abort(code, f"request dropped: {exc}")
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return pb.PredictResponse(model_spec=pb.ModelSpec(name=result.model, version=result.version),
                                  detections=_detections(result.detections, labels),
                                  latency_ms=result.latency_ms,
                                  classifications=_classifications(result, labels))

    def StreamBlocks(self, request_iterator: Iterator[pb.Block], context: grpc.ServicerContext) -> Iterator[pb.BlockResult]:
        self._auth(context)
        for block in request_iterator:
            ref, labels = self._resolve(block.model_spec, context)
            try:
                reqs = [self._request(f"stream:{block.stream_id}", block.model_spec, ref,
                                      decode_image(f.image, self.max_pixels),
                                      block.slo_ms, block.priority, block.labels, (block.stream_id, f.frame_id))
                        for f in block.frames]
            except _Invalid as exc:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"block {block.block_id}: {exc}")
            out = pb.BlockResult(stream_id=block.stream_id, block_id=block.block_id)
            for frame, fut in zip(block.frames, self.engine.submit_many(reqs)):
                try:
                    result = fut.result()
                    out.version = result.version
                    out.frames.append(pb.FrameResult(frame_id=frame.frame_id,
                                                     detections=_detections(result.detections, labels)))
                except Dropped as exc:
                    out.frames.append(pb.FrameResult(frame_id=frame.frame_id, error=exc.reason))
            yield out

    def GetModelStatus(self, request: pb.ModelStatusRequest, context: grpc.ServicerContext) -> pb.ModelStatusResponse:
        self._auth(context)
        name = request.model_spec.name
        try:
            model = self.service.models.get(name)
        except Exception:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no model {name!r} in the repository")
        ref = _version_ref(request.model_spec)
        versions = model["versions_on_disk"]
        if isinstance(ref, str):
            if ref not in model["labels"]:
                context.abort(grpc.StatusCode.NOT_FOUND, f"model {name!r} has no label {ref!r}")
            versions = [model["labels"][ref]]
        elif ref is not None:
            if ref not in versions:
                context.abort(grpc.StatusCode.NOT_FOUND, f"model {name!r} has no version {ref}")
            versions = [ref]
        return pb.ModelStatusResponse(
            versions=[pb.ModelVersionStatus(version=v, state="AVAILABLE" if v in model["loaded"] else "ON_DISK")
                      for v in versions],
            labels={k: int(v) for k, v in model["labels"].items()})


def start_grpc(service: "Vigil", host: str, port: int, workers: int = 8) -> tuple[grpc.Server, int]:
    """Start the gRPC server; returns it and the port it bound (port 0 picks one)."""
    server = grpc.server(futures.ThreadPoolExecutor(workers, thread_name_prefix="grpc"),
                         options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                  ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                                  ("grpc.so_reuseport", 0)])  # a second server on the port fails, not shares it
    pb_grpc.add_VigilServicer_to_server(VigilServicer(service), server)
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError:  # grpcio raises instead of returning 0 on some versions
        bound = 0
    if bound == 0:
        raise OSError(f"cannot listen for gRPC on {host}:{port}: the address is in use or not this machine's")
    server.start()
    return server, bound


class GrpcClient:
    """A small client: `GrpcClient("127.0.0.1:8081", api_key=...)`."""

    def __init__(self, target: str, api_key: str | None = None, timeout_s: float = 30.0) -> None:
        self.channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                                              ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)])
        self.stub = pb_grpc.VigilStub(self.channel)
        self.metadata = [("authorization", f"Bearer {api_key}")] if api_key else []
        self.timeout_s = timeout_s

    @staticmethod
    def model_spec(name: str, version: int | str | None = None) -> pb.ModelSpec:
        if isinstance(version, int):
            return pb.ModelSpec(name=name, version=version)
        if isinstance(version, str):
            return pb.ModelSpec(name=name, label=version)
        return pb.ModelSpec(name=name)

    def predict(self, model: str, rgb: np.ndarray, version: int | str | None = None, slo_ms: float = 0.0,
                raw: bool = False, priority: int = 0) -> pb.PredictResponse:
        return self.stub.Predict(pb.PredictRequest(model_spec=self.model_spec(model, version),
                                                   image=encode_image(rgb, raw), slo_ms=slo_ms, priority=priority),
                                 metadata=self.metadata, timeout=self.timeout_s)

    def stream_blocks(self, blocks: Iterable[pb.Block]) -> Iterator[pb.BlockResult]:
        return self.stub.StreamBlocks(iter(blocks), metadata=self.metadata, timeout=self.timeout_s)

    def model_status(self, model: str, version: int | str | None = None) -> pb.ModelStatusResponse:
        return self.stub.GetModelStatus(pb.ModelStatusRequest(model_spec=self.model_spec(model, version)),
                                        metadata=self.metadata, timeout=self.timeout_s)

    def close(self) -> None:
        self.channel.close()
