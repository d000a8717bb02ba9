"""`cpu_runtime: onnxruntime`: a TensorFlow.js graph's torch module, exported to ONNX and
run by onnxruntime, computes what the module computes at any batch; the export is kept
and reused; a graph whose export fails runs as torch operators; and only tfjs models
may ask for it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_tfjs import ints, s, write_model

from models.repository import ModelSpec
from models.tfjs import onnx_cpu
from models.tfjs.graph import read_graph
from models.tfjs.module import GraphModule


def conv_graph(tmp_path) -> GraphModule:
    filt = np.random.default_rng(2).normal(size=(3, 3, 1, 4)).astype(np.float32)
    nodes = [{"name": "y", "op": "_FusedConv2D", "input": ["x", "f", "b"],
              "attr": {"strides": ints(1, 2, 2, 1), "padding": s("SAME"), "data_format": s("NHWC"),
                       "fused_ops": {"list": {"s": [s("BiasAdd")["s"], s("Relu")["s"]]}}, "num_args": {"i": "1"}}}]
    path = write_model(tmp_path, nodes, [("f", filt, None), ("b", np.linspace(-1, 1, 4).astype(np.float32), None)],
                       outputs=["y"], input_shape=(1, 8, 8, 1))
    return GraphModule(read_graph(path)).eval()


def test_onnxruntime_computes_what_the_module_computes_and_keeps_its_export(tmp_path):
    pytest.importorskip("onnxruntime")
    module = conv_graph(tmp_path)
    run = onnx_cpu.onnx_runner(module, tmp_path, "ab" * 32, threads=1)
    assert run is not None
    kept = tmp_path / "onnx" / f"{'ab' * 8}.onnx"
    assert kept.is_file()
    x = torch.rand(5, 1, 8, 8)
    with torch.no_grad():
        want = module(x)["y"]
    assert run(x)["y"].shape == want.shape == (5, 4, 4, 4)
    assert torch.allclose(run(x)["y"], want, atol=1e-5)
    before = kept.stat().st_mtime_ns
    assert onnx_cpu.onnx_runner(module, tmp_path, "ab" * 32, threads=1) is not None
    assert kept.stat().st_mtime_ns == before  # read back, not exported again


def test_an_export_that_fails_or_disagrees_leaves_the_torch_module(tmp_path, monkeypatch, caplog):
    pytest.importorskip("onnxruntime")
    module = conv_graph(tmp_path)
    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx" / f"{'cd' * 8}.onnx").write_bytes(b"not an onnx file")
    with caplog.at_level("INFO", logger="vigil.engine"):
        assert onnx_cpu.onnx_runner(module, tmp_path, "cd" * 32, threads=1) is None
    assert "runs as torch operators" in caplog.text
    assert not (tmp_path / "onnx" / f"{'cd' * 8}.onnx").exists()  # made again next time
    monkeypatch.setattr(onnx_cpu, "ATOL", -1.0)  # nothing agrees
    assert onnx_cpu.onnx_runner(module, tmp_path, "ef" * 32, threads=1) is None


def test_only_a_tfjs_model_may_ask_for_onnxruntime():
    with pytest.raises(ValueError, match="cpu_runtime: onnxruntime is for tfjs models"):
        ModelSpec(name="m", version=1, adapter="onnx", weights="m.onnx", cpu_runtime="onnxruntime")
    assert ModelSpec(name="m", version=1, adapter="tfjs", weights="model.json",
                     cpu_runtime="onnxruntime").cpu_runtime == "onnxruntime"


def test_the_export_says_nothing_to_a_users_run(tmp_path):
    """torch's exporter warns of each strided Slice it leaves unfolded (coco's graph has
    three): noise in `make demo`'s output, the graph being right either way."""
    import warnings

    class Strided(torch.nn.Module):
        channels, input_hw = 1, (4, 4)

        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.arange(8.0))

        def forward(self, x):
            return {"y": x * self.w[::2].sum()}

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        onnx_cpu._export(Strided().eval(), tmp_path / "m.onnx")
    assert not [w for w in said if "Constant folding" in str(w.message)]
