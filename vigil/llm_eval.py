"""`vigil eval llm`: how well an LLM writes Vigil's answers and captions.

- Answers: questions about the bundled clips (counts across a line in a window, first
  and last appearance, how long in a zone), asked through `vigil ask`'s path (the clip
  run through the default apps once, the exact aggregate from its events). An answer
  counts when the model wrote it (`grounding: model`: its figures and words agree with
  the aggregate) and, apart, when its figure agrees with the renderer's truth (which
  also measures the detector).
- Captions: windows of clips rendered from seeds no training used, captioned from
  their true facts, and random facts from a seed of their own; a caption counts when its
  first sentence names the classes in view with their counts and it misstates nothing
  (llm/facts.py's `caption_agrees`, the check the server makes), and apart when it is
  word for word llm/facts.py's caption.

Each LLM is measured as served (its LoRA adapter merged, asked without worked
examples) and, when it has an adapter, without it (with worked examples).
"""

from __future__ import annotations

import random
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from llm.engine import EngineConfig
from llm.facts import SceneFacts, caption_agrees, caption_text
from llm.prompts import caption_request
from llm.sampling import SamplingParams
from llm.serving import ServedModel, load_llm

if TYPE_CHECKING:
    from vigil.tracking_eval import Clip

CAPTION_SEEDS = (9100, 9101, 9102, 9103)  # the scene corpus and the adapter train on seeds 2000-2015
RANDOM_WINDOWS = 40
QUESTION_SEED = 2


def clip_questions(truth: dict, rng: random.Random) -> list[tuple[str, str | None]]:
    """(question, the true answer's key figure, or None where the truth gives none that
    the apps' events can match) about a rendered clip, from its ground truth."""
    out: list[tuple[str, str | None]] = []
    dur = truth["duration_s"]
    for _ in range(12):
        line = rng.choice(list(truth["lines"]))
        cls = rng.choice(["car", "person"])
        a = rng.randint(0, int(dur) - 8)
        b = a + rng.randint(5, int(dur) - a)
        n = sum(1 for c in truth["crossings"] if c["line"] == line and c["class"] == cls
                and a * 1000 <= c["t_ms"] < b * 1000)
        word = {"car": "cars", "person": "people"}[cls]
        out.append((f"how many {word} crossed {line} between 0:{a:02d} and 0:{b:02d}?", str(n)))
    for cls in ("car", "bike", "person"):
        starts = [t["first_frame"] / truth["fps"] for t in truth["tracks"].values() if t["class"] == cls]
        ends = [t["last_frame"] / truth["fps"] for t in truth["tracks"].values() if t["class"] == cls]
        if starts:
            out.append((f"when did the first {cls} appear?", f"{int(min(starts)) // 60}:{int(min(starts)) % 60:02d}"))
            out.append((f"when was the last {cls} seen?", f"{int(max(ends)) // 60}:{int(max(ends)) % 60:02d}"))
    # a stay's length depends on where the tracker's box puts the foot point: no true figure to hold it to
    out += [(f"how long did people stay in {zone}?", None) for zone in sorted(truth["zones"])[:2]]
    return out


def close_figure(got: str, expected: str) -> bool:
    """Counts exactly; times to the second, allowing the one second a track takes to be
    confirmed (three or four detections) across a second boundary."""
    if ":" not in expected:
        return got == expected
    if ":" not in got:
        return False
    seconds = [int(t.split(":")[0]) * 60 + int(t.split(":")[1]) for t in (got, expected)]
    return abs(seconds[0] - seconds[1]) <= 1


def held_out_facts(seeds=CAPTION_SEEDS, random_windows: int = 0) -> list[SceneFacts]:
    """Windows of the clips rendered from `seeds`, and `random_windows` random facts (with
    arrivals and departures, which a clip's windows lack) drawn from a seed of their own."""
    from llm.scene_corpus import clip_facts, random_facts

    rng = random.Random(1)
    windows = [f for s in seeds for f in clip_facts(s, rng)]
    rng = random.Random(seeds[0])
    return windows + [random_facts(rng) for _ in range(random_windows)]


