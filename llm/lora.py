"""A LoRA adapter in peft's format, merged into a checkpoint's weights at load.

peft saves `adapter_config.json` (rank `r`, `lora_alpha`, `target_modules`, ...) and
`adapter_model.safetensors` with, per adapted projection,
`base_model.model.<module>.lora_A.weight` (r x in) and `...lora_B.weight` (out x r).
Merging adds `scale * B @ A` to `<module>.weight`, with scale `lora_alpha / r` (or
`lora_alpha / sqrt(r)` under rsLoRA), so serving costs nothing more than the base model.
Options that change the forward beyond that (DoRA, biases, extra trained modules) are
refused by name rather than served wrong.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from llm.model import CheckpointError

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
                       ("layer_replication", None)):
        if cfg.get(key) not in (plain, None, [], {}):
            raise CheckpointError(f"{path}: {key}={cfg[key]!r} is not supported (only plain LoRA: {key}={plain!r})")
    r, alpha = cfg.get("r"), cfg.get("lora_alpha")
    if not isinstance(r, int) or r < 1 or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise CheckpointError(f"{path}: r must be a positive integer and lora_alpha a number; were {r!r}, {alpha!r}")
    return cfg


def merge(state: dict[str, torch.Tensor], folder: Path) -> dict[str, torch.Tensor]:
    """`state` (Hugging Face's names) with the adapter at `folder` merged in."""
    from safetensors.torch import load_file

    cfg = read_config(folder)
    scale = cfg["lora_alpha"] / (math.sqrt(cfg["r"]) if cfg.get("use_rslora") else cfg["r"])
    path = folder / WEIGHTS
    if not path.exists():
        raise CheckpointError(f"{folder}: no {WEIGHTS}")
    lora = load_file(str(path))
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in lora.items():
        module, _, part = name.removeprefix(PREFIX).rpartition(".lora_")
        if part not in ("A.weight", "B.weight"):
            raise CheckpointError(f"{path}: unexpected tensor {name!r} (a LoRA holds lora_A and lora_B weights)")
        pairs.setdefault(module, {})[part[0]] = tensor.float()
    merged = dict(state)
    for module, ab in sorted(pairs.items()):
        key = f"{module}.weight"
        if set(ab) != {"A", "B"}:
            raise CheckpointError(f"{path}: {module} has lora_{'A' if 'B' in ab else 'B'} but not the other")
        if key not in merged:
            raise CheckpointError(f"{path}: adapts {module}, which the base model does not have")
        w = merged[key].float()
        delta = ab["B"] @ ab["A"]
        if delta.shape != w.shape:
            raise CheckpointError(f"{path}: {module}'s update is {tuple(delta.shape)}, its weight {tuple(w.shape)} "
                                  "(an adapter trained on another base model?)")
        merged[key] = w + scale * delta
    if not pairs:
        raise CheckpointError(f"{path}: no LoRA weights")
    return merged
