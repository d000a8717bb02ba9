"""TorchScript and torch.export files (`adapter: torchscript`, `torch_export`)."""

from __future__ import annotations

from pathlib import Path

from models.build import fit_to_file, root_extra, single
from models.loaded import LoadedModel, file_hash
from models.repository import ModelSpec, RepositoryError


def load(spec: ModelSpec, folder: Path, version: int, device: str) -> LoadedModel:
    """A TorchScript or torch.export file. A torch.export program's input has static
    dimensions, which fix the batch and size as an ONNX file's do; TorchScript records none."""
    import torch

    path = folder / spec.weights
    shape = None
    try:
        if spec.adapter == "torchscript":
            module = torch.jit.load(str(path), map_location=device).eval()
        else:
            program = torch.export.load(str(path))
            module = program.module().to(device)
            inputs = [n for n in program.graph.nodes
                      if n.op == "placeholder" and n.name in program.graph_signature.user_inputs]
            shape = [int(d) if isinstance(d, int) else None for d in inputs[0].meta["val"].shape] if inputs else None
    except Exception as exc:
        kind = "TorchScript" if spec.adapter == "torchscript" else "torch.export"
        raise RepositoryError(f"{folder / 'model.yaml'}: weights: {path.name} is not a {kind} file ({exc})") from None
    fixed_batch = None
    if shape is not None:
        spec, fixed_batch = fit_to_file(spec, shape, folder / "model.yaml", path.name)
    return single(spec, folder, version, device, module,
                   file_hash(path, {"adapter": spec.adapter, **root_extra(spec)}), fixed_batch=fixed_batch)