class Stepped:
    """An engine stepped by hand to the end of each request (ask_offline steps only the
    engines it owns)."""

    def __init__(self, served: ServedModel) -> None:
        self.served = served
        self.tokenizer = served.tokenizer
        self.tuned = served.tuned

    def add_request(self, *args, **kwargs):
        handle = self.served.add_request(*args, **kwargs)
        engine = self.served.engine
        while engine.has_work():
            engine.step()
        return handle


def eval_answers(served: ServedModel, clips: list["Clip"], models: Path, out: Path, device: str,
                 log: Callable[[str], None]) -> dict:
    from vigil.ask import ask_offline

    asked = right = written = written_right = 0
    misses = []
    for clip in clips:
        for question, expected in clip_questions(clip.truth, random.Random(QUESTION_SEED)):
            got = ask_offline(question, str(clip.video), out, models, device, log=log, engine=Stepped(served))
            figure = re.search(r"\d+:\d\d|\d+", got["answer"])
            ok = expected is None or (figure is not None and close_figure(figure.group(0), expected))
            by_model = got["grounding"] == "model"
            asked += 1
            right += ok
            written += by_model
            written_right += ok and by_model
            if not by_model:
                misses.append({"question": question, "aggregate": got["aggregate"], "answer": got["answer"]})
    return {"questions": asked, "written_by_model": written, "right": right, "written_and_right": written_right,
            "written_share": round(written / max(1, asked), 3), "not_written": misses[:20]}


def eval_captions(served: ServedModel, facts: list[SceneFacts]) -> dict:
    params = SamplingParams(max_tokens=96, stop=("\n",))
    handles = [served.add_request(caption_request(served.tokenizer, f, served.tuned), params) for f in facts]
    while served.engine.has_work():
        served.engine.step()
    captions = [h.result(5).text.strip() for h in handles]
    agree = [caption_agrees(c, f) for f, c in zip(facts, captions)]
    exact = [c == caption_text(f) for f, c in zip(facts, captions)]
    wrong = [{"facts": caption_text(f), "caption": c} for f, c, ok in zip(facts, captions, agree) if not ok]
    return {"windows": len(facts), "agreeing": sum(agree), "word_for_word": sum(exact),
            "agreeing_share": round(sum(agree) / max(1, len(facts)), 3), "wrong": wrong[:10]}


def eval_llm(models: Path, name: str, device: str, clips: list["Clip"], log: Callable[[str], None]) -> dict:
    """LLM `name` through each of its adapters, then the base model alone, by served id."""
    facts = held_out_facts(CAPTION_SEEDS, RANDOM_WINDOWS)
    results = {}
    try:
        engine = load_llm(models, name, device, EngineConfig(num_blocks=1024, block_size=16))
    except FileNotFoundError as exc:
        raise ValueError(f"LLM {name}: {exc}") from None
    try:
        with tempfile.TemporaryDirectory(prefix="vigil-eval-llm-") as out:
            for adapter in (*engine.adapters.names(), None):
                served = ServedModel(engine, adapter)
                log(f"{served.id}: captions of {len(facts)} held-out windows ...")
                captions = eval_captions(served, facts)
                log(f"{served.id}: {captions['agreeing']}/{captions['windows']} captions agree with their facts")
                answers = eval_answers(served, clips, models, Path(out), device, log)
                log(f"{served.id}: {answers['written_by_model']}/{answers['questions']} answers written by the "
                    "model")
                results[served.id] = {"lora": adapter, "captions": captions, "answers": answers}
    finally:
        engine.close()
    return {"llm": name, "caption_seeds": list(CAPTION_SEEDS), "clips": [c.video.name for c in clips],
            "results": results}
