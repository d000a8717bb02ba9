"""`vigil eval llm`: answers and captions of an LLM measured from the command line, with
what it cannot run named."""

from __future__ import annotations

import json
import sys

import pytest
from support.processes import run_command


@pytest.mark.slow
def test_eval_llm_measures_scene_lms_answers_and_captions(tmp_path):
    out = tmp_path / "eval.json"
    done = run_command([sys.executable, "-m", "cli", "eval", "llm", "--llm", "scene-lm", "--device", "cpu",
                        "--json", str(out)], 540)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["kind"] == "eval-llm" and result["run"]["command"]
    assert list(result["results"]) == ["scene-lm"]  # no adapter: measured once
    captions, answers = result["results"]["scene-lm"]["captions"], result["results"]["scene-lm"]["answers"]
    assert captions["windows"] > 80 and captions["agreeing"] >= 0.9 * captions["windows"], captions
    # scene-lm was never trained on dwell questions: those (two a clip) come from the template
    assert answers["questions"] >= 50 and answers["written_by_model"] >= 0.8 * answers["questions"], answers
    assert answers["right"] >= 0.9 * answers["questions"], answers
    assert "captions agree with their facts" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--llm", "no-such-llm"], "LLM no-such-llm:"),
    (["--clips", "2"], "`vigil eval llm` takes --llm, --models, --device and --json"),
])
def test_eval_llm_names_what_it_cannot_run(args, message):
    done = run_command([sys.executable, "-m", "cli", "eval", "llm", *args], 120)
    assert done.returncode == 1 and message in done.stderr, done.stderr[-2000:]
