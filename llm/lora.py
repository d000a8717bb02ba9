"""A LoRA adapter in peft's format: read and checked against its base model (served
unmerged, per request, by llm/adapters.py), or merged into a checkpoint's weights.

peft saves `adapter_config.json` (rank `r`, `lora_alpha`, `target_modules`, ...) and
`adapter_model.safetensors` with, per adapted projection,
`base_model.model.<module>.lora_A.weight` (r x in) and `...lora_B.weight` (out x r).
The adapter adds `scale * B @ A x` to the module's output, with scale `lora_alpha / r`
(or `lora_alpha / sqrt(r)` under rsLoRA); merging adds `scale * B @ A` to
`<module>.weight`. Options that change the forward beyond that (DoRA, biases, extra
trained modules, other ranks per layer) are refused by name rather than served wrong.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from llm.model import CheckpointError, LlamaConfig

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
PREFIX = "base_model.model."


def read_config(folder: Path) -> dict:
    path = folder / CONFIG
    if not path.exists():
        raise CheckpointError(f"{folder}: no {CONFIG} (a LoRA adapter in peft's format)")
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: not JSON ({exc})") from None
    if cfg.get("peft_type", "LORA") != "LORA":
        raise CheckpointError(f"{path}: peft_type {cfg['peft_type']!r}; only LORA adapters can be merged")
    for key, plain in (("use_dora", False), ("bias", "none"), ("lora_bias", False), ("modules_to_save", None),
                       ("fan_in_fan_out", False), ("rank_pattern", {}), ("alpha_pattern", {}),
                       ("layer_replication", None), ("layers_to_transform", None)):
        if cfg.get(key) not in (plain, None, [], {}):
            raise CheckpointError(f"{path}: {key}={cfg[key]!r} is not supported (only plain LoRA: {key}={plain!r})")
    r, alpha = cfg.get("r"), cfg.get("lora_alpha")
    if not isinstance(r, int) or r < 1 or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise CheckpointError(f"{path}: r must be a positive integer and lora_alpha a number; were {r!r}, {alpha!r}")
    return cfg


def read_pairs(folder: Path) -> tuple[dict, float, dict[str, dict[str, torch.Tensor]]]:
    """(config, scale, {module: {"A": r x in, "B": out x r}}) of the adapter at `folder`,
    modules by Hugging Face's names (`model.layers.3.self_attn.q_proj`)."""
    from safetensors.torch import load_file

    cfg = read_config(folder)
    scale = cfg["lora_alpha"] / (math.sqrt(cfg["r"]) if cfg.get("use_rslora") else cfg["r"])
    path = folder / WEIGHTS
    if not path.exists():
        raise CheckpointError(f"{folder}: no {WEIGHTS}")
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in load_file(str(path)).items():
        module, _, part = name.removeprefix(PREFIX).rpartition(".lora_")
        if part not in ("A.weight", "B.weight"):
            raise CheckpointError(f"{path}: unexpected tensor {name!r} (a LoRA holds lora_A and lora_B weights)")
        pairs.setdefault(module, {})[part[0]] = tensor.float()
    if not pairs:
        raise CheckpointError(f"{path}: no LoRA weights")
    for module, ab in pairs.items():
        if set(ab) != {"A", "B"}:
            raise CheckpointError(f"{path}: {module} has lora_{'A' if 'B' in ab else 'B'} but not the other")
    return cfg, scale, pairs


MODULE = re.compile(r"^model\.layers\.(\d+)\.(?:self_attn|mlp)\."
                    r"(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)$")


@dataclass(frozen=True)
class Adapter:
    """An adapter read for serving unmerged: per (layer, projection), A [r, in] and B
    [out, r] with the scale folded into B."""

    name: str
    folder: Path
    rank: int
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]

    @property
    def modules(self) -> set[str]:
        return {m for _, m in self.weights}


def read_adapter(name: str, folder: Path, cfg: LlamaConfig, max_rank: int) -> Adapter:
    """The adapter at `folder`, checked against the base model `cfg`: CheckpointError
    names what does not fit (its rank, a module the base has not, a shape)."""
    lora_cfg, scale, pairs = read_pairs(folder)
    rank = lora_cfg["r"]
    if rank > max_rank:
        raise CheckpointError(f"{folder}: rank {rank} is over the most served, {max_rank} (max_lora_rank)")
    h, q, kv = cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    shapes = {"q_proj": (q, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, q),
              "gate_proj": (cfg.intermediate_size, h), "up_proj": (cfg.intermediate_size, h),
              "down_proj": (h, cfg.intermediate_size)}
    weights = {}
    for module, ab in sorted(pairs.items()):
        found = MODULE.match(module)
        if not found or int(found.group(1)) >= cfg.num_hidden_layers:
            raise CheckpointError(f"{folder}: adapts {module}, which the base model does not have (it has "
                                  f"{cfg.num_hidden_layers} layers of q/k/v/o/gate/up/down projections)")
        layer, proj = int(found.group(1)), found.group(2)
        out, inp = shapes[proj]
        a, b = ab["A"], ab["B"]
        if a.shape != (rank, inp) or b.shape != (out, rank):
            raise CheckpointError(f"{folder}: {module}'s A is {tuple(a.shape)} and B {tuple(b.shape)}; rank {rank} "
                                  f"on this base needs {(rank, inp)} and {(out, rank)} (an adapter trained on "
                                  "another base model?)")
        weights[(layer, proj)] = (a.contiguous(), (b * scale).contiguous())
    modules = {m for _, m in weights}
    for proj in modules:
        missing = [i for i in range(cfg.num_hidden_layers) if (i, proj) not in weights]
        if missing:
            raise CheckpointError(f"{folder}: adapts {proj} in some layers but not in {missing[:5]} (an adapter "
                                  "adapts a projection in every layer)")
    return Adapter(name, folder, rank, weights)


def merge(state: dict[str, torch.Tensor], folder: Path) -> dict[str, torch.Tensor]:
    """`state` (Hugging Face's names) with the adapter at `folder` merged in."""
    _, scale, pairs = read_pairs(folder)
    merged = dict(state)
    for module, ab in sorted(pairs.items()):
        key = f"{module}.weight"
        if key not in merged:
            raise CheckpointError(f"{folder / WEIGHTS}: adapts {module}, which the base model does not have")
        w = merged[key].float()
        delta = ab["B"] @ ab["A"]
        if delta.shape != w.shape:
            raise CheckpointError(f"{folder / WEIGHTS}: {module}'s update is {tuple(delta.shape)}, its weight "
                                  f"{tuple(w.shape)} (an adapter trained on another base model?)")
        merged[key] = w + scale * delta
    return merged
