"""The loader registry: `adapter:` in model.yaml names the family that builds a version
(one module each), and every load is checked the same way: an output that does not fit
its declared kind fails the load, naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from models import hf_detection, onnx_files, opencv, torch_files, torch_modules
from models.decode import CHECKED_KINDS, OutputMismatch
from models.loaded import LoadedModel
from models.repository import ModelSpec, RepositoryError
from models.tfjs import loader as tfjs_loader

Loader = Callable[[ModelSpec, Path, int, str], LoadedModel]
LOADERS: dict[str, Loader] = {
    "python": torch_modules.load,
    "torchvision": torch_modules.load,
    "torchscript": torch_files.load,
    "torch_export": torch_files.load,
    "onnx": onnx_files.load,
    "tfjs": tfjs_loader.load,
    "opencv_hog": opencv.load,
    "opencv_haar": opencv.load,
    "transformers": hf_detection.load,
}


def load_model(spec: ModelSpec, folder: Path, version: int, device: str) -> LoadedModel:
    """Build a version's fragments on `device`. Raises RepositoryError naming the file."""
    yaml_path = folder / "model.yaml"
    try:
        builder = LOADERS[spec.adapter]
        model = builder(spec, folder, version, device)
        if spec.output in CHECKED_KINDS:
            _probe(model, yaml_path)
        return model
    except RepositoryError:
        raise
    except Exception as exc:  # an adapter's own failure still names the file
        raise RepositoryError(f"{yaml_path}: cannot load ({type(exc).__name__}: {exc})") from None


def _probe(model: LoadedModel, yaml_path: Path) -> None:
    """Run one blank frame through a decoded model, so that an output that does not fit
    its kind fails the load (naming the file, the kind and both layouts) instead of
    serving nothing."""
    height, width = model.spec.input.profile_frame
    try:
        model.infer(np.zeros((1, height, width, 3), np.uint8))
    except OutputMismatch as exc:
        raise RepositoryError(f"{yaml_path}: output: {exc}") from None
