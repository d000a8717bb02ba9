"""torchvision detectors split at the backbone: the transform and backbone (+FPN) are
one fragment, which apps on other detectors with the same backbone weights share, and
everything after it (RPN and ROI heads, or the dense head, anchors and their decode)
is the head.

The head runs the model's own `forward`, with its transform and backbone swapped for
stand-ins that hand back what the backbone fragment computed: the image sizes after
the transform, the padded batch shape the anchors are laid on, and the features. So
the head is exactly the library's code, whichever family (R-CNN, RetinaNet, FCOS,
SSD). Items batched together at the head whose backbone batches were padded to
different shapes have their features zero-padded to the largest (frames of one size,
the usual case, are never padded)."""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


class _Given:
    """What the head's stand-ins hand back, set for each call (one call at a time)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.images: Any = None
        self.features: Any = None


class _GivenTransform(nn.Module):
    def __init__(self, transform: nn.Module, given: _Given) -> None:
        super().__init__()
        self.given = given
        self.postprocess = transform.postprocess  # boxes back to the frame's own size

    def forward(self, images, targets=None):
        return self.given.images, targets


class _GivenBackbone(nn.Module):
    def __init__(self, backbone: nn.Module, given: _Given) -> None:
        super().__init__()
        self.given = given
        if hasattr(backbone, "out_channels"):
            self.out_channels = backbone.out_channels

    def forward(self, tensors):
        return self.given.features


def backbone_part(model: nn.Module) -> nn.Module:
    """The transform and backbone of `model`, as one module (hashed as the shared fragment)."""
    return nn.ModuleDict({"transform": model.transform, "backbone": model.backbone})


def run_backbone(model: nn.Module, images: list[torch.Tensor]) -> list[dict]:
    """Frames [3, H, W] in [0, 1] -> per image: its features, its size after the
    transform, its original size and the padded batch shape."""
    originals = [tuple(img.shape[-2:]) for img in images]
    with torch.inference_mode():
        batch, _ = model.transform(images)
        features = model.backbone(batch.tensors)
    if isinstance(features, torch.Tensor):
        features = OrderedDict([("0", features)])
    padded = tuple(batch.tensors.shape[-2:])
    return [{"features": OrderedDict((k, v[i]) for k, v in features.items()), "size": batch.image_sizes[i],
             "original": originals[i], "padded": padded} for i in range(len(images))]


def collate_features(items: list[dict]) -> dict:
    """Per-image backbone outputs -> one batch; features padded to the largest shape."""
    padded = tuple(max(it["padded"][d] for it in items) for d in (0, 1))
    features = OrderedDict()
    for key in items[0]["features"]:
        maps = [it["features"][key] for it in items]
        h, w = max(m.shape[-2] for m in maps), max(m.shape[-1] for m in maps)
        features[key] = torch.stack([F.pad(m, (0, w - m.shape[-1], 0, h - m.shape[-2])) for m in maps])
    return {"features": features, "sizes": [it["size"] for it in items],
            "originals": [it["original"] for it in items], "padded": padded}


def head_part(model: nn.Module) -> tuple[nn.Module, _Given]:
    """A copy of `model` (sharing its weights) whose transform and backbone are stand-ins."""
    head = copy.copy(model)
    head._modules = dict(model._modules)  # its own table of children: the model's keep theirs
    given = _Given()
    head.transform = _GivenTransform(model.transform, given)
    head.backbone = _GivenBackbone(model.backbone, given)
    return head, given


def run_head(head: nn.Module, given: _Given, batch: dict) -> list[dict]:
    """The model's own forward over given features -> its list of {boxes, scores, labels}."""
    from torchvision.models.detection.image_list import ImageList

    first = next(iter(batch["features"].values()))
    n = first.shape[0]
    # the anchors read only the padded batch's shape, dtype and device: a stand-in of no memory
    tensors = first.new_zeros(()).expand(n, 3, *batch["padded"])
    originals = [first.new_zeros(()).expand(3, *o) for o in batch["originals"]]
    with given.lock:
        given.images = ImageList(tensors, [tuple(s) for s in batch["sizes"]])
        given.features = batch["features"]
        try:
            with torch.inference_mode():
                return head(originals)
        finally:
            given.images = given.features = None
