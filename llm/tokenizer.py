"""Tokenizer from a Hugging Face `tokenizer.json`, or from a GGUF file's metadata (the
`tokenizers` library either way)."""

from __future__ import annotations

import json
from pathlib import Path


class Tokenizer:
    def __init__(self, folder: Path, eos_ids: tuple[int, ...] = (), gguf_metadata: dict | None = None) -> None:
        """From a Hugging Face folder, or a GGUF file (or a version folder holding one);
        `gguf_metadata`: the file's metadata when the caller has read it already."""
        from llm.gguf import version_file

        self.eos_ids = eos_ids
        path = version_file(Path(folder))
        if path.suffix == ".gguf":
            self._read_gguf(path, gguf_metadata)
        else:
            self._read_folder(path)

    def _read_folder(self, folder: Path) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        path = folder / "tokenizer.json"
        if not path.exists():
            raise FileNotFoundError(f"{path}: no tokenizer")
        self.hf = HFTokenizer.from_file(str(path))
        config = folder / "tokenizer_config.json"
        extra = json.loads(config.read_text()) if config.exists() else {}
        self.chat_template = extra.get("chat_template")
        if isinstance(self.chat_template, list):  # several named templates: the default one
            named = {t.get("name"): t.get("template") for t in self.chat_template if isinstance(t, dict)}
            self.chat_template = named.get("default")
        self.special_tokens = {k: v if isinstance(v, str) else v.get("content", "") for k, v in extra.items()
                               if k in ("bos_token", "eos_token", "pad_token", "unk_token") and v}

    def _read_gguf(self, path: Path, metadata: dict | None) -> None:
        from llm.gguf import read_metadata, special_tokens, tokenizer

        if metadata is None:
            metadata, _ = read_metadata(path)
        self.hf = tokenizer(metadata, path)
        self.chat_template = metadata.get("tokenizer.chat_template")
        self.special_tokens = special_tokens(metadata)

    def encode(self, text: str) -> list[int]:
        """Ids as transformers' fast tokenizer gives them: special tokens (a BOS) come
        from tokenizer.json's own post-processor, never from `add_bos_token`."""
        return self.hf.encode(text, add_special_tokens=True).ids

    def encode_rendered(self, text: str) -> list[int]:
        """Ids of a prompt that carries its own special tokens (a rendered chat template)."""
        return self.hf.encode(text, add_special_tokens=False).ids

    def chat(self, messages: list[dict]) -> list[int] | str:
        """A conversation's prompt: ids through the checkpoint's chat template, or the
        plain text when it has none (llm/chat.py)."""
        from llm.chat import plain, render

        if not self.chat_template:
            return plain(messages)
        return self.encode_rendered(render(self.chat_template, messages, self.special_tokens))

    def decode(self, ids: list[int]) -> str:
        return self.hf.decode(ids, skip_special_tokens=True)
