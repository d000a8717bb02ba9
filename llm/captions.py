"""Scene facts of a stream, gathered from its apps' results, one window at a time, to
be captioned by the LLM at low priority.

Objects in view: per class, the confirmed tracks in the window's last analysed frame
(each class counted by the app that watches it). Crossings, arrivals and departures:
the apps' line_cross, track_start and track_end events in the window (two apps
watching the same class would count its tracks twice; the built-in apps do not overlap).
"""

from __future__ import annotations

from llm.facts import CLASSES, SceneFacts


class FactsCollector:
    def __init__(self, stream: str, every_ms: float) -> None:
        if every_ms <= 0:
            raise ValueError(f"caption_every_s must be > 0; was {every_ms / 1000}")
        self.stream = stream
        self.every_ms = every_ms
        self._facts: SceneFacts | None = None
        self._seen: set[tuple] = set()
        self._view: dict[str, dict[str, int]] = {}  # app -> class -> in view

    def observe(self, t_ms: float, events: list[dict], in_view: dict[str, dict[str, int]]) -> SceneFacts | None:
        """One block's events and, per app, the classes in view at its last frame.
        Returns the finished window's facts when this block starts a new one."""
        done = None
        # `t_ms` is the block's last frame; its events come from every frame of it
        first_ms = min([t_ms] + [e["t_ms"] for e in events])
        if self._facts is None:
            self._facts = SceneFacts(self.stream, first_ms, first_ms + self.every_ms)
        elif t_ms >= self._facts.t_end_ms:
            done = self._close()
            start = done.t_end_ms if first_ms - done.t_end_ms < self.every_ms else first_ms
            self._facts = SceneFacts(self.stream, start, start + self.every_ms)
        self._view.update(in_view)
        for e in events:
            if e.get("class") not in CLASSES:
                continue
            # a block that straddles the end of a window: its earlier events are that window's
            f = done if done is not None and e["t_ms"] < done.t_end_ms else self._facts
            key = (e.get("app"), e["type"], e["track_id"], e.get("line"), e.get("direction"), e["t_ms"])
            if key in self._seen:
                continue
            self._seen.add(key)
            if e["type"] == "line_cross":
                by = f.crossings.setdefault(e["line"], {}).setdefault(e["class"], {"in": 0, "out": 0})
                by[e["direction"]] += 1
            elif e["type"] == "track_start":
                f.entered[e["class"]] = f.entered.get(e["class"], 0) + 1
            elif e["type"] == "track_end":
                f.left[e["class"]] = f.left.get(e["class"], 0) + 1
            else:
                continue
            if e.get("id") is not None:
                f.event_ids.append(e["id"])
        return done

    def _close(self) -> SceneFacts:
        f = self._facts
        for per_class in self._view.values():
            for c, n in per_class.items():
                f.objects[c] = max(f.objects.get(c, 0), n)
        self._seen = set()
        return f
