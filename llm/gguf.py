"""GGUF checkpoints, llama.cpp's one-file format: the metadata, tensors and tokenizer of a
file read with the `gguf` package and given the shape a Hugging Face folder has, a
config.json's fields, a state dict under Hugging Face's names and a `tokenizers`
tokenizer, so that one loader (llm/model.py) serves both.

Quantized tensors are dequantized to float32 at load: the engine computes in float32,
and a 135M-parameter model is half a gigabyte that way. llama.cpp stores a Llama's q and
k projections with each head's rows interleaved for its rotary kernel; they are put back
in Hugging Face's order here, as transformers' GGUF loader does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

# general.architecture -> the family it is served as (a Mistral GGUF says llama)
FAMILIES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3"}
QUANT_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
LAYER_NAMES = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
               "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
               "attn_output": "self_attn.o_proj", "attn_qkv": "self_attn.qkv_proj",
               "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
               "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
# Pre-tokenizer splits that differ from GPT-2's, by tokenizer.ggml.pre (as transformers' GGUF loader reads them)
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPLITS = {"llama3": LLAMA3_SPLIT, "llama-v3": LLAMA3_SPLIT, "llama-bpe": LLAMA3_SPLIT, "smaug-bpe": LLAMA3_SPLIT,
          "qwen2": QWEN2_SPLIT, "deepseek-r1-qwen": QWEN2_SPLIT}
CONTROL, USER_DEFINED = 3, 4  # tokenizer.ggml.token_type


class GGUFError(ValueError):
    """A GGUF file that cannot be served; the message names the file and what is wrong."""


@dataclass(frozen=True)
class GGUFCheckpoint:
    path: Path
    metadata: dict
    config: dict  # as config.json would have it
    tensor_names: tuple[str, ...]

    @property
    def family(self) -> str:
        return self.config["model_type"]


def read_metadata(path: Path) -> tuple[dict, "object"]:
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except (OSError, ValueError, KeyError) as exc:
        raise GGUFError(f"{path}: not a readable GGUF file: {exc}") from None
    metadata = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        value = field.contents()
        metadata[name] = value
    return metadata, reader


def version_file(folder: Path) -> Path:
    """What to load from a model version's folder: its GGUF file when it holds one (and no
    config.json), else the folder (a GGUF file given itself is that file)."""
    folder = Path(folder)
    if folder.is_file() or (folder / "config.json").exists():
        return folder
    found = sorted(folder.glob("*.gguf"))
    if len(found) > 1:
        raise GGUFError(f"{folder}: {len(found)} GGUF files; a version holds one")
    return found[0] if found else folder


def open_checkpoint(path: Path) -> tuple[GGUFCheckpoint, "object"]:
    """The checkpoint's description and its reader (tensors are read by `state_dict`)."""
    path = Path(path)
    metadata, reader = read_metadata(path)
    names = tuple(t.name for t in reader.tensors)
    return GGUFCheckpoint(path, metadata, config_dict(path, metadata, names), names), reader


