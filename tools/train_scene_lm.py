"""Train `scene-lm`, the default caption and answer model, from scene facts.

    python -m tools.train_scene_lm [--steps N] [--out configs/models/scene-lm/1]

Text comes from two sources, both generated here with fixed seeds: the per-second
scene facts of clips rendered by `sample_videos` (windows of 1-4 s turned into
facts -> caption pairs) and random facts and aggregates over the default preset's
lines, zones and classes (facts -> caption, context + question -> answer). The
tokenizer (byte-free BPE with single digits, so numbers are copied digit by digit) is
trained on the same text with the `tokenizers` library. The model is a small Llama
(transformers' LlamaForCausalLM, trained on the CPU) saved in Hugging Face format, so
both transformers and Vigil's engine load the same files.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch

from llm.scene_corpus import corpus

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "configs" / "models" / "scene-lm" / "1"
BOS, EOS, PAD = "<s>", "</s>", "<pad>"


def encode(tok, prompt: str, completion: str, bos: int, eos: int) -> tuple[list[int], int]:
    """Token ids of one sample and how many of them are prompt (no loss on those: the
    model's capacity goes to writing captions and answers, not to predicting facts)."""
    ids = tok.encode(f"{prompt} {completion}").ids
    head = tok.encode(prompt).ids
    n = len(head) if ids[:len(head)] == head else 0  # a merge across the boundary: learn the whole text
    return [bos, *ids, eos], 1 + n


def with_bos(tok) -> None:
    """Prepend <s> in the tokenizer's own post-processor, so that every library that
    reads tokenizer.json (transformers' AutoTokenizer, Vigil) encodes a prompt alike;
    `add_bos_token` in tokenizer_config.json alone is honoured by some and not others."""
    from tokenizers.processors import TemplateProcessing

    bos = tok.token_to_id(BOS)
    tok.post_processor = TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos)])


def train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(),
                                                 pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.Punctuation()])
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[PAD, BOS, EOS, "<unk>"], show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--samples", type=int, default=60_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    started = time.time()
    pairs = corpus(args.samples, clip_seeds=list(range(2000, 2016)), seed=args.seed)
    texts = [f"{p} {c}" for p, c in pairs]
    tok = train_tokenizer(texts, vocab_size=640)
    pad, bos, eos = (tok.token_to_id(t) for t in (PAD, BOS, EOS))
    encoded = [encode(tok, p, c, bos, eos) for p, c in pairs]
    max_len = max(len(e) for e, _ in encoded)
    print(f"{len(texts)} texts, vocab {tok.get_vocab_size()}, longest {max_len} tokens "
          f"({time.time() - started:.0f} s)", flush=True)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=256, intermediate_size=640, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512, rms_norm_eps=1e-5,
                      bos_token_id=bos, eos_token_id=eos, pad_token_id=pad, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01, betas=(0.9, 0.98))
    rng = random.Random(args.seed)
    log = []
    model.train()
    for step in range(args.steps):
        lr = 2e-3 * min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        batch = rng.sample(encoded, args.batch)
        width = max(len(b) for b, _ in batch)
        ids = torch.full((len(batch), width), pad)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        labels = torch.full((len(batch), width), -100)
        for i, (b, head) in enumerate(batch):
            ids[i, :len(b)] = torch.tensor(b)
            mask[i, :len(b)] = 1
            labels[i, head:len(b)] = ids[i, head:len(b)]
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == args.steps - 1:
            log.append({"step": step, "loss": round(loss.item(), 4), "s": round(time.time() - started, 1)})
            print(log[-1], flush=True)
    model.eval()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    with_bos(tok)  # after training: the samples above were encoded without it, <s> added by hand
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
        "unk_token": "<unk>", "add_bos_token": True, "model_max_length": 512}, indent=2) + "\n")
    (out / "train_log.json").write_text(json.dumps({"steps": args.steps, "batch": args.batch, "samples": args.samples,
                                                    "seconds": round(time.time() - started, 1), "log": log},
                                                   indent=2) + "\n")
    print(f"wrote {out} in {time.time() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
