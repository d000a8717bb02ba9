"""A TensorFlow.js graph as a torch module: the nodes an output needs, run in the
file's order by the ops of `models.tfjs.ops`.

At build, nodes whose inputs are all constants are computed once (a converted graph
computes shapes from constants), filters are laid out for torch, and the constants the
run reads as tensors become buffers, so the module moves to a device, hashes by its
weights and traces like any other. Then the graph runs once on a blank batch of one,
which records every step's input shapes (the ops read them from there, never from a
tensor) and refuses a graph whose ops cannot run. The input is NCHW, as every image
model's in Vigil; a graph whose placeholder is NHWC gets it permuted.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import torch
from torch import nn

from models.tfjs.graph import Graph, Node, TfjsError
from models.tfjs.ops import CONVOLUTIONS, OPS, STATIC_INPUTS, Step, Unsupported, torch_filter

SKIPPED = ("Const", "Placeholder", "NoOp")
FILTER = "#torch"  # a convolution's filter, laid out for torch, is kept under its constant's name and this


def _split_ref(ref: str) -> tuple[str, int]:
    name, _, index = ref.partition(":")
    return name, int(index) if index else 0


def _pick(values: dict[str, Any], ref: str) -> Any:
    """The value `ref` names: a node's, or its k-th output's for a node with several."""
    name, index = _split_ref(ref)
    value = values[name]
    return value[index] if isinstance(value, tuple) else value


class GraphModule(nn.Module):
    def __init__(self, graph: Graph, outputs: dict[str, str] | None = None,
                 input_hw: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.path = graph.path
        if len(graph.inputs) != 1:
            raise TfjsError(f"{graph.path}: {len(graph.inputs)} inputs ({sorted(graph.inputs)}); an image model has one")
        (self.input_name, shape), = graph.inputs.items()
        if len(shape) != 4:
            raise TfjsError(f"{graph.path}: input {self.input_name} is {list(shape)}; an image model's is "
                            "[batch, height, width, channels] or [batch, channels, height, width]")
        # TensorFlow's own layout, unless only the second dimension can be the channels
        # (a graph converted from ONNX, as NanoDet's)
        self.nhwc = not (shape[1] in (1, 3) and shape[3] not in (1, 3))
        graph_hw = (shape[1], shape[2]) if self.nhwc else (shape[2], shape[3])
        if input_hw is not None and any(g > 0 and g != i for g, i in zip(graph_hw, input_hw)):
            raise TfjsError(f"{graph.path}: the graph's input is {list(graph_hw)} ([height, width]); asked for "
                            f"{list(input_hw)}")
        self.input_hw = tuple(input_hw) if input_hw is not None else graph_hw
        if min(self.input_hw) < 1:
            raise TfjsError(f"{graph.path}: the graph's input size is not fixed ({list(shape)}): give it "
                            "(input.size in model.yaml)")
        channels = self.channels = shape[3] if self.nhwc else shape[1]
        shape = (1, *self.input_hw, channels) if self.nhwc else (1, channels, *self.input_hw)
        self.outputs = dict(outputs) if outputs else {name: name for name in graph.outputs}
        by_name = {node.name: node for node in graph.nodes}
        for key, ref in self.outputs.items():
            if _split_ref(ref)[0] not in by_name:
                raise TfjsError(f"{graph.path}: output {key}: no node {ref!r} in the graph")
        needed = self._needed(by_name)
        constants: dict[str, Any] = dict(graph.constants)
        self.steps: list[Step] = []
        for node in graph.nodes:
            if node.name not in needed or node.op in SKIPPED:
                continue
            if node.op not in OPS:
                raise TfjsError(f"{graph.path}: node {node.name}: op {node.op} is not supported (the loader runs "
                                f"{', '.join(sorted(OPS))})")
            if all(_split_ref(i)[0] in constants for i in node.inputs):
                constants[node.name] = self._fold(Step(node), constants)
            else:
                self.steps.append(Step(node))
        for key, ref in self.outputs.items():
            if _split_ref(ref)[0] in constants:
                raise TfjsError(f"{graph.path}: output {key} ({ref}) is a constant")
        self._buffers_by_key: dict[str, str] = {}
        self._sources = [self._sources_of(step, constants) for step in self.steps]
        self._output_sources = [("env", ref) for ref in self.outputs.values()]
        self._measure(shape)

    def _sources_of(self, step: Step, constants: dict[str, Any]) -> list[tuple[str, Any]]:
        """Where each input of a step comes from: ("env", ref) computed in the run,
        ("buffer", name) a constant tensor, or ("static", value) a constant read as Python values."""
        static = {p % len(step.node.inputs) for p in STATIC_INPUTS.get(step.op, ())}
        sources: list[tuple[str, Any]] = []
        for position, ref in enumerate(step.node.inputs):
            if _split_ref(ref)[0] not in constants:
                sources.append(("env", ref))
                continue
            value = np.asarray(_pick(constants, ref))
            if position in static:
                sources.append(("static", value))
            elif step.op in CONVOLUTIONS and position == 1:
                # channels-last, like the activations it meets: else torch takes its slow
                # path for the 1x1 convolutions
                sources.append(("buffer", self._register(ref + FILTER, torch_filter(step.op, value), channels_last=True)))
            else:
                sources.append(("buffer", self._register(ref, value)))
        return sources

    def _measure(self, shape: tuple[int, ...]) -> None:
        """Run a blank batch of one, recording each step's input shapes."""
        env: dict[str, Any] = {self.input_name: torch.zeros(shape)}
        with torch.no_grad():
            for step, sources in zip(self.steps, self._sources):
                args = self._args(env, sources)
                env[step.node.name] = self._call(step, args)
                step.shapes = [tuple(int(d) for d in np.shape(a)) for a in args]

    def topology(self) -> str:
        """The nodes this module runs and its outputs, as text: with the weights, what
        makes two graphs the same computation."""
        steps = [[s.node.name, s.op, list(s.node.inputs), {k: s.attr(k) for k in sorted(s.node.attrs)}]
                 for s in self.steps]
        static = [[what.tolist() for kind, what in sources if kind == "static"] for sources in self._sources]
        return json.dumps({"steps": steps, "static": static, "outputs": self.outputs, "nhwc": self.nhwc}, default=str)

    def _needed(self, by_name: dict[str, Node]) -> set[str]:
        needed: set[str] = set()
        todo = [_split_ref(ref)[0] for ref in self.outputs.values()]
        while todo:
            name = todo.pop()
            if name in needed or name not in by_name:
                continue
            needed.add(name)
            todo.extend(_split_ref(i)[0] for i in by_name[name].inputs)
        return needed

    def _fold(self, step: Step, constants: dict[str, Any]) -> Any:
        args = [_pick(constants, ref) for ref in step.node.inputs]
        with torch.no_grad():
            out = self._call(step, args)
        if isinstance(out, tuple):
            return tuple(v.numpy() if isinstance(v, torch.Tensor) else v for v in out)
        return out.numpy() if isinstance(out, torch.Tensor) else out

    def _call(self, step: Step, args: list[Any]) -> Any:
        try:
            return OPS[step.op](step, *args)
        except Unsupported as exc:
            raise TfjsError(f"{self.path}: node {step.node.name} ({step.op}): {exc}") from None
        except (RuntimeError, ValueError, IndexError, TypeError) as exc:
            raise TfjsError(f"{self.path}: node {step.node.name} ({step.op}) failed: {exc}") from None

    def _register(self, key: str, value: np.ndarray, channels_last: bool = False) -> str:
        if key not in self._buffers_by_key:
            buffer = f"c{len(self._buffers_by_key)}_" + re.sub(r"\W", "_", key)[-40:]
            array = np.array(value, dtype=np.float32 if np.issubdtype(value.dtype, np.floating) else value.dtype)
            tensor = torch.from_numpy(array)
            self.register_buffer(buffer, tensor.contiguous(memory_format=torch.channels_last) if channels_last else tensor)
            self._buffers_by_key[key] = buffer
        return self._buffers_by_key[key]

    def _args(self, env: dict[str, Any], sources: list[tuple[str, Any]]) -> list[Any]:
        return [_pick(env, what) if kind == "env" else getattr(self, what) if kind == "buffer" else what
                for kind, what in sources]

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """NCHW images -> {output key: tensor}, in the graph's own layouts."""
        env: dict[str, Any] = {self.input_name: x.permute(0, 2, 3, 1) if self.nhwc else x}
        for step, sources in zip(self.steps, self._sources):
            env[step.node.name] = self._call(step, self._args(env, sources))
        return {key: value for key, value in zip(self.outputs, self._args(env, self._output_sources))}
