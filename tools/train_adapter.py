"""Train the scene adapter of an instruct LLM: a LoRA that writes the captions and
answers of llm/facts.py from the prompts of llm/prompts.py (without worked examples).

    python -m tools.train_adapter [--llm smollm2-135m-instruct] [--steps N]

The base model is the checkpoint the model repository serves (a GGUF, loaded by
transformers' `gguf_file=` and dequantized to float32); the LoRA is peft's, saved in
peft's format (adapter_config.json, adapter_model.safetensors in float16) into
`configs/models/<llm>/<lora>/`, the folder model_config.yaml's `lora` names, beside a
train_log.json. Vigil merges it into the weights at load (llm/lora.py).

Samples come from llm/scene_corpus.py's chat corpus (clips the range renders from seeds
2000-2007 and random facts and questions), each one conversation whose prompt is
tokenized by Vigil's own tokenizer and chat template, exactly as served. The loss is
on the assistant's reply and its end-of-turn token only.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "configs" / "models"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def samples(tokenizer, corpus) -> list[tuple[list[int], int]]:
    """(ids, prompt length) per sample: the served prompt, then the reply and end of turn."""
    from llm.facts import answer_text, caption_text
    from llm.prompts import answer_request, caption_request

    eot = tokenizer.eos_ids[0]
    out = []
    for kind, what, question in corpus:
        if kind == "caption":
            prompt, reply = caption_request(tokenizer, what, tuned=True), caption_text(what)
        else:
            prompt, reply = answer_request(tokenizer, what, question, tuned=True), answer_text(what)
        out.append((prompt + tokenizer.encode_rendered(reply) + [eot], len(prompt)))
    return out


def batch_loss(model, batch: list[tuple[list[int], int]], pad: int) -> torch.Tensor:
    """Mean cross-entropy of the reply tokens; logits only where a reply token is
    predicted (the 49k-word head over every prompt position would cost a fifth of a step)."""
    width = max(len(ids) for ids, _ in batch)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, (seq, _) in enumerate(batch):
        ids[i, :len(seq)] = torch.tensor(seq)
        mask[i, :len(seq)] = 1
    rows = torch.tensor([i for i, (seq, p) in enumerate(batch) for _ in range(p - 1, len(seq) - 1)])
    cols = torch.tensor([j for seq, p in batch for j in range(p - 1, len(seq) - 1)])
    hidden = model.base_model.model.model(input_ids=ids, attention_mask=mask).last_hidden_state
    logits = model.base_model.model.lm_head(hidden[rows, cols])
    return torch.nn.functional.cross_entropy(logits, ids[rows, cols + 1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm", default="smollm2-135m-instruct", help="LLM of the model repository")
    parser.add_argument("--steps", type=int, default=320)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", type=Path, default=MODELS)
    args = parser.parse_args()
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from llm.scene_corpus import chat_corpus
    from llm.serving import llm_version
    from llm.tokenizer import Tokenizer
    from models.repository import ModelRepository

    torch.manual_seed(args.seed)
    started = time.time()
    repository = ModelRepository(args.models)
    out = repository.root / args.llm / repository.config(args.llm).adapters.get("scene", "scene-lora")
    gguf = next(llm_version(repository, args.llm).glob("*.gguf"))
    base = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = Tokenizer(gguf, eos_ids=(base.config.eos_token_id,))
    config = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.0, target_modules=TARGETS,
                        task_type="CAUSAL_LM")
    model = get_peft_model(base, config)
    n = args.steps * args.batch
    print(f"{args.llm}: rendering clips and writing {n} samples", file=sys.stderr, flush=True)
    data = samples(tokenizer, chat_corpus(n, clip_seeds=list(range(2000, 2008)), seed=args.seed))
    rng = random.Random(args.seed)
    rng.shuffle(data)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    warmup = max(1, args.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (
        1 + math.cos(math.pi * min(s, args.steps) / args.steps)))
    model.train()
    losses = []
    for step in range(args.steps):
        batch = data[(step * args.batch) % len(data):][:args.batch]
        loss = batch_loss(model, batch, pad=tokenizer.eos_ids[0])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(loss.item())
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step}/{args.steps} loss {sum(losses[-10:]) / len(losses[-10:]):.4f} "
                  f"({time.time() - started:.0f} s)", file=sys.stderr, flush=True)
    base_name = f"{args.llm}/{gguf.parent.name}/{gguf.name}"
    model.peft_config["default"].base_model_name_or_path = base_name  # not this machine's path
    model.save_pretrained(out, safe_serialization=True, save_embedding_layers=False)
    (out / "README.md").unlink(missing_ok=True)  # peft's model card template
    _half(out / "adapter_model.safetensors")
    log = {"base": base_name, "steps": args.steps, "batch": args.batch,
           "rank": args.rank, "lr": args.lr, "seed": args.seed, "samples": len(data),
           "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 4), "train_s": round(time.time() - started)}
    (out / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")
    print(json.dumps(log))
    return 0


def _half(path: Path) -> None:
    """Store the LoRA in float16: half the size, and a rank-8 update loses nothing that matters."""
    from safetensors.torch import load_file, save_file

    save_file({k: v.half() for k, v in load_file(str(path)).items()}, str(path))


if __name__ == "__main__":
    sys.exit(main())
