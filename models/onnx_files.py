"""ONNX files (`adapter: onnx`), run by onnxruntime: on CUDA where its provider is
installed and the device is a GPU, else on the CPU."""

from __future__ import annotations

from pathlib import Path

from models.build import fit_to_file, padded_to, root_extra
from models.loaded import Fragment, LoadedModel, file_hash, torch_collate, torch_split
from models.preprocess import image_input, image_preprocess
from models.repository import ModelSpec, RepositoryError


def load(spec: ModelSpec, folder: Path, version: int, device: str) -> LoadedModel:
    import onnxruntime as ort
    import torch

    yaml_path = folder / "model.yaml"
    path = folder / spec.weights
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if device.startswith("cuda") \
        else ["CPUExecutionProvider"]
    available = set(ort.get_available_providers())
    try:
        session = ort.InferenceSession(str(path), providers=[p for p in providers if p in available])
    except Exception as exc:
        raise RepositoryError(f"{yaml_path}: weights: {path.name} is not a valid ONNX model ({exc})") from None
    if spec.split:
        raise RepositoryError(f"{yaml_path}: split: onnx models run as one fragment")
    first = session.get_inputs()[0]
    spec, fixed_batch = fit_to_file(spec, list(first.shape), yaml_path, path.name)
    names = [o.name for o in session.get_outputs()]
    missing = sorted(set(spec.outputs.values()) - set(names))
    if missing:
        raise RepositoryError(f"{yaml_path}: outputs: {path.name} has no output {', '.join(map(repr, missing))} "
                              f"(its outputs: {', '.join(names)})")

    def run(batch):
        x = batch.detach().cpu().numpy()
        if not spec.outputs:
            return torch.from_numpy(session.run(names[:1], {first.name: x})[0])
        roles = list(spec.outputs)
        values = session.run([spec.outputs[r] for r in roles], {first.name: x})
        if values[roles.index("boxes")].ndim == 2:  # one image's detections, without a batch dimension
            values = [v[None] for v in values]
        return {r: torch.from_numpy(v) for r, v in zip(roles, values)}

    if fixed_batch is not None:  # a fixed-batch export: pad, then drop the padding
        run = padded_to(fixed_batch, run)
    frag = Fragment("model", file_hash(path, {"adapter": "onnx", **root_extra(spec)}), None,
                    image_input(spec, "cpu", run), torch_collate, torch_split, session)
    return LoadedModel(spec, version, folder, device, {"model": frag}, False, image_preprocess(spec, "cpu"))
