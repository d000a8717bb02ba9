"""The TensorFlow.js family (`adapter: tfjs`): a graph model's files into one fragment."""

from __future__ import annotations

import hashlib
from pathlib import Path

from models.build import root_extra, single
from models.loaded import LoadedModel, torch_hash
from models.repository import ModelSpec, RepositoryError


def load(spec: ModelSpec, folder: Path, version: int, device: str) -> LoadedModel:
    """A TensorFlow.js graph model (`weights`: its model.json, its shards beside it), run
    natively (models/tfjs). `config.outputs` names the graph outputs to compute, by the
    keys the output kind reads (all of the signature's when not given). The graph's input
    size is fixed: `input.size` must be it. With `cpu_runtime: onnxruntime`, a CPU runs
    it on onnxruntime where that checks out (models/tfjs/onnx_cpu.py)."""
    from models.tfjs.graph import TfjsError, read_graph
    from models.tfjs.module import GraphModule

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
    digest = torch_hash(module, {"adapter": "tfjs", "graph": topology, **root_extra(spec)})
    runner = None
    if device == "cpu" and spec.cpu_runtime == "onnxruntime":
        from core.host import usable_cores
        from models.tfjs.onnx_cpu import onnx_runner

        runner = onnx_runner(module, folder, digest, usable_cores())
    return single(spec, folder, version, device, module.to(device), digest, runner=runner)
