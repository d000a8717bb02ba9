"""Torch modules built in Python (`adapter: python`, a factory named in model.yaml) or
by torchvision (`adapter: torchvision`), with their weights from the version folder.
A classifier may split into backbone and head fragments; a torchvision detector runs
its own transform and may split as [backbone, head] (models/tv_detection.py)."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

import numpy as np

from core.detections import Detections
from models.build import image_root, inference, root_extra
from models.loaded import Fragment, LoadedModel, list_collate, list_split, torch_collate, torch_hash, torch_split
from models.preprocess import image_preprocess
from models.repository import ModelSpec, RepositoryError

log = logging.getLogger("vigil.engine")

# torchvision classification families: (names of the backbone children, head child).
# Their forward() flattens between pooling and the classifier, so a backbone fragment
# ends with a Flatten.
TORCHVISION_LAYOUTS = {
    "resnet": (("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool"), "fc"),
    "resnext": (("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool"), "fc"),
    "mobilenet": (("features", "avgpool"), "classifier"),
    "efficientnet": (("features", "avgpool"), "classifier"),
}


def build_torch(spec: ModelSpec, folder: Path):
    import torch

    yaml_path = folder / "model.yaml"
    if spec.weights == "random":
        torch.manual_seed(spec.seed)
    if spec.adapter == "python":
        module_name, _, func_name = spec.factory.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), func_name)
        except (ImportError, AttributeError) as exc:
            raise RepositoryError(f"{yaml_path}: factory: cannot import {spec.factory!r} ({exc})") from None
        model = factory(spec.config)
    else:
        import torchvision

        if spec.arch in torchvision_detectors():
            # weights_backbone=None: a builder's default would download ImageNet weights
            model = torchvision.models.get_model(spec.arch, weights=None, weights_backbone=None, **spec.config)
        elif spec.arch in torchvision.models.list_models(module=torchvision.models):
            model = torchvision.models.get_model(spec.arch, weights=None, **spec.config)
        else:
            raise RepositoryError(f"{yaml_path}: arch: unknown torchvision architecture {spec.arch!r} (classifiers: "
                                  f"torchvision.models.list_models(); detectors: {', '.join(torchvision_detectors())})")
    if spec.weights == "random":
        log.warning("%s: RANDOM WEIGHTS (benchmarks only): outputs are meaningless", yaml_path)
        return model, True
    weights = folder / spec.weights
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise RepositoryError(f"{yaml_path}: weights: cannot read {weights.name} ({exc})") from None
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        raise RepositoryError(f"{yaml_path}: weights: {weights.name} does not match the architecture "
                              f"({' '.join(first[:2])[:300]})") from None
    return model, False


def torchvision_detectors() -> list[str]:
    """torchvision's detection builders whose output Vigil reads (boxes, labels, scores;
    Mask R-CNN's masks and Keypoint R-CNN's keypoints are left out)."""
    import torchvision

    return torchvision.models.list_models(module=torchvision.models.detection)


def torchvision_detector(spec: ModelSpec, folder: Path, version: int, device: str, model,
                          random: bool) -> LoadedModel:
    """The model's own transform (resize, normalise) runs inside it, on whole frames;
    its list of {boxes, labels, scores} per image becomes Detections in frame pixels,
    with torchvision's label ids (0 is the background). `split: [backbone, head]` makes
    the transform and backbone a fragment of their own, shared by every detector with
    the same backbone weights (models/tv_detection.py)."""
    import torch

    yaml_path = folder / "model.yaml"
    names = [f.name for f in spec.fragments()]
    if names not in ([], ["backbone", "head"]):
        raise RepositoryError(f"{yaml_path}: split: a torchvision detector splits as [backbone, head] (the "
                              f"transform and backbone, then the rest); was {names}")
    classes = spec.config.get("num_classes", 91)
    if len(spec.labels) != classes:
        raise RepositoryError(f"{yaml_path}: labels: {spec.arch} has {classes} classes (num_classes, with the "
                              f"background at 0); labels lists {len(spec.labels)}")
    if spec.output not in ("detections", "tensor"):
        raise RepositoryError(f"{yaml_path}: output: a torchvision detector gives detections; was {spec.output!r}")
    model = model.to(device)
    extra = {"adapter": "torchvision", "arch": spec.arch}

    def images(batch: list) -> list:
        return [image.float().div(255.0) for image in batch]

    def detections(out: list, n: int) -> list[Detections]:
        return [Detections(o["boxes"].float().cpu().numpy(), o["scores"].float().cpu().numpy(),
                           o["labels"].cpu().numpy()) for o in out]

    def preprocess(frames: np.ndarray) -> list:
        return [torch.from_numpy(np.ascontiguousarray(f)).to(device).permute(2, 0, 1) for f in frames]

    if names:
        from models import tv_detection as tv

        trunk = tv.backbone_part(model)
        head, given = tv.head_part(model)
        fragments = {
            "backbone": Fragment("backbone", torch_hash(trunk, extra), None,
                                 lambda batch: tv.run_backbone(model, images(batch)), list_collate, list_split,
                                 trunk),
            "head": Fragment("head", torch_hash(head, extra), "backbone", lambda batch: tv.run_head(head, given, batch),
                             tv.collate_features, detections, head)}
    else:
        def run(batch: list) -> list:
            with torch.inference_mode():
                return model(images(batch))

        fragments = {"model": Fragment("model", torch_hash(model, extra), None, run, list_collate, detections, model)}
    spec = spec.model_copy(update={"output": "detections"})
    return LoadedModel(spec, version, folder, device, fragments, random, preprocess)


def load(spec: ModelSpec, folder: Path, version: int, device: str) -> LoadedModel:
    from torch import nn

    model, random = build_torch(spec, folder)
    model.eval()
    if spec.adapter == "torchvision" and spec.arch in torchvision_detectors():
        return torchvision_detector(spec, folder, version, device, model, random)
    children = dict(model.named_children())
    parts: dict[str, nn.Module] = {}
    if spec.adapter == "torchvision" and spec.split:
        family = next((k for k in TORCHVISION_LAYOUTS if spec.arch.startswith(k)), None)
        names = [f.name for f in spec.fragments()]
        if family is None or names != ["backbone", "head"]:
            raise RepositoryError(f"{folder / 'model.yaml'}: split: torchvision models split as "
                                  f"[backbone, head] for {sorted(TORCHVISION_LAYOUTS)}; was {names}")
        body, head = TORCHVISION_LAYOUTS[family]
        parts = {"backbone": nn.Sequential(*[children[c] for c in body], nn.Flatten(1)), "head": children[head]}
    elif spec.split:
        for f in spec.fragments():
            if f.name not in children:
                raise RepositoryError(f"{folder / 'model.yaml'}: split: {f.name!r} is not a child module "
                                      f"(children: {sorted(children)})")
            parts[f.name] = children[f.name]
    fragments: dict[str, Fragment] = {}
    specs = spec.fragments() if parts else []
    if not parts:
        specs = [None]
        parts = {"model": model}
    for f in specs:
        name = f.name if f else "model"
        parent = f.after if f else None
        module = parts[name]
        extra = {"adapter": spec.adapter, **(root_extra(spec) if parent is None else {})}
        digest = torch_hash(module, extra)
        module = module.to(device)
        if parent is None and spec.input.kind == "image":
            run = image_root(spec, device, module, f"{spec.name}/{name}")
        else:
            run = inference(module, f"{spec.name}/{name}")
        fragments[name] = Fragment(name, digest, parent, run, torch_collate, torch_split, module)
    return LoadedModel(spec, version, folder, device, fragments, random, image_preprocess(spec, device))
