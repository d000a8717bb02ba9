"""A loaded model version: its fragments, and how a batch is formed and split.

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
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from core.classes import Classes
from models import decode
from models.repository import DENSE_KINDS, YOLO_KINDS, ModelSpec


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
            return decode.named_detections(self.spec, output, frame_size) if isinstance(output, dict) else output
        if kind in decode.CHECKED_KINDS:
            decode.check_output(self.spec, output)
        if kind == "centernet":
            return decode.centernet_detections(self.spec, leaf, [output], frame_size)[0]
        if kind in YOLO_KINDS:
            return decode.yolo_detections(self.spec, output, frame_size)
        if kind in DENSE_KINDS:
            return decode.dense_detections(self.spec, [output], [frame_size])[0]
        import torch

        tensor = output.float().cpu()
        if kind == "classification":
            return Classes(torch.softmax(tensor.reshape(-1), dim=-1).numpy())
        return tensor.numpy()

    def postprocess_many(self, leaf: str, outputs: list[Any], frame_sizes: list[tuple[int, int]]) -> list[Any]:
        """`postprocess` of several items of one leaf. A CenterNet head's peaks are found
        for items of one frame size at once: its dozen small operators cost about as
        much per call as the work in them, so one call for many items saves most of that."""
        if self.spec.output in DENSE_KINDS and len(outputs) > 1:
            for output in outputs:
                decode.check_output(self.spec, output)
            return decode.dense_detections(self.spec, outputs, frame_sizes)
        if self.spec.output == "centernet" and len(outputs) > 1 and len(set(frame_sizes)) == 1:
            for output in outputs:
                decode.check_output(self.spec, output)
            first = outputs[0]
            if all(o[k].shape == first[k].shape for o in outputs for k in first):
                return decode.centernet_detections(self.spec, leaf, outputs, frame_sizes[0])
        return [self.postprocess(leaf, o, size) for o, size in zip(outputs, frame_sizes)]


# -- forming and splitting batches ---------------------------------------------------------
def torch_collate(items: list[Any]):
    import torch

    first = items[0]
    if isinstance(first, dict):
        return {k: torch.stack([it[k] for it in items]) for k in first}
    return torch.stack(items)


def torch_split(out: Any, n: int) -> list[Any]:
    if isinstance(out, dict):
        return [{k: v[i] for k, v in out.items()} for i in range(n)]
    return list(out.unbind(0))


def list_collate(items: list[Any]) -> list[Any]:
    return list(items)


def list_split(out: list[Any], n: int) -> list[Any]:
    return list(out)


# -- content hashes ------------------------------------------------------------------------
def torch_hash(module, extra: dict) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(extra, sort_keys=True).encode())
    h.update(repr(module).encode())
    for key, tensor in module.state_dict().items():
        h.update(key.encode())
        h.update(str(tuple(tensor.shape)).encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def file_hash(path: Path, extra: dict) -> str:
    h = hashlib.sha256(json.dumps(extra, sort_keys=True).encode())
    h.update(path.read_bytes())
    return h.hexdigest()
