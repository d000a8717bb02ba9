"""Adapters: build a model version from its `model.yaml` into fragments the engine runs.

A fragment is one piece of a model that runs as a batch: the whole model, or one of
its named child modules when `split` is given. Fragments form a tree (a backbone with
several heads); each has a content hash over its architecture and weights (and, for a
root, the preprocessing it expects), so identical pieces of different models and
versions are recognised without anyone declaring them shared.

Host work lives here too: `preprocess` turns frames into the root's input and
`postprocess` turns a leaf's output into results; the engine runs both off the device
loop.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from engine.classes import Classes
from engine.detections import Detections
from engine.repository import DENSE_KINDS, YOLO_KINDS, ModelSpec, RepositoryError
from engine.tracing import TracedModule

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


@dataclass
class Fragment:
    name: str
    hash: str
    parent: str | None
    run: Callable[[Any], Any]  # batch input -> batch output
    collate: Callable[[list[Any]], Any]  # per-item inputs -> batch input
    split: Callable[[Any, int], list[Any]]  # batch output -> per-item outputs
    module: Any = None  # kept so the engine can free it

    def describe(self) -> dict:
        return {"name": self.name, "hash": self.hash[:12], "parent": self.parent}


@dataclass
class LoadedModel:
    spec: ModelSpec
    version: int
    folder: Path
    device: str
    fragments: dict[str, Fragment]  # root first
    random_weights: bool = False
    preprocess: Callable[[np.ndarray], list[Any]] = field(default=lambda frames: list(frames))

    @property
    def leaves(self) -> list[str]:
        parents = {f.parent for f in self.fragments.values()}
        return [name for name in self.fragments if name not in parents]

    def path_to(self, leaves: list[str]) -> list[str]:
        """Every fragment on the way to these leaves, root first."""
        needed: set[str] = set()
        for leaf in leaves:
            name: str | None = leaf
            while name is not None:
                needed.add(name)
                name = self.fragments[name].parent
        return [n for n in self.fragments if n in needed]

    def leaves_for_labels(self, labels: list[str] | None) -> list[str]:
        """The heads that detect any of these labels (all leaves when None)."""
        if labels is None or not self.spec.heads:
            return self.leaves
        wanted = [head for head, names in self.spec.heads.items() if set(names) & set(labels)]
        return wanted or self.leaves

    def infer(self, frames: np.ndarray, leaves: list[str] | None = None) -> list[dict[str, Any]]:
        """Run directly, without the engine: frames [N, H, W, 3] -> per frame {leaf: result}.
        For evaluation and for baselines that call a model in a plain loop."""
        leaves = leaves or self.leaves
        values: dict[str, Any] = {}
        for name in self.path_to(leaves):
            frag = self.fragments[name]
            x = frag.collate(self.preprocess(frames)) if frag.parent is None else values[frag.parent]
            values[name] = frag.run(x)
        sizes = [(frames.shape[2], frames.shape[1])] * len(frames)
        per_leaf = {leaf: self.postprocess_many(leaf, self.fragments[leaf].split(values[leaf], len(frames)), sizes)
                    for leaf in leaves}
        return [{leaf: per_leaf[leaf][i] for leaf in leaves} for i in range(len(frames))]

    def postprocess(self, leaf: str, output: Any, frame_size: tuple[int, int]) -> Any:
        """One item's leaf output -> Detections (detectors), Classes (classifiers) or a numpy array."""
        kind = self.spec.output
        if kind == "detections":
            return named_detections(self.spec, output, frame_size) if isinstance(output, dict) else output
        if kind in CHECKED_KINDS:
            check_output(self.spec, output)
        if kind == "centernet":
            return self._centernet(leaf, [output], frame_size)[0]
        if kind in YOLO_KINDS:
            return yolo_detections(self.spec, output, frame_size)
        if kind in DENSE_KINDS:
            return dense_detections(self.spec, [output], [frame_size])[0]
        import torch

        tensor = output.float().cpu()
        if kind == "classification":
            return Classes(torch.softmax(tensor.reshape(-1), dim=-1).numpy())
        return tensor.numpy()

    def postprocess_many(self, leaf: str, outputs: list[Any], frame_sizes: list[tuple[int, int]]) -> list[Any]:
        """`postprocess` of several items of one leaf. A CenterNet head's peaks are found
        for items of one frame size at once: its dozen small operators cost about as
        much per call as the work in them (0.32 ms an item alone, 0.17 in eights)."""
        if self.spec.output in DENSE_KINDS and len(outputs) > 1:
            for output in outputs:
                check_output(self.spec, output)
            return dense_detections(self.spec, outputs, frame_sizes)
        if self.spec.output == "centernet" and len(outputs) > 1 and len(set(frame_sizes)) == 1:
            for output in outputs:
                check_output(self.spec, output)
            first = outputs[0]
            if all(o[k].shape == first[k].shape for o in outputs for k in first):
                return self._centernet(leaf, outputs, frame_sizes[0])
        return [self.postprocess(leaf, o, size) for o, size in zip(outputs, frame_sizes)]

    def _centernet(self, leaf: str, outputs: list[dict], frame_size: tuple[int, int]) -> list[Detections]:
        """Items of one frame size and one head's output shapes -> Detections in frame pixels."""
        import torch

        from engine.models.scenedet import decode

        head = {k: torch.stack([o[k] for o in outputs]).float().cpu() for k in outputs[0]}
        width, height = frame_size
        label_ids = np.array([self.spec.labels.index(n) for n in self.spec.heads[leaf]], np.int64)
        found = []
        for xyxy, score, cls in decode(head, _scale_for(self.spec, frame_size), min_score=0.05):
            xyxy[:, [0, 2]] = xyxy[:, [0, 2]].clip(0, width - 1)
            xyxy[:, [1, 3]] = xyxy[:, [1, 3]].clip(0, height - 1)
            found.append(Detections(xyxy, score, label_ids[cls]))
        return found


