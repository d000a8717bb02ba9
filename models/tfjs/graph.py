"""A TensorFlow.js graph model as files: `model.json` (the graph's nodes and a weights
manifest) and the binary shards it names, read into nodes and numpy constants.

The manifest lists each weight's name, shape and dtype in the order its bytes follow
one another across a group's shards; a quantized weight is stored as float16, or as
uint8/uint16 with a `scale` and `min` (value = q * scale + min), and is read back as
its original dtype. Nothing here needs TensorFlow.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

MAX_JSON_BYTES = 64 << 20  # a topology far past any graph model's; weights live in the shards
MAX_WEIGHT_BYTES = 2 << 30
DTYPES = {"float32": np.float32, "int32": np.int32, "bool": np.bool_}
QUANTIZED = {"uint8": np.uint8, "uint16": np.uint16, "float16": np.float16}
TF_TYPES = {"DT_FLOAT": "float32", "DT_INT32": "int32", "DT_INT64": "int32", "DT_BOOL": "bool", "DT_HALF": "float32"}


class TfjsError(ValueError):
    """The files do not hold a graph model this loader reads; the message names the file."""


@dataclass(frozen=True)
class Node:
    name: str
    op: str
    inputs: tuple[str, ...]  # "node" or "node:k" (the node's k-th output); control inputs left out
    attrs: dict[str, Any]

    def attr(self, key: str, default: Any = None) -> Any:
        """An attribute's value: int, float, bool, str (decoded), a dtype name, or a list."""
        value = self.attrs.get(key)
        if value is None:
            return default
        return _attr_value(value)


@dataclass
class Graph:
    path: Path
    nodes: list[Node]  # in the file's order, which TensorFlow.js's converter writes topologically
    constants: dict[str, np.ndarray]
    inputs: dict[str, tuple[int, ...]]  # placeholder -> shape (-1: any)
    outputs: list[str]  # the signature's outputs, else the nodes nothing reads
    format: str = "graph-model"
    meta: dict[str, Any] = field(default_factory=dict)  # generatedBy, convertedBy


def _attr_value(value: dict) -> Any:
    if "list" in value:
        items = value["list"]
        for key in ("i", "f", "s", "b", "type"):
            if key in items:
                return [_attr_value({key: v}) for v in items[key]]
        return []
    if "i" in value:
        return int(value["i"])
    if "f" in value:
        return float(value["f"])
    if "b" in value:
        return bool(value["b"])
    if "s" in value:
        return base64.b64decode(value["s"]).decode()
    if "type" in value:
        return TF_TYPES.get(value["type"], value["type"])
    return value


def _shape(tensor_shape: dict) -> tuple[int, ...]:
    return tuple(int(d.get("size", -1)) for d in tensor_shape.get("dim", []))


def read_graph(path: Path) -> Graph:
    """`model.json` and its shards -> Graph. TfjsError names the file and what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise TfjsError(f"{path}: no such file")
    if path.stat().st_size > MAX_JSON_BYTES:
        raise TfjsError(f"{path}: {path.stat().st_size} bytes, over the {MAX_JSON_BYTES >> 20} MiB a model.json may be")
    try:
        doc = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TfjsError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or "modelTopology" not in doc or "weightsManifest" not in doc:
        raise TfjsError(f"{path}: not a TensorFlow.js model (it needs modelTopology and weightsManifest)")
    if doc.get("format", "graph-model") != "graph-model":
        raise TfjsError(f"{path}: format {doc.get('format')!r}: only graph models are read (a layers model is "
                        "converted with tensorflowjs_converter --output_format tfjs_graph_model)")
    topology = doc["modelTopology"]
    if topology.get("library", {}).get("function"):
        raise TfjsError(f"{path}: the graph calls functions (control flow), which this loader does not run")
    nodes = [Node(n["name"], n["op"], tuple(i for i in n.get("input", []) if not i.startswith("^")),
                  n.get("attr", {})) for n in topology.get("node", [])]
    constants = read_weights(path, doc["weightsManifest"])
    signature = doc.get("signature") or {}
    inputs = {k.split(":")[0]: _shape(v.get("tensorShape", {})) for k, v in signature.get("inputs", {}).items()}
    for node in nodes:
        if node.op == "Placeholder" and node.name not in inputs:
            inputs[node.name] = _shape(node.attrs.get("shape", {}).get("shape", {}))
    outputs = [k.split(":")[0] for k in signature.get("outputs", {})]
    if not outputs:
        read = {i.split(":")[0] for n in nodes for i in n.inputs}
        outputs = [n.name for n in nodes if n.name not in read and n.op not in ("Const", "Placeholder")]
    meta = {k: doc[k] for k in ("generatedBy", "convertedBy") if k in doc}
    return Graph(path, nodes, constants, inputs, outputs, meta=meta)


def read_weights(path: Path, manifest: list[dict]) -> dict[str, np.ndarray]:
    constants: dict[str, np.ndarray] = {}
    for group in manifest:
        data = bytearray()
        for shard in group.get("paths", []):
            file = (path.parent / shard).resolve()
            if path.parent.resolve() not in file.parents:
                raise TfjsError(f"{path}: weights path {shard!r} leaves the model's folder")
            if not file.is_file():
                raise TfjsError(f"{path}: weights shard {shard} is missing (beside {path.name})")
            data += file.read_bytes()
            if len(data) > MAX_WEIGHT_BYTES:
                raise TfjsError(f"{path}: weights over {MAX_WEIGHT_BYTES >> 30} GiB")
        offset = 0
        for spec in group.get("weights", []):
            array, offset = _weight(path, spec, data, offset)
            constants[spec["name"]] = array
        if offset != len(data):
            raise TfjsError(f"{path}: the manifest accounts for {offset} bytes of weights; the shards hold {len(data)}")
    return constants


def _weight(path: Path, spec: dict, data: bytearray, offset: int) -> tuple[np.ndarray, int]:
    name, shape, dtype = spec["name"], tuple(spec.get("shape", [])), spec.get("dtype", "float32")
    if dtype not in DTYPES:
        raise TfjsError(f"{path}: weight {name}: dtype {dtype!r} is not read (float32, int32, bool)")
    count = int(np.prod(shape)) if shape else 1
    quant = spec.get("quantization")
    stored = QUANTIZED.get(quant["dtype"]) if quant else DTYPES[dtype]
    if stored is None:
        raise TfjsError(f"{path}: weight {name}: quantization {quant['dtype']!r} is not read (uint8, uint16, float16)")
    size = count * np.dtype(stored).itemsize
    if offset + size > len(data):
        raise TfjsError(f"{path}: weight {name} runs past the end of the shards ({offset + size} > {len(data)} bytes)")
    raw = np.frombuffer(bytes(data[offset:offset + size]), dtype=stored, count=count)
    if quant and quant["dtype"] in ("uint8", "uint16"):
        values = raw.astype(np.float32) * np.float32(quant["scale"]) + np.float32(quant["min"])
        if dtype != "float32":
            values = np.round(values)
    else:
        values = raw
    return values.astype(DTYPES[dtype]).reshape(shape), offset + size
