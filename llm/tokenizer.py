"""Tokenizer from a Hugging Face `tokenizer.json` (the `tokenizers` library)."""

from __future__ import annotations

import json
from pathlib import Path


class Tokenizer:
    def __init__(self, folder: Path, eos_ids: tuple[int, ...] = ()) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        folder = Path(folder)
        path = folder / "tokenizer.json"
        if not path.exists():
            raise FileNotFoundError(f"{path}: no tokenizer")
        self.hf = HFTokenizer.from_file(str(path))
        config = folder / "tokenizer_config.json"
        extra = json.loads(config.read_text()) if config.exists() else {}
        self.eos_ids = eos_ids
        self.chat_template = extra.get("chat_template")

    def encode(self, text: str) -> list[int]:
        """Ids as transformers' fast tokenizer gives them: special tokens (a BOS) come
        from tokenizer.json's own post-processor, never from `add_bos_token`."""
        return self.hf.encode(text, add_special_tokens=True).ids

    def decode(self, ids: list[int]) -> str:
        return self.hf.decode(ids, skip_special_tokens=True)