def yolo_detections(spec: ModelSpec, output: Any, frame_size: tuple[int, int]) -> Detections:
    """One image's YOLO output -> Detections in frame pixels (engine/yolo.py)."""
    from engine import yolo

    post = spec.postprocess
    found = yolo.suppress(spec.output, yolo.candidates(spec.output, output.cpu(), post.min_score),
                          post.nms_iou, post.max_detections, post.class_agnostic)
    known = (found.cls >= 0) & (found.cls < len(spec.labels))  # an end2end class outside the labels is not ours
    xyxy = yolo.to_frame(found.xyxy[known].numpy(), frame_size, input_hw(spec, frame_size),
                         spec.input.letterbox is not None)
    return Detections(xyxy, found.score[known].numpy(), found.cls[known].numpy())


def dense_detections(spec: ModelSpec, outputs: list[dict], frame_sizes: list[tuple[int, int]]) -> list[Detections]:
    """Items' dense outputs (engine/anchor_free.py) -> Detections in frame pixels, decoded
    as one batch, then suppressed item by item as YOLO's."""
    import torch

    from engine import anchor_free, yolo

    post, hw = spec.postprocess, spec.input.size
    batch = {k: torch.stack([o[k] for o in outputs]) for k in outputs[0]}
    if spec.output == "centernet_ltrb":
        found = anchor_free.centernet_ltrb(batch["heatmap"], batch["ltrb"], hw, post.min_score)
    else:
        found = anchor_free.gfl(anchor_free.gfl_levels(batch, len(spec.labels)), hw, post.min_score)
    out = []
    for candidates, size in zip(found, frame_sizes):
        kept = yolo.suppress("yolo", candidates, post.nms_iou, post.max_detections, post.class_agnostic)
        out.append(Detections(yolo.to_frame(kept.xyxy.cpu().numpy(), size, hw, False), kept.score.cpu().numpy(),
                              kept.cls.cpu().numpy()))
    return out


