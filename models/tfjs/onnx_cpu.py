"""A TensorFlow.js graph on a CPU, run by onnxruntime (`cpu_runtime: onnxruntime`).

Which runs a graph faster on a CPU depends on the graph: NanoDet's convolutions run
faster in onnxruntime than as torch operators, CenterNet's slower (`vigil bench
runtime` measures both through the engine). For a model that asks, the graph's torch
module is exported to ONNX once (kept in the version folder's `onnx/`, named by the
module's hash), checked against the torch module at two batch sizes, and served by an
onnxruntime session, which releases the GIL for the whole call as a trace does. Where
onnxruntime is missing, or the export or the check fails, the torch module runs; on a
GPU it always does.
"""

from __future__ import annotations

import io
import logging
import warnings
from pathlib import Path
from typing import Callable

log = logging.getLogger("vigil.engine")

CHECK_BATCHES = (1, 3)  # exported at 2: a batch fixed by the export fails one of these
ATOL = RTOL = 1e-3


def onnx_runner(module, folder: Path, digest: str, threads: int) -> Callable | None:
    """`run(batch) -> {output: tensor}` on onnxruntime for `module` (a GraphModule, which
    takes a float NCHW batch), or None where the torch module should run instead."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    import torch

    keys = list(module.outputs)
    path = folder / "onnx" / f"{digest[:16]}.onnx"
    try:
        model = path.read_bytes() if path.is_file() else _export(module, path)
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name

        def run(batch) -> dict:
            values = session.run(None, {name: batch.detach().contiguous().numpy()})
            return {k: torch.from_numpy(v) for k, v in zip(keys, values)}

        _check(module, run)
    except Exception as exc:  # any failure leaves the torch module, which is always right
        path.unlink(missing_ok=True)  # a stale or damaged export is made again next time
        log.info("%s: runs as torch operators, not on onnxruntime (%s: %s)", folder, type(exc).__name__,
                 str(exc)[:300])
        return None
    return run


def _export(module, path: Path) -> bytes:
    import torch

    buffer = io.BytesIO()
    example = torch.zeros(2, module.channels, *module.input_hw)
    with torch.no_grad(), warnings.catch_warnings():
        # the exporter says which Slice ops it left unfolded: the graph is right either way
        # (_check holds it to the torch module), and a user's run is no place for it
        warnings.filterwarnings("ignore", message="Constant folding", category=UserWarning)
        torch.onnx.export(module, (example,), buffer, dynamo=False, opset_version=17, input_names=["x"],
                          dynamic_axes={"x": {0: "batch"}})
    model = buffer.getvalue()
    try:  # a read-only repository exports again next time
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{id(buffer)}.tmp")
        tmp.write_bytes(model)
        tmp.replace(path)
    except OSError:
        pass
    return model


def _check(module, run: Callable) -> None:
    import torch

    generator = torch.Generator().manual_seed(0)
    for batch in CHECK_BATCHES:
        x = torch.randn(batch, module.channels, *module.input_hw, generator=generator)
        with torch.no_grad():
            want = module(x)
        got = run(x)
        for key, value in want.items():
            if got[key].shape != value.shape or not torch.allclose(got[key], value, RTOL, ATOL):
                raise ValueError(f"output {key} at batch {batch} differs from the torch module's")
