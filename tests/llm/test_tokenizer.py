"""Vigil's tokenizer gives the ids transformers' AutoTokenizer gives for the same folder."""

from __future__ import annotations

import json
import random
import shutil

import pytest

from llm.tokenizer import Tokenizer
from support.processes import ROOT

SCENE_LM = ROOT / "configs" / "models" / "scene-lm" / "1"


def prompts(n: int = 30) -> list[str]:
    rng = random.Random(0)
    words = ["facts:", "view:", "person", "car", "bike", "12", "0:07", "caption:", "question:", "answer:", "é", "\n"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(0, 20))) for _ in range(n)]


def test_scene_lm_ids_equal_auto_tokenizer():
    from transformers import AutoTokenizer

    hf, ours = AutoTokenizer.from_pretrained(SCENE_LM), Tokenizer(SCENE_LM)
    for text in prompts():
        assert ours.encode(text) == hf(text).input_ids, text
    assert ours.encode("hello")[0] == hf.bos_token_id  # its post-processor adds <s>


@pytest.mark.parametrize("add_bos_token", [True, False])
def test_without_a_post_processor_no_bos_is_added_whatever_the_config_says(tmp_path, add_bos_token):
    from transformers import AutoTokenizer

    doc = json.loads((SCENE_LM / "tokenizer.json").read_text())
    doc["post_processor"] = None
    (tmp_path / "tokenizer.json").write_text(json.dumps(doc))
    config = json.loads((SCENE_LM / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "add_bos_token": add_bos_token}))
    shutil.copy(SCENE_LM / "config.json", tmp_path / "config.json")
    hf, ours = AutoTokenizer.from_pretrained(tmp_path), Tokenizer(tmp_path)
    for text in prompts(10):
        assert ours.encode(text) == hf(text).input_ids, text