def named_detections(spec: ModelSpec, output: dict, frame_size: tuple[int, int]) -> Detections:
    """One image's named outputs (boxes in input pixels, scores, labels) -> Detections."""
    from engine.yolo import to_frame

    scores = output["scores"].float().cpu().numpy().reshape(-1)
    labels = output["labels"].cpu().numpy().astype(np.int64).reshape(-1)
    boxes = output["boxes"].float().cpu().numpy().reshape(-1, 4)
    keep = scores >= spec.postprocess.min_score
    xyxy = to_frame(boxes[keep], frame_size, input_hw(spec, frame_size), spec.input.letterbox is not None)
    return Detections(xyxy, scores[keep], labels[keep])


CHECKED_KINDS = ("classification", "centernet", *YOLO_KINDS, *DENSE_KINDS)  # outputs whose layout is checked at load
CENTERNET_KEYS = {"heatmap", "offset", "size"}


def check_output(spec: ModelSpec, output: Any) -> None:
    """One item's output against the declared kind; OutputMismatch names both."""
    if spec.output == "classification":
        shape = tuple(getattr(output, "shape", ()))
        classes = shape[-1] if shape else None
        if len(shape) != 1 or (spec.labels and classes != len(spec.labels)):
            want = f"[{len(spec.labels)} classes]" if spec.labels else "[classes]"
            raise OutputMismatch(f"a classification output is {want} per image (the labels name "
                                 f"{len(spec.labels)}); one image's was {list(shape)}")
    elif spec.output == "centernet":
        if not isinstance(output, dict) or set(output) != CENTERNET_KEYS:
            raise OutputMismatch(f"a centernet output is a dict of {sorted(CENTERNET_KEYS)} per head; was "
                                 f"{_keys_of(output)}")
    elif spec.output == "centernet_ltrb":
        if not isinstance(output, dict) or set(output) != {"heatmap", "ltrb"}:
            raise OutputMismatch(f"a centernet_ltrb output is a dict of ['heatmap', 'ltrb']; was {_keys_of(output)}")
        heat, ltrb = output["heatmap"].shape, output["ltrb"].shape
        if len(heat) != 3 or heat[-1] != len(spec.labels) or tuple(ltrb) != (*heat[:2], 4):
            raise OutputMismatch(f"a centernet_ltrb output is heatmap [h, w, {len(spec.labels)} classes] and ltrb "
                                 f"[h, w, 4]; were {list(heat)} and {list(ltrb)}")
    elif spec.output == "gfl":
        from engine.anchor_free import gfl_levels

        if not isinstance(output, dict):
            raise OutputMismatch(f"a gfl output is a dict of named outputs; was {type(output).__name__}")
        try:
            gfl_levels({k: v.unsqueeze(0) for k, v in output.items()}, len(spec.labels))
        except ValueError as exc:
            raise OutputMismatch(str(exc)) from None
    elif spec.output in YOLO_KINDS:
        from engine.yolo import LayoutError, check_layout

        shape = tuple(getattr(output, "shape", ()))
        try:
            check_layout(spec.output, shape, len(spec.labels))
        except LayoutError as exc:
            raise OutputMismatch(str(exc)) from None


def _keys_of(output: Any) -> Any:
    """What an output was, for a mismatch's message: its keys, or its type."""
    return sorted(output) if isinstance(output, dict) else type(output).__name__


class OutputMismatch(ValueError):
    """A model's output does not have the layout its `output:` kind declares."""


def _scale_for(spec: ModelSpec, frame_size: tuple[int, int]) -> float:
    if spec.input.scale is not None:
        return spec.input.scale
    return 1.0


