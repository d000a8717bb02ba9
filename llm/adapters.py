"""LoRA adapters served unmerged, chosen per request, mixed in one batch.

The engine holds up to `max_loras` adapters (llm/lora.py reads and checks each against
the base). The model's projections are fused in four groups a layer (q/k/v, o,
gate/up, down), so the adapters are stacked the same way: for a group, the A matrices
of every adapter and projection one under the other ([C, in], C columns of rank) and
the B matrices likewise ([C, out], each projection's B in its own output columns,
scaled). A step's tokens each belong to one request and so to one adapter or none;
`step` builds, per group, a [T, C] mask of the columns each token's adapter owns, and
the layer adds `((h @ A.T) * mask) @ B` to the projection's output in place: every adapter's low-rank update in the same
two matmuls, whatever the mix (the batched form of S-LoRA's and Punica's kernels, which
a CPU runs best as dense matmuls over a few dozen columns). A step without adapted
requests builds nothing and costs nothing.

Loading and unloading build new stacks and swap them in, so a step already running
keeps the stacks it began with.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import torch

from llm.lora import Adapter, read_adapter
from llm.model import LlamaConfig

GROUPS = {"qkv": ("q_proj", "k_proj", "v_proj"), "o": ("o_proj",), "gate_up": ("gate_proj", "up_proj"),
          "down": ("down_proj",)}


class AdapterError(ValueError):
    """An adapter that cannot be loaded, unloaded or used; the message says why."""


@dataclass(frozen=True)
class Stack:
    """One group's stacked adapters: per layer A, transposed, [in, C] and B [C, out];
    `owner` [C]: the slot of the adapter each column belongs to."""

    a: list[torch.Tensor]
    b: list[torch.Tensor]
    owner: torch.Tensor


@dataclass(frozen=True)
class AdapterStep:
    """What a step's layers add (llm/model.py's LoraStep): per group, the stack and the
    [T, C] mask of its tokens."""

    stacks: dict[str, Stack]
    masks: dict[str, torch.Tensor]

    def add(self, group: str, layer: int, x: torch.Tensor, y: torch.Tensor) -> None:
        stack = self.stacks.get(group)
        if stack is None:
            return
        low = x @ stack.a[layer]  # [T, C]
        low.mul_(self.masks[group])
        y.addmm_(low, stack.b[layer])  # in place: no [T, out] update allocated, then added


class AdapterSet:
    def __init__(self, cfg: LlamaConfig, device: torch.device, max_loras: int = 8, max_rank: int = 64) -> None:
        self.cfg = cfg
        self.device = device
        self.max_loras = max_loras
        self.max_rank = max_rank
        self.loaded: dict[str, Adapter] = {}
        self.salts: dict[str, bytes] = {}
        self._loads = itertools.count()
        self._slots: dict[str, int] = {}
        self._stacks: dict[str, Stack] = {}

    def names(self) -> list[str]:
        return list(self.loaded)

    def read(self, name: str, folder: Path) -> Adapter:
        """The adapter at `folder`, checked (no lock needed: it touches nothing served)."""
        self._check_room(name)
        return read_adapter(name, folder, self.cfg, self.max_rank)

    def add(self, adapter: Adapter) -> None:
        self._check_room(adapter.name)  # again: another load may have come since it was read
        self.loaded[adapter.name] = adapter
        # the prefix cache's blocks through this adapter, as loaded now: a later load of
        # another adapter under the same name must not find them
        self.salts[adapter.name] = f"lora:{adapter.name}:{next(self._loads)}".encode()
        self._rebuild()

    def _check_room(self, name: str) -> None:
        if name in self.loaded:
            raise AdapterError(f"adapter {name!r} is loaded already; unload it first")
        if len(self.loaded) >= self.max_loras:
            raise AdapterError(f"{len(self.loaded)} adapters are loaded, the most held (max_loras); unload one "
                               f"first: {', '.join(self.loaded)}")

    def remove(self, name: str) -> None:
        if name not in self.loaded:
            raise AdapterError(f"no adapter {name!r}; loaded: {sorted(self.loaded)}")
        del self.loaded[name], self.salts[name]
        self._rebuild()

    def step(self, lora_per_request: list[tuple[str | None, int]]) -> AdapterStep | None:
        """A step's LoRA: (adapter or None, tokens) per scheduled request, in batch order;
        None when no request uses one."""
        if all(name is None for name, _ in lora_per_request):
            return None
        slots = torch.tensor(list(itertools.chain.from_iterable(
            [self._slots[name] if name is not None else -1] * n for name, n in lora_per_request)),
            device=self.device)
        masks = {g: (slots[:, None] == s.owner[None, :]).float() for g, s in self._stacks.items()}
        return AdapterStep(self._stacks, masks)

    def _rebuild(self) -> None:
        self._slots = {name: i for i, name in enumerate(self.loaded)}
        cfg = self.cfg
        q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
        offsets = {"q_proj": (0, q), "k_proj": (q, kv), "v_proj": (q + kv, kv), "o_proj": (0, cfg.hidden_size),
                   "gate_proj": (0, cfg.intermediate_size),
                   "up_proj": (cfg.intermediate_size, cfg.intermediate_size), "down_proj": (0, cfg.hidden_size)}
        widths = {"qkv": q + 2 * kv, "o": cfg.hidden_size, "gate_up": 2 * cfg.intermediate_size,
                  "down": cfg.hidden_size}
        stacks = {}
        for group, projections in GROUPS.items():
            parts = [(self._slots[a.name], a, p) for a in self.loaded.values() for p in projections if p in a.modules]
            if not parts:
                continue
            a_layers, b_layers = [], []
            for layer in range(cfg.num_hidden_layers):
                a_rows, b_rows = [], []
                for _, adapter, proj in parts:
                    a, b = adapter.weights[(layer, proj)]
                    start, width = offsets[proj]
                    wide = torch.zeros(b.shape[1], widths[group])
                    wide[:, start:start + width] = b.T
                    a_rows.append(a)
                    b_rows.append(wide)
                a_layers.append(torch.cat(a_rows).T.contiguous().to(self.device))
                b_layers.append(torch.cat(b_rows).to(self.device))
            owner = torch.tensor([slot for slot, adapter, _ in parts for _ in range(adapter.rank)], device=self.device)
            stacks[group] = Stack(a_layers, b_layers, owner)
        self._stacks = stacks
