"""What the model families share when they build fragments: traced inference, a root
on images, a one-fragment model, and the input size and batch a file fixes."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from models.loaded import Fragment, LoadedModel, torch_collate, torch_split
from models.preprocess import image_input, image_preprocess
from models.repository import YOLO_KINDS, ModelSpec, RepositoryError
from models.tracing import TracedModule

log = logging.getLogger("vigil.engine")


def root_extra(spec: ModelSpec) -> dict:
    return {"input": spec.input.model_dump(mode="json")}


def inference(module, name: str = ""):
    """Calls `module` in inference mode; through TorchScript traces (`models.tracing`),
    which run with the GIL released, unless it is scripted already."""
    import torch

    if isinstance(module, torch.jit.ScriptModule):
        def run(batch):
            with torch.inference_mode():
                return module(batch)

        return run
    return TracedModule(module, name)


def image_root(spec: ModelSpec, device: str, module, name: str):
    """A root fragment on images: the uint8 batch's conversion traced with the module
    (models/torch_input.py), or before it for a module scripted already."""
    import torch

    if isinstance(module, torch.jit.ScriptModule):
        return image_input(spec, device, inference(module, name))
    from models.torch_input import ImageInput

    inp = spec.input
    return inference(ImageInput(module, inp.mean, inp.std, device), name)


def single(spec: ModelSpec, folder: Path, version: int, device: str, module, digest: str,
            random: bool = False, fixed_batch: int | None = None, runner: Callable | None = None) -> LoadedModel:
    """One fragment: `module` traced (models/tracing.py), or `runner` where given, which
    computes what the module does (the module is kept for its hash and to free it)."""
    if spec.split:
        raise RepositoryError(f"{folder / 'model.yaml'}: split: {spec.adapter} models run as one fragment")
    run = runner or inference(module, spec.name)
    if fixed_batch is not None:
        run = padded_to(fixed_batch, run)
    frag = Fragment("model", digest, None, image_input(spec, device, run), torch_collate, torch_split, module)
    return LoadedModel(spec, version, folder, device, {"model": frag}, random, image_preprocess(spec, device))


def padded_to(batch: int, run: Callable) -> Callable:
    """A fixed-batch model called with fewer images: pad with zeros, drop the padding."""
    import torch

    def padded(x):
        n = x.shape[0]
        if n >= batch:
            return run(x)
        out = run(torch.cat([x, x.new_zeros((batch - n, *x.shape[1:]))]))
        if isinstance(out, dict):
            return {k: v[:n] for k, v in out.items()}
        return type(out)(v[:n] for v in out) if isinstance(out, (tuple, list)) else out[:n]

    return padded


def fit_to_file(spec: ModelSpec, shape: list, yaml_path: Path, filename: str) -> tuple[ModelSpec, int | None]:
    """The input size and batch a file fixes, over what model.yaml says: a fixed batch
    is the only batch size served (smaller batches are padded to it), and a fixed
    height and width become `input.size` (`letterbox` for YOLO kinds) when model.yaml
    gives neither; one it gives that disagrees with the file is an error."""
    if spec.input.kind != "image":
        return spec, None
    if len(shape) != 4:
        raise RepositoryError(f"{yaml_path}: input: {filename} takes {shape}; an image model takes "
                              "[batch, 3, height, width]")
    batch = shape[0] if isinstance(shape[0], int) and shape[0] > 0 else None
    update: dict = {}
    if batch is not None and list(spec.batch_sizes) != [batch]:
        log.info("%s: %s has a fixed batch of %d; served at that batch", yaml_path, filename, batch)
        update["batch_sizes"] = [batch]
    hw = tuple(shape[2:]) if all(isinstance(v, int) and v > 0 for v in shape[2:]) else None
    inp = spec.input
    if hw is not None:
        given = inp.letterbox or inp.size
        if given is not None and tuple(given) != hw:
            field = "letterbox" if inp.letterbox else "size"
            raise RepositoryError(f"{yaml_path}: input.{field}: {filename} takes a fixed [height, width] of "
                                  f"{list(hw)}; model.yaml says {list(given)}")
        if inp.scale is not None:
            raise RepositoryError(f"{yaml_path}: input.scale: {filename} takes a fixed [height, width] of "
                                  f"{list(hw)}; give input.size or input.letterbox instead")
        if given is None:
            field = "letterbox" if spec.output in YOLO_KINDS else "size"
            update["input"] = inp.model_copy(update={field: hw})
    return (spec.model_copy(update=update) if update else spec), batch
