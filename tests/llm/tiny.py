"""A randomly initialised tiny Llama saved in Hugging Face format, with a word-level
tokenizer over its vocabulary ("t0" .. "tN")."""

from __future__ import annotations

from pathlib import Path


def make_tiny_llama(folder: Path, seed: int = 0, vocab: int = 97, layers: int = 2, heads: int = 4,
                    kv_heads: int = 2, hidden: int = 64) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=512,
                      eos_token_id=vocab - 1, bos_token_id=0, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # larger weights than the init's: sharper logits, fewer near-ties
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(8.0)
    model.save_pretrained(folder, safe_serialization=True)
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t1"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tok.save(str(folder / "tokenizer.json"))
    return folder


def generate_joining(engine, prompts: list[str], rng, most: int) -> list:
    """Greedy requests of 8 to `most` tokens, each added while the ones before it run; the
    engine stepped by hand to the end and closed. Their handles."""
    from llm.sampling import SamplingParams

    try:
        handles = []
        for p in prompts:  # each joins while the others run
            handles.append(engine.add_request(p, SamplingParams(max_tokens=rng.randint(8, most), ignore_eos=True)))
            engine.step()
        while engine.has_work():
            engine.step()
    finally:
        engine.close()
    return handles


def transformers_greedy(hf, handle) -> list[int]:
    """What transformers' `generate` gives greedily for a handle's prompt, as many tokens as it generated."""
    import torch

    ids = torch.tensor([handle.request.prompt_ids])
    n = len(handle.request.output_ids)
    with torch.no_grad():
        return hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                           do_sample=False, eos_token_id=None, pad_token_id=0)[0, ids.shape[1]:].tolist()
