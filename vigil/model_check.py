"""`vigil models check DIR`: load one model version folder the way the server would,
run it on a bundled frame, and show what it decoded and how long each batch size
takes, before the model goes into a repository."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

from vigil.settings import SAMPLES_DIR

SAMPLE = SAMPLES_DIR / "street_a.mp4"
REPEATS = 3


class CheckError(Exception):
    pass


def version_folder(path: Path) -> tuple[Path, str, int]:
    """(repository root, model name, version) of a version folder, or of a model
    folder's newest version."""
    path = path.resolve()
    if not path.is_dir():
        raise CheckError(f"{path}: not a folder")
    if not (path / "model.yaml").is_file():
        versions = sorted(int(p.name) for p in path.iterdir() if p.name.isdigit() and (p / "model.yaml").is_file())
        if not versions:
            raise CheckError(f"{path}: neither a version folder (with model.yaml) nor a model folder of versions")
        path = path / str(versions[-1])
    if not path.name.isdigit():
        raise CheckError(f"{path}: a version folder is named by its version number (NAME/1/model.yaml)")
    return path.parent.parent, path.parent.name, int(path.name)


def sample_frame(source: Path = SAMPLE) -> np.ndarray:
    import av

    with av.open(str(source)) as container:
        return next(container.decode(video=0)).to_ndarray(format="rgb24")


TOP_CLASSES = 5  # a classifier's best classes shown


def check_model(path: Path, device: str = "cpu", frame: np.ndarray | None = None) -> dict:
    from core.classes import Classes
    from core.detections import Detections
    from models.registry import load_model
    from models.repository import ModelRepository, RepositoryError

    root, name, version = version_folder(path)
    try:
        spec = ModelRepository(root).spec(name, version)
        model = load_model(spec, root / name / str(version), version, device)
    except RepositoryError as exc:
        raise CheckError(str(exc)) from None
    frame = sample_frame() if frame is None else frame
    outputs = model.infer(frame[None])[0]
    decoded = {}
    for leaf, out in outputs.items():
        if isinstance(out, Detections):
            labels = model.spec.labels
            decoded[leaf] = [{"label": labels[c] if 0 <= c < len(labels) else str(c), "score": round(float(s), 4),
                              "box": [round(float(v), 1) for v in box]}
                             for box, s, c in zip(out.xyxy, out.confidence, out.class_id)]
        elif isinstance(out, Classes):
            labels = model.spec.labels
            decoded[leaf] = [{"label": labels[c] if c < len(labels) else str(c), "score": round(p, 4)}
                             for c, p in out.top(TOP_CLASSES)]
        else:
            array = np.asarray(out)
            decoded[leaf] = {"shape": list(array.shape), "first": [round(float(v), 4) for v in array.reshape(-1)[:5]]}
    latency = {}
    for b in model.spec.batch_sizes:
        frames = np.repeat(frame[None], b, axis=0)
        model.infer(frames)  # warm
        times = []
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            model.infer(frames)
            times.append((time.perf_counter() - t0) * 1000.0)
        latency[b] = round(statistics.median(times), 2)
    return {"model": name, "version": version, "adapter": model.spec.adapter, "output": model.spec.output,
            "input": model.spec.input.model_dump(mode="json", exclude_defaults=True),
            "batch_sizes": list(model.spec.batch_sizes), "random_weights": model.random_weights,
            "frame": [int(frame.shape[1]), int(frame.shape[0])], "decoded": decoded, "latency_ms": latency}


def format_check(result: dict, limit: int = 10) -> str:
    lines = [f"{result['model']} v{result['version']}: adapter {result['adapter']}, output {result['output']}, "
             f"input {result['input'] or 'the frame as it is'}, batch sizes {result['batch_sizes']}"
             + (" (RANDOM WEIGHTS)" if result["random_weights"] else ""),
             f"on a {result['frame'][0]}x{result['frame'][1]} frame of {SAMPLE.name}:"]
    for leaf, out in result["decoded"].items():
        if isinstance(out, list) and out and "box" not in out[0]:
            lines.append(f"  {leaf}: best classes " + ", ".join(f"{d['label']} {d['score']:.3f}" for d in out))
        elif isinstance(out, list):
            lines.append(f"  {leaf}: {len(out)} detections" + (f" (the best {limit})" if len(out) > limit else ""))
            for d in sorted(out, key=lambda d: -d["score"])[:limit]:
                lines.append(f"    {d['label']:<14} {d['score']:.3f}  {d['box']}")
        else:
            lines.append(f"  {leaf}: tensor {out['shape']}, first values {out['first']}")
    lines.append("latency per batch (ms, median of 3 after a warm-up): "
                 + ", ".join(f"{b}: {ms}" for b, ms in result["latency_ms"].items()))
    return "\n".join(lines)
