"""Train `scene-lm`, the default caption and answer model, from scene facts.

    python -m llm.train_scene_lm [--steps N] [--out configs/models/scene-lm/1]

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

from llm.facts import (CLASSES, PLURAL, Aggregate, SceneFacts, answer_prompt, answer_text, caption_prompt,
                       caption_text, clock)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "configs" / "models" / "scene-lm" / "1"
LINES = ("midblock", "crosswalk", "westgate", "eastgate")
ZONES = ("crosswalk", "north_sidewalk", "south_sidewalk", "road")
BOS, EOS, PAD = "<s>", "</s>", "<pad>"

QUESTIONS = {
    "count": ["how many {p} crossed {line}{way}{span}?", "count the {p} crossing {line}{way}{span}.",
              "{p} over {line}{way}{span}: how many?"],
    "first": ["when did the first {c} appear{span}?", "what time was the first {c} seen{span}?"],
    "last": ["when was the last {c} seen{span}?", "when did the last {c} appear{span}?"],
    "zone": ["was there a {c} in {zone}{span}?", "were any {p} in {zone}{span}?", "how many {p} were in {zone}{span}?"],
}


def random_facts(rng: random.Random) -> SceneFacts:
    t0 = rng.randint(0, 600) * 1000.0
    f = SceneFacts("cam", t0, t0 + rng.choice([1000, 2000, 3000, 4000]))
    # Counts span what the renderer's busy presets show (two-digit crowds on the
    # sidewalks), so the model copies both digits rather than guessing one.
    f.objects["person"] = rng.choice([rng.randint(0, 5), rng.randint(0, 29)])
    f.objects["car"] = rng.randint(0, 9)
    f.objects["bike"] = rng.choice([0, 0, 0, 1, 2, 3])
    for line in rng.sample(LINES, rng.randint(0, 3)):
        for c in rng.sample(CLASSES, rng.randint(1, 2)):
            f.crossings.setdefault(line, {})[c] = {d: rng.choice([0, 1, 1, 2, 3]) for d in ("in", "out")}
    for bucket in (f.entered, f.left):
        for c in rng.sample(CLASSES, rng.randint(0, 2)):
            bucket[c] = rng.randint(1, 3)
    return f


def clip_facts(seed: int, rng: random.Random) -> list[SceneFacts]:
    """Facts windows of a rendered clip's ground truth (no video is encoded)."""
    return windows(clip_seconds(seed), rng)


def clip_seconds(seed: int) -> list[dict]:
    """Per-second ground-truth facts of the 30 s clip the renderer draws for `seed`."""
    from sample_videos.groundtruth import Truth
    from sample_videos.render import RenderConfig, Renderer

    config = RenderConfig(seed=seed, duration_s=30.0)
    renderer = Renderer(config)
    truth = Truth(renderer.preset, config.width, config.height, config.fps)
    for rendered in renderer.frames():
        truth.add_frame(rendered.index, rendered.t_ms, rendered.objects)
    return truth.document(preset=config.preset, seed=seed, fps=config.fps, width=config.width,
                          height=config.height, num_frames=config.num_frames, duration_s=30.0,
                          density=config.density, quiet=[])["facts"]


def windows(per_second: list[dict], rng: random.Random) -> list[SceneFacts]:
    """Cut per-second facts into windows of 1-4 s, as captions every few seconds see them."""
    out = []
    i = 0
    while i < len(per_second):
        span = rng.randint(1, 4)
        window = per_second[i:i + span]
        f = SceneFacts("cam", window[0]["t_s"] * 1000.0, (window[-1]["t_s"] + 1) * 1000.0)
        f.objects = {c: window[-1]["objects"].get(c, {}).get("total", 0) for c in CLASSES}
        for sec in window:
            for line, by in sec["crossings"].items():
                for c, dirs in by.items():
                    slot = f.crossings.setdefault(line, {}).setdefault(c, {"in": 0, "out": 0})
                    for d, n in dirs.items():
                        slot[d] += n
        out.append(f)
        i += span
    return out


def random_aggregate(rng: random.Random) -> tuple[Aggregate, str]:
    kind = rng.choice(["count", "count", "first", "last", "zone"])
    c = rng.choice(CLASSES)
    t_from = t_to = None
    if rng.random() < 0.7:
        t_from = rng.randint(0, 590) * 1000.0
        t_to = t_from + rng.randint(1, 120) * 1000.0
    span = f" between {clock(t_from)} and {clock(t_to)}" if t_from is not None else ""
    if kind == "count":
        d = rng.choice([None, None, "in", "out"])
        a = Aggregate("count", c, t_from, t_to, line=rng.choice(LINES), direction=d,
                      n=rng.choice([rng.randint(0, 5), rng.randint(0, 40)]))
        q = rng.choice(QUESTIONS["count"]).format(p=PLURAL[c], line=a.line, way=f" {d}" if d else "", span=span)
    elif kind in ("first", "last"):
        t = None if rng.random() < 0.1 else rng.randint(0, 900) * 1000.0
        a = Aggregate(kind, c, t_from, t_to, t_ms=t)
        q = rng.choice(QUESTIONS[kind]).format(c=c, span=span)
    else:
        a = Aggregate("zone", c, t_from, t_to, zone=rng.choice(ZONES), n=rng.choice([0, 0, 1, 2, 3, 5]))
        q = rng.choice(QUESTIONS["zone"]).format(c=c, p=PLURAL[c], zone=a.zone, span=span)
    return a, q


def corpus(num_random: int, clip_seeds: list[int], seed: int, clip_passes: int = 4) -> list[tuple[str, str]]:
    """(prompt, completion) pairs."""
    rng = random.Random(seed)
    texts = []
    for s in clip_seeds:
        seconds = clip_seconds(s)
        for f in (f for _ in range(clip_passes) for f in windows(seconds, rng)):  # each pass cuts anew
            texts.append((caption_prompt(f), caption_text(f)))
    for _ in range(num_random):
        if rng.random() < 0.65:
            f = random_facts(rng)
            texts.append((caption_prompt(f), caption_text(f)))
        else:
            a, q = random_aggregate(rng)
            texts.append((answer_prompt(a.context(), q), answer_text(a)))
    rng.shuffle(texts)
    return texts


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
