"""`vigil bench runtime`'s plain side is the same network: coco's torch module, exported
to ONNX and run by onnxruntime a frame at a time, finds what the model called directly
finds on real frames (the engine side is the engine, tested on its own)."""

from __future__ import annotations

import pytest

from bench.runtime import RuntimeBenchOptions, bench_frames, export_onnx, format_runtime_report, plain_loop
from models.registry import load_model
from models.repository import read_spec
from support.footage import need_coco, need_vtest

pytestmark = pytest.mark.slow


def test_the_onnx_export_run_plainly_finds_what_the_model_finds(tmp_path):
    need_vtest()
    coco = need_coco()
    model = load_model(read_spec(coco / "2" / "model.yaml", "coco"), coco / "2", 2, "cpu")
    source, frames = bench_frames(4)
    assert source == "vtest.avi"
    export_onnx(model, frames[0], tmp_path / "model.onnx")
    run = plain_loop(model, tmp_path / "model.onnx", threads=1, device="cpu")
    direct = sum(len(out["model"]) for out in model.infer(frames))
    assert direct >= 4 * 3  # people in every frame
    assert run(frames) == direct


def test_options_are_bounded_and_the_report_names_each_side():
    with pytest.raises(ValueError, match="frames must be in 4..1000"):
        RuntimeBenchOptions(frames=2)
    with pytest.raises(ValueError, match="repeats must be in 1..20"):
        RuntimeBenchOptions(repeats=0)
    report = format_runtime_report({"model": "coco", "source": "vtest.avi", "frames": 24, "threads": 2, "repeats": 3,
                                    "versions": {"2": {"fps": {"plain": 40.0, "engine_alone": 36.0,
                                                               "engine_burst": 38.0},
                                                       "engine_alone_vs_plain": 0.9,
                                                       "engine_burst_vs_plain": 0.95}}})
    assert "| 2 | 40.0 | 36.0 | 38.0 | 0.9 | 0.95 |" in report
