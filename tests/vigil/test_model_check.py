"""`vigil models check DIR` as a user runs it, before a model goes into a repository."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from support.processes import ROOT, run_command


def check(*args: str) -> subprocess.CompletedProcess:
    return run_command([sys.executable, "-m", "cli", "models", "check", *args], 300, cwd=ROOT)


@pytest.mark.slow
def test_a_model_folder_shows_what_it_decoded_and_its_latency_per_batch():
    out = check(str(ROOT / "configs" / "models" / "scenedet"), "--json")  # the model folder: its newest version
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["version"] == 2 and set(result["decoded"]) == {"person_head", "vehicle_head"}
    people = result["decoded"]["person_head"]
    assert people and {d["label"] for d in people} == {"person"}
    assert all(0 <= d["box"][0] < d["box"][2] <= 640 and 0 <= d["box"][1] < d["box"][3] <= 360 for d in people)
    spec = ROOT / "configs" / "models" / "scenedet" / "2" / "model.yaml"
    sizes = yaml.safe_load(spec.read_text())["batch_sizes"]
    assert [int(b) for b in result["latency_ms"]] == sizes  # every size the model.yaml asks profiled
    text = check(str(ROOT / "configs" / "models" / "scenedet" / "2"))
    assert text.returncode == 0 and "person_head:" in text.stdout and "latency per batch" in text.stdout


@pytest.mark.slow
def test_a_broken_model_yaml_is_one_line_naming_the_file_and_field(tmp_path):
    folder = tmp_path / "mine" / "1"
    folder.mkdir(parents=True)
    (folder / "model.yaml").write_text(yaml.safe_dump({"name": "mine", "adapter": "onnx", "weights": "m.onnx",
                                                       "output": "yolo", "labels": []}))
    out = check(str(folder))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "mine/1/model.yaml" in out.stderr and "labels" in out.stderr
    out = check(str(tmp_path / "nothing-here"))
    assert out.returncode == 1 and "not a folder" in out.stderr
