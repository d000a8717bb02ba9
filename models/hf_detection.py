"""Hugging Face object detectors (`adapter: transformers`): the version folder holds what
`save_pretrained` wrote for an `AutoModelForObjectDetection` (DETR, Conditional and
Deformable DETR, RT-DETR, YOLOS) and its `AutoImageProcessor`.

Frames are prepared by the processor, one frame at a time (it resizes each to its own
aspect ratio); the engine batches the frames whose inputs have one shape. Each frame's result
is decoded by the processor's own `post_process_object_detection` with the frame's
size as `target_sizes` and `postprocess.min_score` as the threshold, so boxes come out
in frame pixels exactly as transformers gives them. Labels are the config's id2label,
by id."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.detections import Detections
from models.loaded import Fragment, LoadedModel, torch_collate, torch_hash
from models.repository import ModelSpec, RepositoryError

TARGET = "target_size"  # each frame's [height, width], carried beside the processor's tensors


def load(spec: ModelSpec, folder: Path, version: int, device: str) -> LoadedModel:
    import torch
    from transformers import AutoImageProcessor, AutoModelForObjectDetection

    yaml_path = folder / "model.yaml"
    if spec.split:
        raise RepositoryError(f"{yaml_path}: split: transformers detectors run as one fragment")
    try:
        model = AutoModelForObjectDetection.from_pretrained(folder).to(device).eval()
        processor = AutoImageProcessor.from_pretrained(folder)
    except (OSError, ValueError) as exc:
        raise RepositoryError(f"{yaml_path}: cannot load a transformers detector from {folder} "
                              f"(save_pretrained of the model and its image processor): {exc}") from None
    id2label = {int(k): v for k, v in model.config.id2label.items()}
    labels = [id2label.get(i, f"class_{i}") for i in range(max(id2label) + 1)] if id2label else []
    if spec.labels and spec.labels != labels:
        raise RepositoryError(f"{yaml_path}: labels: the config's id2label is {labels}; model.yaml says "
                              f"{spec.labels} (leave labels out to use the config's)")
    spec = spec.model_copy(update={"labels": labels, "output": "detections"})
    threshold = spec.postprocess.min_score

    def preprocess(frames: np.ndarray) -> list[dict]:
        out = []
        for f in frames:
            inputs = processor(images=f, return_tensors="pt")
            item = {k: v[0].to(device) for k, v in inputs.items() if torch.is_tensor(v)}
            item[TARGET] = torch.tensor([f.shape[0], f.shape[1]], device=device)
            out.append(item)
        return out

    def run(batch: dict) -> list[Detections]:
        batch = dict(batch)
        sizes = [tuple(int(v) for v in hw) for hw in batch.pop(TARGET)]
        with torch.inference_mode():
            decoded = processor.post_process_object_detection(model(**batch), threshold=threshold,
                                                              target_sizes=sizes)
        return [Detections(d["boxes"].float().cpu().numpy(), d["scores"].float().cpu().numpy(),
                           d["labels"].cpu().numpy()) for d in decoded]

    frag = Fragment("model", torch_hash(model, {"adapter": "transformers", "threshold": threshold}), None, run,
                    torch_collate, lambda out, n: list(out), model)
    return LoadedModel(spec, version, folder, device, {"model": frag}, False, preprocess)