# -- hashing -------------------------------------------------------------------------------
def torch_hash(module, extra: dict) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(extra, sort_keys=True).encode())
    h.update(repr(module).encode())
    for key, tensor in module.state_dict().items():
        h.update(key.encode())
        h.update(str(tuple(tensor.shape)).encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


# -- preprocessing ---------------------------------------------------------------------------
def image_preprocess(spec: ModelSpec, device: str) -> Callable[[np.ndarray], list[Any]]:
    """Frames [N, H, W, 3] uint8 RGB -> per-frame [3, h, w] uint8 tensors on the device:
    resized (and padded with `scale` or the frame's own size), letterboxed, or resized
    to a fixed size, in the channel order the model expects. They stay 8-bit until a
    batch is formed (`image_input`): a quarter of the memory in queues and of the bytes
    sent to a GPU."""
    import cv2
    import torch

    inp = spec.input

    def run(frames: np.ndarray) -> list[Any]:
        n, height, width, _ = frames.shape
        if inp.letterbox is not None:
            from engine.yolo import letterbox

            out = np.stack([letterbox(frames[i], inp.letterbox) for i in range(n)])
        else:
            if inp.size is not None:
                h, w = inp.size
                ph, pw = h, w  # a fixed input is never padded
            else:
                h, w = (int(round(height * inp.scale)), int(round(width * inp.scale))) if inp.scale is not None \
                    else (height, width)
                ph, pw = -(-h // inp.pad_to) * inp.pad_to, -(-w // inp.pad_to) * inp.pad_to
            out = np.zeros((n, ph, pw, 3), np.uint8)
            for i in range(n):
                out[i, :h, :w] = frames[i] if (h, w) == (height, width) else \
                    cv2.resize(frames[i], (w, h), interpolation=cv2.INTER_AREA)
        if inp.color == "bgr":
            out = np.ascontiguousarray(out[..., ::-1])
        return list(torch.from_numpy(out).to(device).permute(0, 3, 1, 2).unbind(0))

    return run


def input_hw(spec: ModelSpec, frame_size: tuple[int, int]) -> tuple[int, int] | None:
    """[height, width] the frame was resized to before any padding (None: its own)."""
    inp = spec.input
    if inp.letterbox is not None:
        return inp.letterbox
    if inp.size is not None:
        return inp.size
    if inp.scale is not None:
        return int(round(frame_size[1] * inp.scale)), int(round(frame_size[0] * inp.scale))
    return None


def image_input(spec: ModelSpec, device: str, run: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Wrap a root fragment: a uint8 batch becomes floats in [0, 1], normalised if the
    model asks, in one vectorised step on the device."""
    import torch

    inp = spec.input
    mean = torch.tensor(inp.mean, device=device).view(1, 3, 1, 1) if inp.mean else None
    std = torch.tensor(inp.std, device=device).view(1, 3, 1, 1) if inp.std else None

    def wrapped(batch):
        x = batch.float().div_(255.0)
        if mean is not None:
            x = (x - mean) / std
        return run(x)

    return wrapped


def _torch_collate(items: list[Any]):
    import torch

    first = items[0]
    if isinstance(first, dict):
        return {k: torch.stack([it[k] for it in items]) for k in first}
    return torch.stack(items)


def _torch_split(out: Any, n: int) -> list[Any]:
    if isinstance(out, dict):
        return [{k: v[i] for k, v in out.items()} for i in range(n)]
    return list(out.unbind(0))


def _list_collate(items: list[Any]) -> list[Any]:
    return list(items)


def _list_split(out: list[Any], n: int) -> list[Any]:
    return list(out)


# -- adapters ------------------------------------------------------------------------------------
def load_model(spec: ModelSpec, folder: Path, version: int, device: str) -> LoadedModel:
    """Build a version's fragments on `device`. Raises RepositoryError naming the file."""
    yaml_path = folder / "model.yaml"
    try:
        builder = {"python": _torch_model, "torchvision": _torch_model, "torchscript": _torch_file,
                   "torch_export": _torch_file, "onnx": _onnx, "tfjs": _tfjs, "opencv_hog": _opencv,
                   "opencv_haar": _opencv, "transformers": _transformers}[spec.adapter]
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


def _root_extra(spec: ModelSpec) -> dict:
    return {"input": spec.input.model_dump(mode="json")}


def _build_torch(spec: ModelSpec, folder: Path):
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


def _torchvision_detector(spec: ModelSpec, folder: Path, version: int, device: str, model,
                          random: bool) -> LoadedModel:
    """The model's own transform (resize, normalise) runs inside it, on whole frames;
    its list of {boxes, labels, scores} per image becomes Detections in frame pixels,
    with torchvision's label ids (0 is the background). `split: [backbone, head]` makes
    the transform and backbone a fragment of their own, shared by every detector with
    the same backbone weights (engine/tv_detection.py)."""
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
        from engine import tv_detection as tv

        trunk = tv.backbone_part(model)
        head, given = tv.head_part(model)
        fragments = {
            "backbone": Fragment("backbone", torch_hash(trunk, extra), None,
                                 lambda batch: tv.run_backbone(model, images(batch)), _list_collate, _list_split,
                                 trunk),
            "head": Fragment("head", torch_hash(head, extra), "backbone", lambda batch: tv.run_head(head, given, batch),
                             tv.collate_features, detections, head)}
    else:
        def run(batch: list) -> list:
            with torch.inference_mode():
                return model(images(batch))

        fragments = {"model": Fragment("model", torch_hash(model, extra), None, run, _list_collate, detections, model)}
    spec = spec.model_copy(update={"output": "detections"})
    return LoadedModel(spec, version, folder, device, fragments, random, preprocess)


def _torch_model(spec: ModelSpec, folder: Path, version: int, device: str) -> LoadedModel:
    from torch import nn

    model, random = _build_torch(spec, folder)
    model.eval()
    if spec.adapter == "torchvision" and spec.arch in torchvision_detectors():
        return _torchvision_detector(spec, folder, version, device, model, random)
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
        extra = {"adapter": spec.adapter, **(_root_extra(spec) if parent is None else {})}
        digest = torch_hash(module, extra)
        module = module.to(device)
        if parent is None and spec.input.kind == "image":
            run = _image_root(spec, device, module, f"{spec.name}/{name}")
        else:
            run = _inference(module, f"{spec.name}/{name}")
        fragments[name] = Fragment(name, digest, parent, run, _torch_collate, _torch_split, module)
    return LoadedModel(spec, version, folder, device, fragments, random, image_preprocess(spec, device))


def _inference(module, name: str = ""):
    """Calls `module` in inference mode; through TorchScript traces (`engine.tracing`),
    which run with the GIL released, unless it is scripted already."""
    import torch

    if isinstance(module, torch.jit.ScriptModule):
        def run(batch):
            with torch.inference_mode():
                return module(batch)

        return run
    return TracedModule(module, name)


def _image_root(spec: ModelSpec, device: str, module, name: str):
    """A root fragment on images: the uint8 batch's conversion traced with the module
    (engine/torch_input.py), or before it for a module scripted already."""
    import torch

    if isinstance(module, torch.jit.ScriptModule):
        return image_input(spec, device, _inference(module, name))
    from engine.torch_input import ImageInput

    inp = spec.input
    return _inference(ImageInput(module, inp.mean, inp.std, device), name)


def _single(spec: ModelSpec, folder: Path, version: int, device: str, module, digest: str,
            random: bool = False, fixed_batch: int | None = None, runner: Callable | None = None) -> LoadedModel:
    """One fragment: `module` traced (engine/tracing.py), or `runner` where given, which
    computes what the module does (the module is kept for its hash and to free it)."""
    if spec.split:
        raise RepositoryError(f"{folder / 'model.yaml'}: split: {spec.adapter} models run as one fragment")
    run = runner or _inference(module, spec.name)
    if fixed_batch is not None:
        run = _padded_to(fixed_batch, run)
    frag = Fragment("model", digest, None, image_input(spec, device, run), _torch_collate, _torch_split, module)
    return LoadedModel(spec, version, folder, device, {"model": frag}, random, image_preprocess(spec, device))


def _file_hash(path: Path, extra: dict) -> str:
    h = hashlib.sha256(json.dumps(extra, sort_keys=True).encode())
    h.update(path.read_bytes())
    return h.hexdigest()


def _padded_to(batch: int, run: Callable) -> Callable:
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


def _torch_file(spec: ModelSpec, folder: Path, version: int, device: str) -> LoadedModel:
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
    return _single(spec, folder, version, device, module,
                   _file_hash(path, {"adapter": spec.adapter, **_root_extra(spec)}), fixed_batch=fixed_batch)


def _onnx(spec: ModelSpec, folder: Path, version: int, device: str) -> LoadedModel:
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
        run = _padded_to(fixed_batch, run)
    frag = Fragment("model", _file_hash(path, {"adapter": "onnx", **_root_extra(spec)}), None,
                    image_input(spec, "cpu", run), _torch_collate, _torch_split, session)
    return LoadedModel(spec, version, folder, device, {"model": frag}, False, image_preprocess(spec, "cpu"))


def _tfjs(spec: ModelSpec, folder: Path, version: int, device: str) -> LoadedModel:
    """A TensorFlow.js graph model (`weights`: its model.json, its shards beside it), run
    natively (engine/tfjs). `config.outputs` names the graph outputs to compute, by the
    keys the output kind reads (all of the signature's when not given). The graph's input
    size is fixed: `input.size` must be it. With `cpu_runtime: onnxruntime`, a CPU runs
    it on onnxruntime where that checks out (engine/tfjs/onnx_cpu.py)."""
    from engine.tfjs.graph import TfjsError, read_graph
    from engine.tfjs.module import GraphModule

    yaml_path = folder / "model.yaml"
    unknown = set(spec.config) - {"outputs"}
    if unknown:
        raise RepositoryError(f"{yaml_path}: config: a tfjs model takes only outputs; was {sorted(unknown)}")
    try:
        graph = read_graph(folder / spec.weights)
        module = GraphModule(graph, spec.config.get("outputs"), spec.input.size).eval()
    except TfjsError as exc:
        raise RepositoryError(f"{yaml_path}: weights: {exc}") from None
    if spec.input.size != module.input_hw:
        raise RepositoryError(f"{yaml_path}: input: size: the graph's input is {list(module.input_hw)} "
                              f"([height, width]); give it as size")
    topology = hashlib.sha256(module.topology().encode()).hexdigest()
    digest = torch_hash(module, {"adapter": "tfjs", "graph": topology, **_root_extra(spec)})
    runner = None
    if device == "cpu" and spec.cpu_runtime == "onnxruntime":
        from engine.lanes import usable_cores
        from engine.tfjs.onnx_cpu import onnx_runner

        runner = onnx_runner(module, folder, digest, usable_cores())
    return _single(spec, folder, version, device, module.to(device), digest, runner=runner)


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


def _transformers(spec: ModelSpec, folder: Path, version: int, device: str) -> LoadedModel:
    from engine import hf_detection

    return hf_detection.load(spec, folder, version, device)


def _opencv(spec: ModelSpec, folder: Path, version: int, device: str) -> LoadedModel:
    """OpenCV's classical detectors run on the CPU on whole frames, one frame at a time."""
    from engine.models.opencv import HaarDetector, HaarOptions, HogDetector, HogOptions

    try:
        if spec.adapter == "opencv_hog":
            detector = HogDetector(HogOptions(**spec.config))
        else:
            detector = HaarDetector(HaarOptions(**spec.config))
    except (TypeError, ValueError) as exc:
        raise RepositoryError(f"{folder / 'model.yaml'}: config: {exc}") from None
    if spec.split:
        raise RepositoryError(f"{folder / 'model.yaml'}: split: OpenCV detectors run as one fragment")
    digest = hashlib.sha256(json.dumps({"adapter": spec.adapter, "config": spec.config}, sort_keys=True).encode())
    frag = Fragment("model", digest.hexdigest(), None, detector.detect, _list_collate, _list_split, detector)
    return LoadedModel(spec, version, folder, "cpu", {"model": frag}, False, lambda frames: list(frames))
