"""Scene facts as text: what the model reads, and the captions and answers it learns
to write from them. One module, so the training data and the server agree.

Facts of a time window: objects in view by class (at the window's end), line
crossings by line, class and direction, tracks entering and leaving by class.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

CLASSES = ("person", "car", "bike")
PLURAL = {"person": "people", "car": "cars", "bike": "bikes"}
SINGULAR = {v: k for k, v in PLURAL.items()}


@dataclass
class SceneFacts:
    stream: str
    t_start_ms: float
    t_end_ms: float
    objects: dict[str, int] = field(default_factory=dict)  # class -> in view at the end
    crossings: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # line -> class -> in/out
    entered: dict[str, int] = field(default_factory=dict)
    left: dict[str, int] = field(default_factory=dict)
    event_ids: list[int] = field(default_factory=list)


def noun(cls: str, n: int) -> str:
    return cls if n == 1 and cls != "person" else "person" if n == 1 else PLURAL[cls]


def clock(ms: float) -> str:
    """Stream time as m:ss (clips) or HH:MM:SS (live, epoch ms)."""
    s = int(ms // 1000)
    if s >= 86400:
        import time

        return time.strftime("%H:%M:%S", time.gmtime(s))
    return f"{s // 60}:{s % 60:02d}"


def window_text(t_from_ms: float | None, t_to_ms: float | None, words: tuple[str, str] = ("between", "and")) -> str:
    """A window as text, " between 0:05 and 0:20" (or " from ... to ..." with `words`); a
    window with one end is " after 0:40" or " before 0:40"; none is ""."""
    if t_from_ms is not None and t_to_ms is not None:
        return f" {words[0]} {clock(t_from_ms)} {words[1]} {clock(t_to_ms)}"
    if t_from_ms is not None:
        return f" after {clock(t_from_ms)}"
    if t_to_ms is not None:
        return f" before {clock(t_to_ms)}"
    return ""


def facts_text(f: SceneFacts) -> str:
    objects = ", ".join(f"{c} {f.objects.get(c, 0)}" for c in CLASSES)
    cross = "; ".join(f"{line} {c} {d} {n}" for line, by in sorted(f.crossings.items())
                      for c, dirs in sorted(by.items()) for d, n in sorted(dirs.items()) if n) or "none"
    enter = ", ".join(f"{c} {n}" for c, n in sorted(f.entered.items()) if n) or "none"
    leave = ", ".join(f"{c} {n}" for c, n in sorted(f.left.items()) if n) or "none"
    return f"view: {objects} | cross: {cross} | enter: {enter} | leave: {leave}"


def caption_text(f: SceneFacts) -> str:
    """The caption the model learns to write (and the reference it is checked against)."""
    seen = [(c, f.objects.get(c, 0)) for c in CLASSES if f.objects.get(c, 0)]
    if seen:
        parts = [f"{n} {noun(c, n)}" for c, n in seen]
        view = (", ".join(parts[:-1]) + " and " + parts[-1]) if len(parts) > 1 else parts[0]
        out = [f"{view} in view."]
    else:
        out = ["nothing in view."]
    for line, by in sorted(f.crossings.items()):
        for c, dirs in sorted(by.items()):
            for d, n in sorted(dirs.items()):
                if n:
                    out.append(f"{n} {noun(c, n)} crossed {line} {d}.")
    for verb, counts in (("arrived", f.entered), ("left", f.left)):
        for c, n in sorted(counts.items()):
            if n:
                out.append(f"{n} {noun(c, n)} {verb}.")
    return " ".join(out)


CAPTION_COUNT = re.compile(r"(\d+) (people|person|cars?|bikes?)(?=[ ,]| in view)")


def caption_counts(caption: str) -> dict[str, int]:
    """Objects in view named by a caption: {class: n} (the first sentence)."""
    first = caption.split(".")[0]
    out = {}
    for n, word in CAPTION_COUNT.findall(first):
        cls = SINGULAR.get(word, word.rstrip("s") if word != "person" else "person")
        out[cls] = int(n)
    return out


def caption_agrees(caption: str, f: SceneFacts) -> bool:
    """Whether a caption names the classes in view with their counts (its first sentence)
    and states no figure, line or direction the facts do not give."""
    if caption_counts(caption) != {c: n for c, n in f.objects.items() if n}:
        return False
    reference = caption_text(f)
    said, given = Counter(re.findall(r"\d+", caption)), Counter(re.findall(r"\d+", reference))
    if not said <= given:
        return False
    for line, way in re.findall(r"crossed ([A-Za-z0-9_.-]+)(?: (in|out)\b)?", caption):
        if not any(line == known and (not way or dirs.get(way)) for known, by in f.crossings.items()
                   for dirs in by.values()):
            return False
    return True


def caption_prompt(f: SceneFacts) -> str:
    return f"facts: {facts_text(f)}\ncaption:"



def answer_prompt(context: str, question: str) -> str:
    return f"context: {context}\nquestion: {question}\nanswer:"


@dataclass(frozen=True)
class Aggregate:
    """An exact figure from the event store that answers one question."""

    kind: str  # "count" | "first" | "last" | "zone" | "dwell"
    cls: str
    t_from_ms: float | None = None
    t_to_ms: float | None = None
    line: str | None = None
    zone: str | None = None
    direction: str | None = None  # in | out | None (both)
    n: int = 0
    t_ms: float | None = None  # first / last seen
    mean_s: float | None = None  # dwell: the stays' mean and longest, in whole seconds
    max_s: float | None = None

    def context(self) -> str:
        span = window_text(self.t_from_ms, self.t_to_ms, ("from", "to"))
        if self.kind == "count":
            d = self.direction or "any"
            return f"count {self.cls} line {self.line} direction {d}{span} = {self.n}"
        if self.kind in ("first", "last"):
            t = clock(self.t_ms) if self.t_ms is not None else "never"
            return f"{self.kind} {self.cls}{span} = {t}"
        if self.kind == "dwell":
            return f"dwell {self.zone} {self.cls}{span} stays = {self.n} mean = {self.mean_s} s max = {self.max_s} s"
        return f"zone {self.zone} {self.cls}{span} present = {self.n}"


def answer_text(a: Aggregate) -> str:
    """The answer the model learns to write from an aggregate's context."""
    span = window_text(a.t_from_ms, a.t_to_ms)
    if a.kind == "count":
        way = f" {a.direction}" if a.direction else ""
        return f"{a.n} {noun(a.cls, a.n)} crossed {a.line}{way}{span}."
    if a.kind == "first":
        return f"the first {a.cls} appeared at {clock(a.t_ms)}." if a.t_ms is not None else f"no {a.cls} appeared{span}."
    if a.kind == "last":
        return f"the last {a.cls} was seen at {clock(a.t_ms)}." if a.t_ms is not None else f"no {a.cls} appeared{span}."
    if a.kind == "dwell":
        if not a.n:
            return f"no {a.cls} left {a.zone}{span}."
        return (f"{a.n} {noun(a.cls, a.n)} left {a.zone}{span} after {a.mean_s} s on average, "
                f"the longest after {a.max_s} s.")
    if a.n:
        return f"yes, {a.n} {noun(a.cls, a.n)} {'was' if a.n == 1 else 'were'} in {a.zone}{span}."
    return f"no, no {a.cls} was in {a.zone}{span}."
