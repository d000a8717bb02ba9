"""The data SceneDet is trained and evaluated on: frames rendered by `sample_videos`,
JPEG-compressed once to resemble decoded video, stored at the model's input size,
with the boxes of the objects visible enough to ask for. Training clips use seeds
from TRAIN_SEED0, held-out evaluation from EVAL_SEED0 (the bundled clips, below 100)."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import cv2
import numpy as np

from models.scenedet import input_size

CLASSES = ("person", "car", "bike")
TRAIN_SEED0, EVAL_SEED0 = 1000, 9000
MIN_VISIBLE = 0.2  # objects less visible than this are not asked for


@dataclass
class Sample:
    image: np.ndarray  # [h, w, 3] uint8 at model input size (padded)
    boxes: np.ndarray  # [K, 4] xyxy in model-input pixels
    classes: np.ndarray  # [K] index into CLASSES


def _render_clip(args: tuple[int, float, float, int, float]) -> list[Sample]:
    from sample_videos.render import RenderConfig, Renderer

    seed, density, noise, every, scale = args
    rng = np.random.default_rng(seed)
    cfg = RenderConfig(seed=seed, duration_s=30.0, density=density, noise=noise)
    w, h, pw, ph = input_size((cfg.width, cfg.height), scale)
    samples = []
    for frame in Renderer(cfg).frames(every=every):
        quality = int(rng.integers(35, 90))
        ok, buf = cv2.imencode(".jpg", frame.image, [cv2.IMWRITE_JPEG_QUALITY, quality])
        image = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
        padded = np.zeros((ph, pw, 3), np.uint8)
        padded[:h, :w] = cv2.resize(image, (w, h), interpolation=cv2.INTER_AREA)
        objs = [o for o in frame.objects if o["visible"] >= MIN_VISIBLE]
        boxes = np.array([o["xyxy"] for o in objs], np.float32).reshape(-1, 4) * scale
        classes = np.array([CLASSES.index(o["class"]) for o in objs], np.int64)
        samples.append(Sample(padded, boxes, classes))
    return samples


def render_dataset(seeds: list[int], scale: float, every: int, workers: int = 2) -> list[Sample]:
    rng = np.random.default_rng(seeds[0])
    jobs = [(s, float(rng.uniform(0.6, 2.2)), float(rng.uniform(1.0, 5.0)), every, scale) for s in seeds]
    with ProcessPoolExecutor(workers) as pool:
        return [s for clip in pool.map(_render_clip, jobs) for s in clip]
