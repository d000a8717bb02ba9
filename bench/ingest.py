"""`vigil bench ingest`: what decoding on its own thread and detecting in blocks buys.

Three pipelines over the same clip with the same detector and the same tracking and
counting app, repeated alternately (so drifts in machine speed hit all three alike):

- vigil:  `vigil run --no-video` (decode thread, bounded buffer, blocks of frames);
- naive:  a plain loop: PyAV decode a frame, detect it, track and count it, next frame;
- decode: PyAV decode alone, the ceiling for any pipeline.

Reports medians as frames per second and `ratio_vs_naive` = vigil / naive.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from apps.app import App
from apps.spec import AppSpec, load_spec
from core.detections import Detections
from core.frames import FrameBlock
from engine.device import resolve_device
from models.registry import load_model
from models.repository import ModelRepository
from runtime.offline import RunOptions, run_offline
from vigil.settings import MODELS_DIR


@dataclass(frozen=True)
class IngestBenchOptions:
    source: str
    detector: str = "scenedet"
    repeats: int = 3
    max_frames: int | None = None
    device: str = "auto"


def _spec(detector: str) -> AppSpec:
    base = load_spec("people-counter-scenedet")
    return base.model_copy(update={"name": "bench", "detector": detector, "classes": None, "fps": None,
                                   "slo_ms": 60000.0})


def _vigil(source: str, spec: AppSpec, max_frames: int | None, device: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        summary = run_offline(source, [spec], RunOptions(Path(tmp), video=False, max_frames=max_frames, device=device))
    return summary["frames_decoded"] / summary["wall_s"]


def _naive(source: str, spec: AppSpec, max_frames: int | None, device: str) -> float:
    started = time.perf_counter()
    repo = ModelRepository(MODELS_DIR)
    version = repo.versions(spec.detector)[-1]
    model = load_model(repo.spec(spec.detector, version), repo.folder(spec.detector, version), version, device)
    n = 0
    with av.open(source) as container:
        stream = container.streams.video[0]
        app = App(spec, "naive", (stream.codec_context.width, stream.codec_context.height),
                  float(stream.average_rate), tuple(model.spec.labels))
        for frame in container.decode(stream):
            pixels = frame.to_ndarray(format="rgb24")[None]
            block = FrameBlock("naive", n, np.array([n]), np.array([frame.time * 1000.0]), np.zeros(1), pixels)
            outputs = model.infer(pixels)[0]
            app.observe(block, [Detections.concat(list(outputs.values()))])
            n += 1
            if max_frames and n >= max_frames:
                break
    return n / (time.perf_counter() - started)


def _decode(source: str, max_frames: int | None) -> float:
    started = time.perf_counter()
    n = 0
    with av.open(source) as container:
        for frame in container.decode(video=0):
            frame.to_ndarray(format="rgb24")
            n += 1
            if max_frames and n >= max_frames:
                break
    return n / (time.perf_counter() - started)


def run_ingest_bench(options: IngestBenchOptions) -> dict:
    if not Path(options.source).exists():
        raise ValueError(f"{options.source}: no such clip")
    device = resolve_device(options.device)
    spec = _spec(options.detector)
    fps = {"vigil": [], "naive": [], "decode": []}
    for _ in range(options.repeats):
        fps["vigil"].append(_vigil(options.source, spec, options.max_frames, device))
        fps["naive"].append(_naive(options.source, spec, options.max_frames, device))
        fps["decode"].append(_decode(options.source, options.max_frames))
    med = {k: statistics.median(v) for k, v in fps.items()}
    return {"source": options.source, "detector": options.detector, "device": device, "repeats": options.repeats,
            "vigil_fps": round(med["vigil"], 2), "naive_fps": round(med["naive"], 2),
            "decode_fps": round(med["decode"], 2), "ratio_vs_naive": round(med["vigil"] / med["naive"], 3),
            "runs": {k: [round(x, 2) for x in v] for k, v in fps.items()}}
