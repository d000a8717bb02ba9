"""`vigil bench runtime`: a repository model served by the engine, against the same network
run plainly, as a user without Vigil would run it: the model's torch module (with its
input conversion) exported by `torch.onnx.export`, then an onnxruntime session with the
same thread count, called one frame at a time in a loop. Both sides resize and decode
with the same code, so what differs is how the network runs and how frames reach it.

On the same frames (real footage where installed, else a bundled clip), alternately
repeated so that drifts in machine speed hit every side alike:
- plain: the onnxruntime loop, one frame at a time;
- engine_alone: the engine, each frame submitted when the last one's result is back;
- engine_burst: the engine, every frame submitted at once (batched to its profile).
Reports medians in frames per second, each engine side over plain, and whether every
side found as many detections (the same network: a check on the export).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from engine.engine import Engine
from engine.requests import Request
from models.loaded import LoadedModel
from models.registry import load_model
from models.repository import ModelRepository
from vigil.settings import MODELS_DIR


@dataclass(frozen=True)
class RuntimeBenchOptions:
    model: str = "coco"
    versions: tuple[int, ...] = ()  # () = every version in the repository
    frames: int = 24
    repeats: int = 3
    device: str = "cpu"
    repository: Path = MODELS_DIR

    def __post_init__(self) -> None:
        if not 4 <= self.frames <= 1000:
            raise ValueError(f"frames must be in 4..1000; was {self.frames}")
        if not 1 <= self.repeats <= 20:
            raise ValueError(f"repeats must be in 1..20; was {self.repeats}")


def bench_frames(n: int) -> tuple[str, np.ndarray]:
    """n RGB frames: vtest.avi's where it is installed (real people), else street_a's."""
    from sample_videos.footage import PLACES, ROOT, read_frames

    video = next((p for p in PLACES["vtest"] if p.is_file()), None) or ROOT / "sample_videos/street_a.mp4"
    found, _ = read_frames(video, list(range(n)))
    return video.name, np.stack([found[i] for i in range(n)])


def export_onnx(model: LoadedModel, frame: np.ndarray, path: Path) -> None:
    """The model's one fragment as the engine runs it (uint8 NCHW in, its outputs out), as ONNX."""
    import torch

    from models.torch_input import ImageInput

    if len(model.fragments) != 1:
        raise ValueError(f"{model.spec.name}: the plain run exports one fragment; it has {list(model.fragments)}")
    (fragment,) = model.fragments.values()
    if not isinstance(fragment.module, torch.nn.Module):
        raise ValueError(f"{model.spec.name}: adapter {model.spec.adapter} has no torch module to export")
    module = ImageInput(fragment.module, model.spec.input.mean, model.spec.input.std, "cpu").eval()
    example = fragment.collate(model.preprocess(frame[None]))
    torch.onnx.export(module, (example,), str(path), dynamo=False, opset_version=17,
                      input_names=["image"], dynamic_axes={"image": {0: "batch"}})


def plain_loop(model: LoadedModel, onnx_path: Path, threads: int, device: str) -> Callable[[np.ndarray], int]:
    """What a user would write: one onnxruntime session, a frame at a time, the same
    resize before and the same decode after as the engine's (`model` is loaded on the CPU)."""
    import onnxruntime as ort
    import torch

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    providers = ["CUDAExecutionProvider"] if device.startswith("cuda") else []
    providers = [p for p in providers if p in ort.get_available_providers()] + ["CPUExecutionProvider"]
    session = ort.InferenceSession(str(onnx_path), options, providers=providers)
    names = [o.name for o in session.get_outputs()]
    (fragment,) = model.fragments.values()
    keys = list(fragment.module.outputs) if isinstance(getattr(fragment.module, "outputs", None), dict) else names

    def run(frames: np.ndarray) -> int:
        found = 0
        for frame in frames:
            x = fragment.collate(model.preprocess(frame[None])).numpy()
            values = session.run(names, {"image": x})
            output = {k: torch.from_numpy(v[0]) for k, v in zip(keys, values)}
            size = (frame.shape[1], frame.shape[0])
            found += len(model.postprocess(fragment.name, output, size))
        return found

    return run


def engine_sides(repo: ModelRepository, model: str, version: int, device: str) -> tuple[Engine, Callable, Callable]:
    engine = Engine(repo, device)
    engine.load(model, [version])

    def request(frame: np.ndarray) -> Request:
        return Request("bench", model, frame, engine.clock(), 600_000.0, version)

    def alone(frames: np.ndarray) -> int:
        return sum(len(engine.submit(request(f)).result(timeout=120).detections) for f in frames)

    def burst(frames: np.ndarray) -> int:
        futures = engine.submit_many([request(f) for f in frames])
        return sum(len(f.result(timeout=600).detections) for f in futures)

    return engine, alone, burst


def run_runtime_bench(options: RuntimeBenchOptions, log: Callable[[str], None] = print) -> dict:
    import torch

    repo = ModelRepository(options.repository)
    available = repo.versions(options.model)
    versions = list(options.versions) or available
    missing = sorted(set(versions) - set(available))
    if missing:
        raise ValueError(f"{options.model} has no version(s) {missing} in {repo.root} (have {available})")
    source, frames = bench_frames(options.frames)
    threads = torch.get_num_threads()
    out = {"model": options.model, "source": source, "frames": options.frames, "repeats": options.repeats,
           "threads": threads, "device": options.device, "versions": {}}
    for version in versions:
        loaded = load_model(repo.spec(options.model, version), repo.folder(options.model, version), version, "cpu")
        with tempfile.TemporaryDirectory(prefix="vigil-onnx-") as folder:
            path = Path(folder) / "model.onnx"
            export_onnx(loaded, frames[0], path)
            plain = plain_loop(loaded, path, threads, options.device)
            engine, alone, burst = engine_sides(repo, options.model, version, options.device)
            sides = {"plain": plain, "engine_alone": alone, "engine_burst": burst}
            fps: dict[str, list[float]] = {k: [] for k in sides}
            found: dict[str, int] = {}
            try:
                for name, side in sides.items():  # warm: traces, profiles, onnxruntime's first call
                    side(frames[:2])
                for r in range(options.repeats):
                    for name, side in sides.items():
                        started = time.perf_counter()
                        found[name] = side(frames)
                        fps[name].append(len(frames) / (time.perf_counter() - started))
                    log(f"{options.model}:{version} repeat {r + 1}: " +
                        ", ".join(f"{k} {v[-1]:.1f} frames/s" for k, v in fps.items()))
            finally:
                engine.close()
        med = {k: round(statistics.median(v), 2) for k, v in fps.items()}
        out["versions"][str(version)] = {
            "fps": med, "detections": found, "same_detections": len(set(found.values())) == 1,
            "engine_alone_vs_plain": round(med["engine_alone"] / med["plain"], 3),
            "engine_burst_vs_plain": round(med["engine_burst"] / med["plain"], 3)}
    return out


def format_runtime_report(result: dict) -> str:
    lines = [f"{result['model']} on {result['frames']} frames of {result['source']}, {result['threads']} threads, "
             f"medians of {result['repeats']}:",
             "| version | plain onnxruntime | engine, one at a time | engine, burst | alone / plain | burst / plain |",
             "|---|---|---|---|---|---|"]
    for v, row in result["versions"].items():
        f = row["fps"]
        lines.append(f"| {v} | {f['plain']} | {f['engine_alone']} | {f['engine_burst']} | "
                     f"{row['engine_alone_vs_plain']} | {row['engine_burst_vs_plain']} |")
    return "\n".join(lines)
