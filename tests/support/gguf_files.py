"""GGUF files the tests write with the `gguf` package's writer, as llama.cpp writes them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


def write_qwen2_gguf(path: Path, quant: str, tokenizer: dict, seed: int = 7) -> None:
    """A random-initialised Qwen2 (transformers' own) written as llama.cpp writes one:
    its 2-D weights quantized to `quant`, norms and biases in F32, SmolLM2's byte-level
    vocabulary split the way Qwen2's is."""
    import gguf
    import transformers

    tokens = tokenizer["tokenizer.ggml.tokens"]
    cfg = transformers.Qwen2Config(vocab_size=len(tokens), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                   tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, rms_norm_eps=1e-6)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    to_gguf = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
    layer = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_context_length(256)
    writer.add_embedding_length(64)
    writer.add_block_count(2)
    writer.add_feed_forward_length(128)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(tokenizer["tokenizer.ggml.token_type"])
    writer.add_token_merges(tokenizer["tokenizer.ggml.merges"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_chat_template(tokenizer["tokenizer.chat_template"])
    qtype = gguf.GGMLQuantizationType[quant]
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            stem, _, kind = name.rpartition(".")
            if stem in to_gguf:
                target = f"{to_gguf[stem]}.{kind}"
            else:
                index, part = stem.removeprefix("model.layers.").split(".", 1)
                target = f"blk.{index}.{layer[part]}.{kind}"
            values = tensor.float().numpy()
            if values.ndim == 2:
                values = values * 8.0  # sharper logits than the init's: fewer near-ties
                writer.add_tensor(target, gguf.quants.quantize(values, qtype), raw_dtype=qtype)
            else:
                writer.add_tensor(target, (values if kind == "weight" else
                                           np.random.default_rng(seed).normal(0, 0.5, values.shape)).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_tiny(path: Path, arch: str, embedding: np.ndarray) -> None:
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    for name, value in (("context_length", 64), ("embedding_length", 32), ("block_count", 0),
                        ("feed_forward_length", 64), ("attention.head_count", 2)):
        writer.add_uint32(f"{arch}.{name}", value)
    writer.add_tensor("token_embd.weight", embedding)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def byte_vocabulary() -> dict:
    """A tokenizer's metadata of the 256 byte tokens and two control tokens, no merges:
    the smallest vocabulary a byte-level BPE GGUF can carry."""
    from llm.gguf import byte_alphabet

    tokens = [*byte_alphabet().values(), "<|im_start|>", "<|im_end|>"]
    return {"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": [1] * 256 + [3, 3],
            "tokenizer.ggml.merges": [], "tokenizer.chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}
