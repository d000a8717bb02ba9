"""The TensorFlow.js graph-model loader on small graphs written here: the weights
manifest's encodings, TensorFlow's padding and resizing rules, the batch a converted
graph fixes at 1, and refusals that name what is wrong. (tests/models/test_tfjs_parity.py
compares whole COCO graphs with TensorFlow.js itself.)"""

from __future__ import annotations

import base64
import json
import warnings

import numpy as np
import pytest
import torch

from models.tfjs.graph import TfjsError, read_graph
from models.tfjs.module import GraphModule


def s(text: str) -> dict:
    return {"s": base64.b64encode(text.encode()).decode()}


def ints(*values: int) -> dict:
    return {"list": {"i": [str(v) for v in values]}}


def write_model(folder, nodes, weights, *, outputs=None, input_shape=(1, 4, 4, 1), extra_manifest=None):
    """model.json and one shard: `weights` is [(name, array, quantization or None)]."""
    data, specs = b"", []
    for name, array, quant in weights:
        spec = {"name": name, "shape": list(array.shape), "dtype": "int32" if array.dtype.kind == "i" else "float32"}
        if quant == "float16":
            data += array.astype(np.float16).tobytes()
            spec["quantization"] = {"dtype": "float16"}
        elif quant in ("uint8", "uint16"):
            lo, hi = float(array.min()), float(array.max())
            levels = 255 if quant == "uint8" else 65535
            scale = (hi - lo) / levels or 1.0
            q = np.round((array - lo) / scale).astype(np.uint8 if quant == "uint8" else np.uint16)
            data += q.tobytes()
            spec["quantization"] = {"dtype": quant, "scale": scale, "min": lo}
        else:
            data += array.astype(np.int32 if array.dtype.kind == "i" else np.float32).tobytes()
        specs.append(spec)
    (folder / "w.bin").write_bytes(data)
    placeholder = {"name": "x", "op": "Placeholder", "attr": {"shape": {"shape": {"dim": [{"size": str(d)}
                                                                                          for d in input_shape]}}}}
    consts = [{"name": name, "op": "Const", "attr": {}} for name, _, _ in weights]
    doc = {"format": "graph-model", "modelTopology": {"node": [placeholder, *consts, *nodes]},
           "weightsManifest": [{"paths": ["w.bin"], "weights": specs}] + (extra_manifest or [])}
    if outputs:
        doc["signature"] = {"outputs": {o: {"name": o} for o in outputs}}
    (folder / "model.json").write_text(json.dumps(doc))
    return folder / "model.json"


def run(path, x_nchw, outputs=None) -> dict:
    module = GraphModule(read_graph(path), outputs).eval()
    with torch.no_grad():
        return {k: v.numpy() for k, v in module(torch.as_tensor(x_nchw, dtype=torch.float32)).items()}


def test_quantized_weights_read_back_as_their_scale_and_min_say(tmp_path):
    rng = np.random.default_rng(0)
    w8, w16, half = (rng.normal(size=(3, 5)).astype(np.float32) for _ in range(3))
    path = write_model(tmp_path, [], [("a", w8, "uint8"), ("b", w16, "uint16"), ("c", half, "float16"),
                                      ("d", np.arange(6, dtype=np.int32).reshape(2, 3), None)])
    graph = read_graph(path)
    step8 = (w8.max() - w8.min()) / 255
    assert np.abs(graph.constants["a"] - w8).max() <= step8 / 2 + 1e-6
    assert np.abs(graph.constants["b"] - w16).max() <= (w16.max() - w16.min()) / 65535 / 2 + 1e-6
    assert np.array_equal(graph.constants["c"], half.astype(np.float16).astype(np.float32))
    assert graph.constants["d"].dtype == np.int32 and graph.constants["d"].tolist() == [[0, 1, 2], [3, 4, 5]]


def test_a_manifest_that_does_not_fit_its_shards_names_the_file(tmp_path):
    path = write_model(tmp_path, [], [("a", np.ones(4, np.float32), None)])
    (tmp_path / "w.bin").write_bytes(b"\0" * 20)  # 4 bytes too many
    with pytest.raises(TfjsError, match=r"model.json: the manifest accounts for 16 bytes of weights; the shards hold 20"):
        read_graph(path)
    (tmp_path / "w.bin").unlink()
    with pytest.raises(TfjsError, match=r"weights shard w.bin is missing"):
        read_graph(path)


