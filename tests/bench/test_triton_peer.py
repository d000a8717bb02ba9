"""The Triton peer of `vigil bench engine`: a real Triton server (the nvidia-pytriton
wheel in the venv `make triton-venv` makes) serves the repository model with its
dynamic batcher, answers exactly what Vigil's own loader computes, and the bench's
client measures it like any other target."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from bench.engine import write_models
from bench.triton_peer import TRITON_PYTHON, TritonServer, TritonTarget, check_outputs, infer_body, infer_output
from bench.workload import Stream, run_trial

SIZE = 48


def test_a_binary_request_carries_its_header_then_the_frame():
    frame = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    body, headers = infer_body(frame)
    n = int(headers["Inference-Header-Content-Length"])
    header = json.loads(body[:n])
    assert header["inputs"][0]["shape"] == [1, 2, 3, 3] and header["inputs"][0]["datatype"] == "UINT8"
    assert header["inputs"][0]["parameters"]["binary_data_size"] == frame.nbytes == len(body) - n
    assert body[n:] == frame.tobytes()
    out = np.array([[1.5, -2.0, 3.25]], np.float32)
    meta = json.dumps({"outputs": [{"name": "head", "shape": [1, 3], "datatype": "FP32"}]}).encode()
    response = httpx.Response(200, content=meta + out.tobytes(),
                              headers={"Inference-Header-Content-Length": str(len(meta))})
    assert np.array_equal(infer_output(response), out)


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    if not TRITON_PYTHON.exists():
        pytest.skip(f"no Triton venv at {TRITON_PYTHON.parent.parent}: `make triton-venv` makes it")
    root = tmp_path_factory.mktemp("triton-models")
    write_models(root, "resnet18", SIZE, heads=1)
    server = TritonServer(root / "m0" / "1", max_batch=8, delay_us=2000, preferred=(4, 8), threads=1,
                          log_dir=root)
    yield server, root / "m0" / "1"
    server.stop()


def test_triton_serves_what_the_model_computes(triton):
    server, folder = triton
    frames = np.random.default_rng(0).integers(0, 255, (2, SIZE, SIZE, 3), dtype=np.uint8)
    for frame in frames:
        check_outputs(server.url, folder, frame)  # raises naming both outputs when they differ


def test_the_bench_client_measures_triton_under_open_loop_arrivals(triton):
    server, _ = triton
    target = TritonTarget(server.url, np.zeros((SIZE, SIZE, 3), np.uint8))
    try:
        result = run_trial(target, [Stream("cam", (("app", "m0"),), 10.0, 5000.0)], 4.0)  # ~35 counted
    finally:
        target.close()
    assert result.arrived["app"] >= 20
    assert result.attainment() == 1.0, result.outcomes
