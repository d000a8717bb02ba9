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
        self.bos_id: int | None = None
        config = folder / "tokenizer_config.json"
        extra = json.loads(config.read_text()) if config.exists() else {}
        bos = extra.get("bos_token")
        if isinstance(bos, str):
            self.bos_id = self.hf.token_to_id(bos)
        self.add_bos = bool(extra.get("add_bos_token", False)) and self.bos_id is not None
        self.eos_ids = eos_ids
        self.chat_template = extra.get("chat_template")

    def encode(self, text: str) -> list[int]:
        ids = self.hf.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids] if self.add_bos else ids

    def decode(self, ids: list[int]) -> str:
        return self.hf.decode(ids, skip_special_tokens=True)