def test_an_op_the_loader_does_not_run_refuses_the_load_naming_op_node_and_file(tmp_path):
    nodes = [{"name": "odd", "op": "Cumsum", "input": ["x", "axis"]}]
    path = write_model(tmp_path, nodes, [("axis", np.array(1, np.int32), None)], outputs=["odd"])
    with pytest.raises(TfjsError, match=r"model.json: node odd: op Cumsum is not supported"):
        GraphModule(read_graph(path))


def test_same_padding_puts_the_odd_pixel_after_as_tensorflow_does(tmp_path):
    # a 2x2 filter of ones, stride 2, SAME on 5x5: out 3x3, padding 0 before and 1 after
    filt = np.ones((2, 2, 1, 1), np.float32)
    nodes = [{"name": "y", "op": "Conv2D", "input": ["x", "f"],
              "attr": {"strides": ints(1, 2, 2, 1), "padding": s("SAME"), "data_format": s("NHWC")}}]
    path = write_model(tmp_path, nodes, [("f", filt, None)], outputs=["y"], input_shape=(1, 5, 5, 1))
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    y = run(path, x)["y"][0, :, :, 0]
    padded = np.pad(x[0, 0], ((0, 1), (0, 1)))
    want = padded.reshape(3, 2, 3, 2).sum(axis=(1, 3))
    assert np.array_equal(y, want)


@pytest.mark.parametrize("half, want", [
    (False, [0.0, 0.5, 1.0, 1.0]),  # legacy: source = i * 2 / 4
    (True, [0.0, 0.25, 0.75, 1.0]),  # half-pixel: source = (i + 0.5) / 2 - 0.5, clamped
])
def test_bilinear_resize_reads_source_pixels_as_tensorflow_does(tmp_path, half, want):
    nodes = [{"name": "y", "op": "ResizeBilinear", "input": ["x", "size"],
              "attr": {"align_corners": {"b": False}, "half_pixel_centers": {"b": half}}}]
    path = write_model(tmp_path, nodes, [("size", np.array([1, 4], np.int32), None)], outputs=["y"],
                       input_shape=(1, 1, 2, 1))
    y = run(path, np.array([0.0, 1.0], np.float32).reshape(1, 1, 1, 2))["y"]
    assert np.allclose(y.reshape(-1), want)


def test_a_reshape_fixed_to_batch_one_serves_any_batch_and_traces_without_warning(tmp_path):
    filt = np.random.default_rng(1).normal(size=(3, 3, 1, 2)).astype(np.float32)
    nodes = [{"name": "c", "op": "_FusedConv2D", "input": ["x", "f", "b"],
              "attr": {"strides": ints(1, 1, 1, 1), "padding": s("SAME"), "data_format": s("NHWC"),
                       "fused_ops": {"list": {"s": [s("BiasAdd")["s"], s("Relu6")["s"]]}}, "num_args": {"i": "1"}}},
             {"name": "y", "op": "Reshape", "input": ["c", "shape"]}]
    weights = [("f", filt, "float16"), ("b", np.array([0.5, -0.5], np.float32), None),
               ("shape", np.array([1, -1, 2], np.int32), None)]
    path = write_model(tmp_path, nodes, weights, outputs=["y"])
    module = GraphModule(read_graph(path)).eval()
    x = torch.rand(3, 1, 4, 4) * 4
    with torch.no_grad():
        together = module(x)["y"]
        alone = torch.cat([module(x[i:i + 1])["y"] for i in range(3)])
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            traced = torch.jit.trace(module, (x[:2],), strict=False, check_trace=False)
        assert not [w for w in said if issubclass(w.category, torch.jit.TracerWarning)]
        assert traced(x)["y"].shape == (3, 16, 2)
        assert torch.allclose(traced(x)["y"], together, atol=1e-5)
    assert together.shape == (3, 16, 2) and torch.allclose(together, alone, atol=1e-5)
    assert float(together.max()) <= 6.0 and float(together.min()) >= 0.0  # the fused Relu6


def test_a_reshape_that_mixes_items_is_refused_for_more_than_one(tmp_path):
    nodes = [{"name": "y", "op": "Reshape", "input": ["x", "shape"]}]
    path = write_model(tmp_path, nodes, [("shape", np.array([8, 2], np.int32), None)], outputs=["y"])
    module = GraphModule(read_graph(path)).eval()
    assert module(torch.zeros(1, 1, 4, 4))["y"].shape == (8, 2)
    with pytest.raises(TfjsError, match=r"node y \(Reshape\) failed: shape '\[8, 2\]' is invalid for input of size 32"):
        module(torch.zeros(2, 1, 4, 4))
