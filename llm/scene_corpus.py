"""The scene-lm corpus: (prompt, completion) pairs of captions and answers, generated
with fixed seeds from the synthetic range's per-second ground truth and from random
facts and aggregates over the default preset's lines, zones and classes."""

from __future__ import annotations

import random
from dataclasses import replace

from llm.facts import (CLASSES, PLURAL, Aggregate, SceneFacts, answer_prompt, answer_text, caption_prompt, caption_text,
                       window_text)

LINES = ("midblock", "crosswalk", "westgate", "eastgate")
ZONES = ("crosswalk", "north_sidewalk", "south_sidewalk", "road")

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
    span = window_text(t_from, t_to)
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


# Places a user's own apps name: the adapter learns to copy whatever line or zone the
# facts give, not the default preset's four.
OTHER_PLACES = ("gate", "door", "walkway", "north_entrance", "lane-2", "ramp", "bay3", "lobby", "exit_b")
DWELL_QUESTIONS = ["how long did {p} stay in {zone}{span}?", "how long did the {p} wait in {zone}{span}?",
                   "how much time did {p} spend in {zone}{span}?"]


def random_dwell(rng: random.Random) -> tuple[Aggregate, str]:
    c = rng.choice(CLASSES)
    zone = rng.choice(ZONES + OTHER_PLACES)
    t_from = rng.randint(0, 590) * 1000.0 if rng.random() < 0.6 else None
    t_to = None if t_from is None else t_from + rng.randint(10, 600) * 1000.0
    n = rng.choice([0, 1, 2, 3, 5, 8, 12])
    mean = rng.randint(1, 90) if n else None
    a = Aggregate("dwell", c, t_from, t_to, zone=zone, n=n, mean_s=mean,
                  max_s=(mean + rng.randint(0, 60)) if n else None)
    span = window_text(t_from, t_to)
    return a, rng.choice(DWELL_QUESTIONS).format(p=PLURAL[c], zone=zone, span=span)


def renamed(a: Aggregate, q: str, rng: random.Random) -> tuple[Aggregate, str]:
    """The same question about a place of another name (half the time)."""
    old = a.line or a.zone
    if old is None or rng.random() < 0.5:
        return a, q
    new = rng.choice(OTHER_PLACES)
    return replace(a, line=new if a.line else None, zone=new if a.zone else None), q.replace(old, new)


def chat_corpus(num_random: int, clip_seeds: list[int], seed: int) -> list[tuple[str, object, object]]:
    """(kind, facts or aggregate, question) samples for a chat model's adapter, from the
    same generators as scene-lm's corpus: captions of rendered clips' windows and of
    random facts, and answers to random questions of every kind `vigil ask` parses."""
    rng = random.Random(seed)
    out: list[tuple[str, object, object]] = []
    for s in clip_seeds:
        out += [("caption", f, None) for f in windows(clip_seconds(s), rng)]
    for _ in range(num_random):
        r = rng.random()
        if r < 0.45:
            out.append(("caption", random_facts(rng), None))
        elif r < 0.55:
            out.append(("answer", *random_dwell(rng)))
        else:
            out.append(("answer", *renamed(*random_aggregate(rng), rng)))
    rng.shuffle(out)
    return out
