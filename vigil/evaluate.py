"""`vigil eval detector`: accuracy on held-out renders and latency through the engine.

Held-out clips are rendered from seeds the training never used (9000 on; training
uses 1000 on, the bundled clips 11, 22, 33). Accuracy is mAP@0.5 (VOC all-point) and
recall per class at score 0.3, on full-size frames through the same preprocessing and
decoding the engine uses. Latency is measured through the engine: one frame at a time
(p50 of capture to result), and a burst of frames submitted together (frames/s).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from engine.engine import Engine
from engine.requests import Request
from models.detection_eval import DetectionEvaluator
from models.registry import load_model
from models.repository import ModelRepository
from models.scenedet_data import CLASSES, EVAL_SEED0, render_dataset


def eval_detector(repository: Path, device: str, versions: list[int] | None = None, clips: int = 6,
                  every: int = 10, model: str = "scenedet", log=print) -> dict:
    repo = ModelRepository(repository)
    available = repo.versions(model)
    versions = versions or available
    missing = [v for v in versions if v not in available]
    if missing:
        raise ValueError(f"{model} has no version(s) {missing} in {repository} (have {available})")
    seeds = list(range(EVAL_SEED0, EVAL_SEED0 + clips))
    log(f"rendering {clips} held-out clips (seeds {seeds[0]}..{seeds[-1]}), every {every}th frame ...")
    samples = render_dataset(seeds, scale=1.0, every=every)
    out: dict = {"model": model, "seeds": seeds, "frames": len(samples), "device": device, "versions": {}}
    for v in versions:
        loaded = load_model(repo.spec(model, v), repo.folder(model, v), v, device)
        if list(loaded.spec.labels) != list(CLASSES):
            raise ValueError(f"{model} version {v}: labels {loaded.spec.labels} are not the street classes {CLASSES}")
        evaluator = DetectionEvaluator(CLASSES)
        for start in range(0, len(samples), 8):
            chunk = samples[start:start + 8]
            frames = np.stack([s.image for s in chunk])
            for s, outputs in zip(chunk, loaded.infer(frames)):
                dets = [d for d in outputs.values()]
                xyxy = np.concatenate([d.xyxy for d in dets])
                score = np.concatenate([d.confidence for d in dets])
                cls = np.concatenate([d.class_id for d in dets])
                evaluator.add(xyxy, score, cls, s.boxes, s.classes)
        accuracy = evaluator.result()
        latency = _engine_latency(repo, device, model, v, [s.image for s in samples[:48]])
        out["versions"][str(v)] = {**accuracy, **latency}
        log(f"version {v}: mAP@0.5 {accuracy['map']:.3f}, "
            f"p50 {latency['latency_ms_p50']:.1f} ms/frame alone, {latency['throughput_fps']:.0f} frames/s batched")
    return out


def _engine_latency(repo: ModelRepository, device: str, model: str, version: int, frames: list[np.ndarray]) -> dict:
    with Engine(repo, device) as engine:
        engine.load(model, [version])
        alone = []
        for frame in frames[:24]:
            r = engine.submit(Request("eval", model, frame, engine.clock(), 60_000.0, version)).result(timeout=60)
            alone.append(r.latency_ms)
        started = time.perf_counter()
        futures = engine.submit_many([Request("eval", model, f, engine.clock(), 60_000.0, version) for f in frames])
        for f in futures:
            f.result(timeout=120)
        wall = time.perf_counter() - started
    return {"latency_ms_p50": round(float(np.median(alone[4:])), 2), "throughput_fps": round(len(frames) / wall, 1)}
