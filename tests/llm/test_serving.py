"""Which LLM version is served: the newest complete version that the model's version
policy (model_config.yaml, read by the model repository) selects."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm.serving import llm_version
from models.repository import ModelRepository


def make_llm_repo(root: Path, versions: list[int], policy: str | None = None, incomplete: tuple[int, ...] = ()) -> Path:
    for v in versions:
        folder = root / "chat-lm" / str(v)
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        if v not in incomplete:
            (folder / "tokenizer.json").write_text("{}")
    if policy is not None:
        (root / "chat-lm" / "model_config.yaml").write_text(f"version_policy: {policy}\n")
    return root


@pytest.mark.parametrize("versions, policy, incomplete, served", [
    ([1, 2, 3], None, (), 3),  # no model_config.yaml: the latest
    ([1, 2, 3], "{specific: [1, 2]}", (), 2),
    ([1, 2, 3], "{specific: [1]}", (), 1),
    ([1, 2, 3], "{latest: 2}", (), 3),
    ([1, 2, 3], "all", (3,), 2),  # a version without its tokenizer is not a version
])
def test_the_version_policy_picks_the_served_version(tmp_path, versions, policy, incomplete, served):
    repo = ModelRepository(make_llm_repo(tmp_path, versions, policy, incomplete))
    assert llm_version(repo, "chat-lm") == tmp_path / "chat-lm" / str(served)


def test_no_version_or_none_selected_names_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no LLM versions"):
        llm_version(ModelRepository(tmp_path), "chat-lm")
    repo = ModelRepository(make_llm_repo(tmp_path, [1, 2], "{specific: [5]}"))
    with pytest.raises(FileNotFoundError, match=r"model_config.yaml: version_policy selects none .*\[1, 2\]"):
        llm_version(repo, "chat-lm")