def config_dict(path: Path, meta: dict, tensor_names: tuple[str, ...]) -> dict:
    arch = meta.get("general.architecture")
    if arch not in FAMILIES:
        raise GGUFError(f"{path}: general.architecture: supported are {', '.join(FAMILIES)}; was {arch!r}")

    def key(name: str, default=KeyError):
        value = meta.get(f"{arch}.{name}", default)
        if value is KeyError:
            raise GGUFError(f"{path}: no {arch}.{name} in its metadata")
        return value

    heads, hidden = int(key("attention.head_count")), int(key("embedding_length"))
    head_dim = int(key("attention.key_length", hidden // heads))
    if int(key("rope.dimension_count", head_dim)) != head_dim:
        raise GGUFError(f"{path}: {arch}.rope.dimension_count: RoPE over part of a head is not supported")
    if "rope_freqs.weight" in tensor_names:
        raise GGUFError(f"{path}: rope_freqs: per-frequency RoPE factors (Llama 3.1's scaling) are not supported")
    config = {
        "model_type": FAMILIES[arch],
        "vocab_size": int(key("vocab_size", len(meta.get("tokenizer.ggml.tokens", ())))),
        "hidden_size": hidden, "intermediate_size": int(key("feed_forward_length")),
        "num_hidden_layers": int(key("block_count")), "num_attention_heads": heads,
        "num_key_value_heads": int(key("attention.head_count_kv", heads)), "head_dim": head_dim,
        "rms_norm_eps": float(key("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": float(key("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(key("context_length", 2048)),
        # llama.cpp writes the output projection only when it is not the embedding matrix
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
    }
    window = key("attention.sliding_window", None)
    if window:
        config["sliding_window"] = int(window)
    scaling = key("rope.scaling.type", None)
    if scaling not in (None, "none"):
        config["rope_scaling"] = {"rope_type": scaling, "factor": float(key("rope.scaling.factor")),
                                  **({"original_max_position_embeddings": int(original)}
                                     if (original := key("rope.scaling.original_context_length", None)) else {})}
    return config


def hf_name(name: str, family: str) -> str | None:
    """A tensor's Hugging Face name (`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight`)."""
    stem, _, kind = name.rpartition(".")
    if stem in TOP_NAMES:
        return f"{TOP_NAMES[stem]}.{kind}"
    parts = stem.split(".")
    if len(parts) != 3 or parts[0] != "blk" or parts[2] not in LAYER_NAMES:
        return None
    mapped = "mlp.gate_up_proj" if family == "phi3" and parts[2] == "ffn_up" else LAYER_NAMES[parts[2]]
    return f"model.layers.{parts[1]}.{mapped}.{kind}"


def unpermute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k row order (each head's two rotary halves interleaved) back to Hugging Face's."""
    dim = weight.shape[0] // heads // 2
    return weight.reshape(heads, dim, 2, *weight.shape[1:]).swapaxes(2, 1).reshape(weight.shape)


def dequantized(tensor, path: Path) -> np.ndarray:
    from gguf.quants import dequantize

    kind = tensor.tensor_type.name
    if kind not in QUANT_TYPES:
        raise GGUFError(f"{path}: {tensor.name} is {kind}; supported are {', '.join(QUANT_TYPES)}")
    values = dequantize(tensor.data, tensor.tensor_type)
    return np.asarray(values, dtype=np.float32).reshape([int(n) for n in reversed(tensor.shape)])


def state_dict(checkpoint: GGUFCheckpoint, reader) -> dict[str, torch.Tensor]:
    """Every tensor as float32 under its Hugging Face name; a tensor of no known name is refused."""
    cfg, out = checkpoint.config, {}
    for tensor in reader.tensors:
        name = hf_name(tensor.name, checkpoint.family)
        if name is None:
            raise GGUFError(f"{checkpoint.path}: tensor {tensor.name}: not a tensor of a {checkpoint.family} model")
        values = dequantized(tensor, checkpoint.path)
        if checkpoint.metadata.get("general.architecture") == "llama" and name.endswith(("q_proj.weight",
                                                                                           "k_proj.weight")):
            heads = cfg["num_attention_heads"] if "q_proj" in name else cfg["num_key_value_heads"]
            values = unpermute(values, heads)
        out[name] = torch.from_numpy(np.array(values, dtype=np.float32, order="C"))  # a copy the model may own
    return out


def tokenizer(meta: dict, path: Path):
    """The byte-level BPE tokenizer the metadata describes, built as transformers' GGUF
    loader builds it: the vocabulary (spelt in GPT-2's byte alphabet) and merges, the
    pre-tokenizer split its `tokenizer.ggml.pre` names, control tokens as special tokens,
    user-defined ones as added tokens, a BOS only where the file says to add one."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise GGUFError(f"{path}: tokenizer.ggml.model: only byte-level BPE ('gpt2') is supported; was {kind!r}")
    tokens, types = list(meta["tokenizer.ggml.tokens"]), list(meta.get("tokenizer.ggml.token_type") or ())
    spelling = byte_alphabet()
    alphabet = set(spelling.values())
    vocab = {t if set(t) <= alphabet else "".join(spelling[b] for b in t.encode("utf-8")): i
             for i, t in enumerate(tokens)}
    merges = [tuple(m.split(" ")) for m in meta.get("tokenizer.ggml.merges", ())]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="",
                               end_of_word_suffix="", fuse_unk=False))
    split = SPLITS.get(meta.get("tokenizer.ggml.pre"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]) \
        if split else pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types)
                            if k == CONTROL and set(t) <= alphabet])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t, k in zip(tokens, types)
                    if k == USER_DEFINED])
    bos = meta.get("tokenizer.ggml.bos_token_id")
    if meta.get("tokenizer.ggml.add_bos_token") and bos is not None:
        tok.post_processor = processors.TemplateProcessing(single=f"{tokens[bos]} $A", pair=f"{tokens[bos]} $A $B",
                                                           special_tokens=[(tokens[bos], bos)])
    return tok


def special_tokens(meta: dict) -> dict[str, str]:
    tokens = meta.get("tokenizer.ggml.tokens", ())
    out = {}
    for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"), ("pad_token", "padding_token_id"),
                      ("unk_token", "unknown_token_id")):
        index = meta.get(f"tokenizer.ggml.{key}")
        if index is not None and 0 <= index < len(tokens):
            out[name] = tokens[index]
    return out


def byte_alphabet() -> dict[int, str]:
    """GPT-2's printable spelling of the 256 byte values."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = printable[:], 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}
