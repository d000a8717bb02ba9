"""A Llama-family decoder (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU)
that runs selective batching over a paged KV cache: Llama (RoPE scaling `linear`,
`dynamic`, `llama3`, `yarn`; SmolLM2 is one), Mistral, Qwen2 (biases on q, k and v)
and Qwen3 (RMSNorm of q and k per head). A sliding attention window limits the
context served to the window, inside which attention is full attention.

`forward(batch)` takes the tokens of every scheduled request flattened into one
sequence `[T]` (prefill chunks and single decode tokens alike): embeddings, norms,
projections and the MLP run once on `[T, H]`; only attention is per request, each
against its own keys and values, gathered from cache blocks through its block table.
The numerics follow Hugging Face's LlamaForCausalLM (float32, same RoPE and RMSNorm),
so greedy decoding gives the same tokens.

Checkpoints load from a local Hugging Face directory: `config.json` and
`*.safetensors` (tokenizer.json is the tokenizer's business).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded; the message names the file and field."""


FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "phi3")  # config.json model_type; SmolLM2 is a llama
ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    family: str = "llama"
    attention_bias: bool = False  # q, k and v projections with biases (Qwen2)
    qk_norm: bool = False  # RMSNorm of each head's q and k before RoPE (Qwen3)
    rope_type: str = "default"
    rope_params: tuple[tuple[str, float], ...] = ()  # the rope type's own numbers (factor, ...)

    @classmethod
    def from_file(cls, path: Path) -> "LlamaConfig":
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{path}: cannot read: {exc}") from None
        return cls.from_dict(raw, path)

    @classmethod
    def from_dict(cls, raw: dict, path: Path) -> "LlamaConfig":
        """From config.json's fields (or a GGUF's, given those names); errors name `path`."""
        family = raw.get("model_type") or "llama"
        if family not in FAMILIES:
            raise CheckpointError(f"{path}: model_type: supported are {', '.join(FAMILIES)}; was {family!r}")
        if raw.get("mlp_bias"):
            raise CheckpointError(f"{path}: mlp_bias: biases in the MLP are not supported; was true")
        if raw.get("hidden_act", "silu") != "silu":
            raise CheckpointError(f"{path}: hidden_act: only 'silu' (SwiGLU) is supported; was {raw['hidden_act']!r}")
        # transformers 5 writes rope_parameters (with rope_theta inside); older files rope_scaling
        rope = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
        rope_type = rope.pop("rope_type", None) or rope.pop("type", None) or "default"
        if rope_type not in ROPE_TYPES:
            raise CheckpointError(f"{path}: rope type {rope_type!r} is not supported (supported: "
                                  f"{', '.join(ROPE_TYPES)})")
        if float(rope.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))) != 1.0:
            raise CheckpointError(f"{path}: partial_rotary_factor: only 1.0 (RoPE over the whole head) is supported")
        theta = float(rope.pop("rope_theta", raw.get("rope_theta", 10000.0)))
        try:
            heads = int(raw["num_attention_heads"])
            max_positions = int(raw.get("max_position_embeddings", 2048))
            window = _sliding_window(raw)
            if window is not None and window < max_positions:
                # attention within the window is full attention up to it: serve no longer contexts
                max_positions = window
            params = tuple(sorted((k, float(v)) for k, v in rope.items()
                                  if isinstance(v, (int, float)) and not isinstance(v, bool)))
            return cls(vocab_size=int(raw["vocab_size"]), hidden_size=int(raw["hidden_size"]),
                       intermediate_size=int(raw["intermediate_size"]),
                       num_hidden_layers=int(raw["num_hidden_layers"]), num_attention_heads=heads,
                       num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
                       head_dim=int(raw.get("head_dim") or int(raw["hidden_size"]) // heads),
                       rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)), rope_theta=theta,
                       max_position_embeddings=max_positions,
                       tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
                       bos_token_id=raw.get("bos_token_id"), eos_token_id=raw.get("eos_token_id"),
                       family=family, attention_bias=family == "qwen2" or bool(raw.get("attention_bias", False)),
                       qk_norm=family == "qwen3", rope_type=rope_type, rope_params=params)
        except KeyError as exc:
            raise CheckpointError(f"{path}: missing field {exc.args[0]!r}") from None

    @property
    def eos_ids(self) -> tuple[int, ...]:
        e = self.eos_token_id
        return () if e is None else tuple(e) if isinstance(e, list) else (int(e),)


