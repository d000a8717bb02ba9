"""Loading an LLM of the model repository into an `LLMEngine`.

An LLM model is a folder `configs/models/<name>/<version>/` in Hugging Face format
(`config.json`, `*.safetensors`, `tokenizer.json`), or holding one GGUF file. Which version is served follows the
model's version policy in `<name>/model_config.yaml` (models/repository.py), as for
vision models: the newest of the versions it selects (one engine serves one version).
The OpenAI protocol over it lives in the server (vigil/openai_protocol.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llm.checkpoint import load_checkpoint
from llm.engine import EngineConfig, LLMEngine
from models.repository import ModelRepository

DEFAULT_LLM = "scene-lm"  # the tiny model the tests train: what a benchmark loads unless told
# what makes a version folder an LLM's (it has no model.yaml: the checkpoint describes itself)
LLM_FILES = ("config.json", "tokenizer.json")


def is_llm_version(folder: Path) -> bool:
    return all((folder / f).exists() for f in LLM_FILES) or len(list(folder.glob("*.gguf"))) == 1


def llm_version(repository: ModelRepository, name: str) -> Path:
    """The folder of the version of LLM `name` to serve: the newest of the complete
    versions on disk that the model's version policy selects."""
    folder = repository.root / name
    on_disk = sorted(int(v.name) for v in folder.iterdir() if v.is_dir() and v.name.isdigit()
                     and is_llm_version(v)) if folder.is_dir() else []
    if not on_disk:
        fetch = " (its weights are installed by `vigil models fetch`)" if (folder / "fetch.yaml").exists() else ""
        raise FileNotFoundError(f"{folder}: no LLM versions (a folder N/ with config.json, *.safetensors and "
                                f"tokenizer.json, or one GGUF file){fetch}")
    selected = repository.config(name).version_policy.select(on_disk)
    if not selected:
        raise FileNotFoundError(f"{folder / 'model_config.yaml'}: version_policy selects none of the versions on "
                                f"disk ({on_disk})")
    return repository.folder(name, selected[-1])


def model_id(base: str, adapter: str | None) -> str:
    """The id a model is served under: the base's name, or `<base>:<adapter>`."""
    return base if adapter is None else f"{base}:{adapter}"


def split_id(served: str) -> tuple[str, str | None]:
    """(the base LLM, the adapter or None) of a served id."""
    base, _, adapter = served.partition(":")
    return base, adapter or None


@dataclass(frozen=True)
class ServedModel:
    """One served id: an engine, and the adapter its requests run with (None: the base)."""

    engine: LLMEngine
    adapter: str | None = None

    @property
    def id(self) -> str:
        return model_id(self.engine.name, self.adapter)

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def tuned(self) -> bool:
        """Through an adapter, trained on Vigil's own prompts (llm/prompts.py asks it without worked examples)."""
        return self.adapter is not None

    def add_request(self, prompt, params=None, **options):
        return self.engine.add_request(prompt, params, lora=self.adapter, **options)


def load_llm(root: Path, name: str, device: str = "cpu", config: EngineConfig | None = None, arbiter=None,
             metrics=None, adapters: bool = True, merged: str | None = None) -> LLMEngine:
    """The engine of LLM `name` of the repository at `root` (not started), serving each
    LoRA adapter its model_config.yaml names, chosen per request (`adapters=False`: the
    base model alone). `merged`: that adapter merged into the weights instead (the
    baseline a benchmark compares per-request adapters with)."""
    repository = ModelRepository(root)
    path = llm_version(repository, name)
    folders = repository.config(name).adapters
    if merged is not None and merged not in folders:
        raise FileNotFoundError(f"{repository.root / name / 'model_config.yaml'}: no adapter {merged!r}; "
                                f"adapters: {sorted(folders)}")
    model, tok = load_checkpoint(path, device, repository.root / name / folders[merged] if merged else None)
    engine = LLMEngine(model, tok, config, name=name, arbiter=arbiter, metrics=metrics)
    for adapter, folder in (folders.items() if adapters and merged is None else ()):
        engine.load_lora(adapter, repository.root / name / folder)
    return engine
