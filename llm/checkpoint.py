"""Loading a checkpoint into a `LlamaModel`: a Hugging Face folder (config.json and
*.safetensors) or a GGUF file (llm/gguf.py), which give the same config fields and the
same tensor names, so one path builds the model from either.

The way to make a model to run: weights loaded, moved to the device, then each layer's
projections fused (forward uses the fused weights).
"""

from __future__ import annotations

from pathlib import Path

import torch

from llm.model import CheckpointError, LlamaConfig, LlamaModel
from llm.tokenizer import Tokenizer


def load_model(path: Path, device: str = "cpu", lora: Path | None = None) -> LlamaModel:
    return read_model(path, device, lora)[0]


def load_checkpoint(path: Path, device: str = "cpu", lora: Path | None = None) -> tuple[LlamaModel, Tokenizer]:
    """The model (with the LoRA adapter at `lora` merged in) and its tokenizer; a GGUF
    file's metadata is read once for both."""
    model, path, metadata = read_model(path, device, lora)
    return model, Tokenizer(path, eos_ids=model.cfg.eos_ids, gguf_metadata=metadata)


def read_model(path: Path, device: str, lora: Path | None = None) -> tuple[LlamaModel, Path, dict | None]:
    """The model, the file or folder it came from, and a GGUF's metadata (None for a folder)."""
    from llm.gguf import GGUFError, open_checkpoint, state_dict, version_file
    from llm.lora import merge

    def adapted(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return merge(state, lora) if lora is not None else state

    try:
        path = version_file(path)
        if path.suffix != ".gguf":
            cfg = LlamaConfig.from_file(path / "config.json")
            return build(cfg, adapted(safetensors_state(path)), path, device), path, None
        checkpoint, reader = open_checkpoint(path)
        cfg = LlamaConfig.from_dict(checkpoint.config, path)
        return build(cfg, adapted(state_dict(checkpoint, reader)), path, device), path, checkpoint.metadata
    except GGUFError as exc:
        raise CheckpointError(str(exc)) from None


def safetensors_state(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{folder}: no *.safetensors weights")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    return state


def build(cfg: LlamaConfig, state: dict[str, torch.Tensor], origin: Path, device: str) -> LlamaModel:
    """The model of `cfg` with the weights of `state` (Hugging Face's names), on `device`."""
    model = LlamaModel(cfg)
    mapped = {}
    for name, tensor in state.items():
        key = name.removeprefix("model.")
        key = key.replace("self_attn.", "").replace("mlp.", "")
        mapped.update(unfused(key, tensor.float(), cfg))
    if cfg.tie_word_embeddings or "lm_head.weight" not in mapped:
        mapped["lm_head.weight"] = mapped.get("embed_tokens.weight")
    expected = set(model.state_dict())
    missing = sorted(expected - set(mapped))
    if missing:
        raise CheckpointError(f"{origin}: weights missing for {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    unknown = sorted(k for k in mapped if k not in expected and "rotary_emb" not in k)
    if unknown:
        raise CheckpointError(f"{origin}: unexpected weights {unknown[:5]}")
    try:
        model.load_state_dict({k: mapped[k] for k in expected})
    except RuntimeError as exc:
        raise CheckpointError(f"{origin}: weights do not match its config: {exc}") from None
    model = model.to(device).eval()
    for layer in model.layers:
        layer.fuse()
    return model


def unfused(key: str, tensor: torch.Tensor, cfg: LlamaConfig) -> dict[str, torch.Tensor]:
    """Phi-3 keeps q, k and v in one `qkv_proj` and the MLP's gate and up in one
    `gate_up_proj` (gate first); the layer holds them apart (and fuses its own way)."""
    prefix, _, rest = key.rpartition("qkv_proj.")
    if _:
        nq, nkv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
        q, k, v = tensor.split((nq, nkv, nkv), dim=0)
        return {f"{prefix}q_proj.{rest}": q, f"{prefix}k_proj.{rest}": k, f"{prefix}v_proj.{rest}": v}
    prefix, _, rest = key.rpartition("gate_up_proj.")
    if _:
        gate, up = tensor.chunk(2, dim=0)
        return {f"{prefix}gate_proj.{rest}": gate, f"{prefix}up_proj.{rest}": up}
    return {key: tensor}