class LoraStep(Protocol):
    """A step's LoRA updates (llm/adapters.py): adds to projection `group`'s output `y`
    [T, out] of layer `layer`, in place, its update for input `x` [T, in], each token
    through its request's adapter (nothing where no adapter in the step adapts it)."""

    def add(self, group: str, layer: int, x: torch.Tensor, y: torch.Tensor) -> None: ...


@dataclass
class SeqBatch:
    """One scheduled request's slice of the flattened batch."""

    start: int  # offset of its tokens in the flattened batch
    num_tokens: int  # tokens computed this step (a prefill chunk, or 1 when decoding)
    context_len: int  # tokens in its KV after this step (= position of the last + 1)
    block_table: list[int]


@dataclass
class Batch:
    token_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    seqs: list[SeqBatch]
    slots: torch.Tensor  # [T] int64: cache slot each token's K/V is written to
    block_size: int
    lora: LoraStep | None = None  # the step's LoRA adapters, per token


class Workspace:
    """Scratch tensors reused from step to step for a step's large temporaries (the
    gathered K/V blocks, several MB a layer). Allocated afresh, each goes to mmap and
    back every layer, page faults included, which slows a decode step markedly on a
    CPU; one buffer per name, grown when a step needs more, avoids that."""

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def get(self, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        n = math.prod(shape)
        buf = self._buffers.get(name)
        if buf is None or buf.numel() < n or buf.dtype != like.dtype or buf.device != like.device:
            buf = self._buffers[name] = torch.empty(n, dtype=like.dtype, device=like.device)
        return buf[:n].view(shape)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # one fused op; the same bits as the formula below
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def _sliding_window(raw: dict) -> int | None:
    """The attention window of a config that uses one (Mistral's sliding_window, Qwen's
    use_sliding_window or layer_types), else None."""
    window = raw.get("sliding_window")
    if not window:
        return None
    if raw.get("model_type") in ("qwen2", "qwen3"):
        sliding = raw.get("use_sliding_window") or "sliding_attention" in (raw.get("layer_types") or [])
        if not sliding:
            return None
    return int(window)


def rope_frequencies(cfg: LlamaConfig) -> tuple[torch.Tensor, float]:
    """(inverse frequencies [head_dim / 2], the factor on cos and sin) of the config's
    RoPE type, as transformers' rope initialisation computes them. `dynamic` equals
    `default` up to max_position_embeddings, the longest context served."""
    d, p = cfg.head_dim, dict(cfg.rope_params)
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    if cfg.rope_type == "linear":
        return inv_freq / p["factor"], 1.0
    if cfg.rope_type == "llama3":
        factor, low, high = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
        old_len = p["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old_len / high) * ~(wavelen > old_len / low)
        return torch.where(medium, smoothed, scaled), 1.0
    if cfg.rope_type == "yarn":
        return _yarn(cfg, p)
    return inv_freq, 1.0


def _yarn(cfg: LlamaConfig, p: dict) -> tuple[torch.Tensor, float]:
    d, base = cfg.head_dim, cfg.rope_theta
    old_len = p["original_max_position_embeddings"]
    factor = p.get("factor") or cfg.max_position_embeddings / old_len

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = p.get("attention_factor")
    if attention is None:
        attention = mscale(factor, p["mscale"]) / mscale(factor, p["mscale_all_dim"]) \
            if p.get("mscale") and p.get("mscale_all_dim") else mscale(factor)

    def correction(rotations: float) -> float:
        return (d * math.log(old_len / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction(p.get("beta_fast") or 32), correction(p.get("beta_slow") or 1)
    if p.get("truncate", 1.0):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolate = 1 - ramp
    pos = base ** (torch.arange(0, d, 2).float() / d)
    return (1.0 / (factor * pos)) * (1 - extrapolate) + (1.0 / pos) * extrapolate, float(attention)


def rope_tables(cfg: LlamaConfig, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin: [max_positions, head_dim], laid out as Hugging Face's rotate_half expects."""
    inv_freq, attention = rope_frequencies(cfg)
    t = torch.arange(cfg.max_position_embeddings, dtype=torch.int64).float()
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * attention).to(device), (emb.sin() * attention).to(device)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, heads, head_dim]; cos/sin [T, head_dim]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


class Layer(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(h, cfg.num_attention_heads * d, bias=bias)
        self.k_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=bias)
        self.v_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=bias)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.o_proj = nn.Linear(cfg.num_attention_heads * d, h, bias=False)
        self.gate_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, h, bias=False)
        self.input_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.num_heads, self.num_kv, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, d
        self.scale = d ** -0.5
        self.qkv_weight: torch.Tensor | None = None
        self.qkv_bias: torch.Tensor | None = None
        self.gate_up_weight: torch.Tensor | None = None

    @torch.no_grad()
    def fuse(self) -> None:
        """One weight for q, k and v, one for gate and up: two matmuls a layer fewer (fewer,
        larger calls, which a CPU runs faster). The projections' own weights become
        views into the fused ones, so nothing is stored twice and the state dict keeps
        Hugging Face's names."""
        for fused_name, parts in (("qkv_weight", (self.q_proj, self.k_proj, self.v_proj)),
                                  ("gate_up_weight", (self.gate_proj, self.up_proj))):
            fused = torch.cat([m.weight for m in parts])
            setattr(self, fused_name, fused)
            row = 0
            for m in parts:
                n = m.weight.shape[0]
                m.weight = nn.Parameter(fused[row:row + n], requires_grad=False)
                row += n
        if self.q_proj.bias is not None:
            self.qkv_bias = torch.cat([m.bias for m in (self.q_proj, self.k_proj, self.v_proj)])


class LlamaModel(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None
        self.workspace = Workspace()

    def rope(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._rope is None or self._rope[0].device != self.embed_tokens.weight.device:
            self._rope = rope_tables(self.cfg, self.embed_tokens.weight.device)
        return self._rope

    @torch.inference_mode()
    def forward(self, batch: Batch, kv: torch.Tensor) -> torch.Tensor:
        """Runs one step; writes the new K/V into `kv` [layers, 2, blocks, kv_heads, block_size, head_dim]
        and returns logits of each sequence's last token this step: [num_seqs, vocab]."""
        bs = batch.block_size
        device = batch.token_ids.device
        # Decoding requests (one new token each) attend in one call, each query against
        # its own request's cache blocks, gathered whole through a padded [D, B_max] block
        # table into a reused buffer, with a mask over the padding. The blocks stay blocks
        # (attention by block, one softmax across them): re-laying K/V out as one sequence
        # per request would copy them again, and copying is most of a decode step on a
        # CPU. index_select, because indexing with a tensor is much slower on a CPU.
        # Prefill chunks attend one request at a time with a causal mask.
        decode = [s for s in batch.seqs if s.num_tokens == 1]
        prefill = [s for s in batch.seqs if s.num_tokens > 1]
        dec = None
        if decode:
            b_max = max(-(-s.context_len // bs) for s in decode)
            tables = torch.tensor([_padded(s.block_table, b_max) for s in decode], device=device)
            lengths = torch.tensor([s.context_len for s in decode], device=device)
            rows = None if not prefill else torch.tensor([s.start for s in decode], device=device)
            dec = DecodeAttention.build(tables, lengths, rows, kv, bs, self.workspace)
        pre_tables = [torch.tensor(s.block_table[:-(-s.context_len // bs)], device=device) for s in prefill]
        last = torch.tensor([s.start + s.num_tokens - 1 for s in batch.seqs], device=device)  # before the
        # layers: a copy to the device queued after them would wait for them
        x = self._layers(batch.token_ids, batch.positions, batch.slots, bs, kv, dec, list(zip(prefill, pre_tables)),
                         batch.lora)
        return self.lm_head(self.norm(x[last]))

    @torch.inference_mode()
    def forward_static(self, meta: torch.Tensor, kv: torch.Tensor, block_size: int) -> torch.Tensor:
        """A step whose shapes depend on nothing but `meta`'s: [T, 4 + B] int64 rows of
        (token, position, slot, context length, B block-table entries), one per token.
        Every token attends like a decode token, to its request's positions before its
        own and itself (a prefill chunk's rows are causal that way, since every row's
        K/V is written before any row reads), and gathers B blocks, masked past its
        length: the same kernels run on the same addresses at every step, which is what a
        CUDA graph replays (llm/cuda_graphs.py). Returns logits [T, vocab]."""
        dec = DecodeAttention.build(meta[:, 4:], meta[:, 3], None, kv, block_size, None)
        x = self._layers(meta[:, 0], meta[:, 1], meta[:, 2], block_size, kv, dec, [])
        return self.lm_head(self.norm(x))

    def _layers(self, token_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, bs: int,
                kv: torch.Tensor, dec: "DecodeAttention | None",
                prefill: list[tuple[SeqBatch, torch.Tensor]], lora: LoraStep | None = None) -> torch.Tensor:
        """Every layer over the flattened tokens [T]: writes each token's K/V to its slot,
        attends (decode rows through `dec`, each prefill chunk against its own blocks);
        `lora` adds each token's adapter's update to the projections."""
        cos_all, sin_all = self.rope()
        cos, sin = cos_all[positions], sin_all[positions]
        x = self.embed_tokens(token_ids)  # [T, H]
        slot_block, slot_offset = slots // bs, slots % bs
        only_decode = not prefill
        for i, layer in enumerate(self.layers):
            h = layer.input_layernorm(x)
            t = h.shape[0]
            nq, nkv = layer.num_heads * layer.head_dim, layer.num_kv * layer.head_dim
            qkv = _adapted(F.linear(h, layer.qkv_weight, layer.qkv_bias), lora, "qkv", i, h)
            qk, v = qkv.split((nq + nkv, nkv), dim=-1)
            qk = qk.reshape(t, layer.num_heads + layer.num_kv, layer.head_dim)
            if layer.q_norm is not None:
                qk = torch.cat([layer.q_norm(qk[:, :layer.num_heads]), layer.k_norm(qk[:, layer.num_heads:])], 1)
            qk = apply_rope(qk, cos, sin)  # q and k at once
            q, k = qk[:, :layer.num_heads], qk[:, layer.num_heads:]
            v = v.reshape(t, layer.num_kv, layer.head_dim)
            kv[i, 0, slot_block, :, slot_offset] = k
            kv[i, 1, slot_block, :, slot_offset] = v
            out = None if only_decode else torch.empty_like(q)
            if dec is not None:
                keys, values = dec.gather(kv, i)
                if only_decode:  # every row decodes, in order: no gather or scatter of rows
                    out = _attend_decode(q, keys, values, dec.mask, layer)
                else:
                    out[dec.rows] = _attend_decode(q[dec.rows], keys, values, dec.mask, layer)
            for s, table in prefill:  # attention per request, against its own cache blocks
                keys, values = (kv[i, j].index_select(0, table).transpose(0, 1).flatten(1, 2)[:, :s.context_len]
                                for j in (0, 1))  # [kv_heads, C, d]
                qs = q[s.start:s.start + s.num_tokens]
                out[s.start:s.start + s.num_tokens] = _attend(qs, keys, values, layer, s.context_len)
            out = out.reshape(t, -1)
            x = x + _adapted(layer.o_proj(out), lora, "o", i, out)
            h = layer.post_attention_layernorm(x)
            gate, up = _adapted(F.linear(h, layer.gate_up_weight), lora, "gate_up", i, h).chunk(2, dim=-1)
            act = F.silu(gate) * up
            x = x + _adapted(layer.down_proj(act), lora, "down", i, act)
        return x


def _adapted(y: torch.Tensor, lora: LoraStep | None, group: str, layer: int, x: torch.Tensor) -> torch.Tensor:
    """A projection's output `y` of input `x`, plus (in place) its LoRA update for the
    tokens whose request runs an adapter of that projection."""
    if lora is not None:
        lora.add(group, layer, x, y)
    return y


@dataclass
class DecodeAttention:
    """What the decoding rows of a step attend through: their block tables flattened
    ([D * B]), the gathered shape [D, B, kv_heads, bs, d], the mask over padding
    [D, B, 1, 1, bs], their rows in the flattened batch (None: all rows, in order) and
    the buffers the gathered blocks go to (None: fresh tensors, as a CUDA graph needs)."""

    tables: torch.Tensor
    shape: tuple[int, ...]
    mask: torch.Tensor
    rows: torch.Tensor | None
    buffers: list[torch.Tensor] | None

    @classmethod
    def build(cls, tables: torch.Tensor, lengths: torch.Tensor, rows: torch.Tensor | None, kv: torch.Tensor,
              bs: int, workspace: Workspace | None) -> "DecodeAttention":
        d_, b_max = tables.shape
        shape = (d_, b_max, *kv.shape[3:])
        positions = torch.arange(b_max * bs, device=tables.device).view(1, b_max, 1, 1, bs)
        mask = positions < lengths.reshape(-1, 1, 1, 1, 1)
        buffers = None if workspace is None else [workspace.get(n, (d_ * b_max, *kv.shape[3:]), kv) for n in "kv"]
        return cls(tables.reshape(-1), shape, mask, rows, buffers)

    def gather(self, kv: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        buffers = self.buffers or (None, None)
        return tuple(torch.index_select(kv[layer, j], 0, self.tables, out=buffers[j]).view(self.shape)
                     for j in (0, 1))


def _padded(table: list[int], n: int) -> list[int]:
    """The first n blocks of a table, padded with block 0 (masked out)."""
    return table[:n] + [0] * (n - len(table))


def _attend_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, layer: Layer) -> torch.Tensor:
    """q [D, heads, d]; k, v [D, B, kv_heads, bs, d] (each request's blocks); mask
    [D, B, 1, 1, bs] -> [D, heads, d].

    Grouped-query attention without repeating K/V: the query heads that share a kv head
    are one [group, d] block (heads h*g .. h*g+g-1 read kv head h, as HF's repeat_kv).
    Scores are taken block by block, normalised by one softmax across all of a request's
    blocks, and the weighted values summed over the blocks."""
    d_, kv_heads, d = q.shape[0], layer.num_kv, layer.head_dim
    qg = q.view(d_, 1, kv_heads, -1, d)
    scores = torch.matmul(qg, k.transpose(-1, -2)) * layer.scale  # [D, B, kv_heads, g, bs]
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.exp(scores - scores.amax(dim=(1, 4), keepdim=True))
    weights = weights / weights.sum(dim=(1, 4), keepdim=True)
    out = torch.matmul(weights, v).sum(dim=1)  # [D, kv_heads, g, d]
    return out.reshape(d_, layer.num_heads, d)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: Layer, context_len: int) -> torch.Tensor:
    """A prefill chunk: q [n, heads, d] at positions context_len - n .. context_len - 1;
    k, v [kv_heads, C, d]."""
    n = q.shape[0]
    q_pos = torch.arange(context_len - n, context_len, device=q.device)[:, None]
    mask = torch.arange(context_len, device=q.device)[None, :] <= q_pos  # [n, C] causal
    out = F.scaled_dot_product_attention(q.transpose(0, 1), k, v, attn_mask=mask, scale=layer.scale,
                                         enable_gqa=layer.num_heads != layer.num_kv)
    return out.transpose(0, 1)

