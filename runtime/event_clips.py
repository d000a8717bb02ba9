"""Which stretch of video shows an event, and `vigil run --clips`: each event's clip
cut from the video file being analysed (streams/recording.py), written under
OUT/clips and named in the event (`clip`). A window is widened to whole seconds of
the file, and events with the same one (an object's track_start and its zone_enter,
the objects that came in together) share one clip."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from core.events import Event
from streams.recording import ClipError, Segment, cut_clip


def event_window(event_type: str, t_ms: float, data: dict, pre_s: float, post_s: float,
                 max_s: float) -> tuple[float, float]:
    """Stream time from `pre_s` before the event (before its track began, for a
    track_end, which says how long the track lasted) to `post_s` after it, at most
    `max_s` long (the end kept)."""
    lasted = float(data.get("duration_ms") or 0.0) if event_type == "track_end" else 0.0
    end = t_ms + post_s * 1000.0
    return max(t_ms - lasted - pre_s * 1000.0, end - max_s * 1000.0), end


class FileClips:
    def __init__(self, video: Path, folder: Path, pre_s: float = 5.0, post_s: float = 5.0,
                 max_s: float = 600.0) -> None:
        self.source = [Segment(video, 0.0, None, video.stat().st_size)]  # a file's own times are stream times
        self.folder = folder
        self.pre_s, self.post_s, self.max_s = pre_s, post_s, max_s
        self.written: dict[tuple[int, int], str | None] = {}  # (start s, end s) -> its path
        folder.mkdir(parents=True, exist_ok=True)

    def attach(self, events: list[Event]) -> list[Event]:
        """`events`, each with `clip` (its path under the output folder) where footage
        exists for its window."""
        out = []
        for e in events:
            start, end = event_window(e.type, e.t_ms, e.data, self.pre_s, self.post_s, self.max_s)
            key = (max(0, math.floor(start / 1000.0)), math.ceil(end / 1000.0))
            if key not in self.written:
                self.written[key] = self._write(*key)
            name = self.written[key]
            out.append(e if name is None else replace(e, data={**e.data, "clip": name}))
        return out

    def _write(self, start_s: int, end_s: int) -> str | None:
        try:
            data = cut_clip(self.source, start_s * 1000.0, end_s * 1000.0)
        except ClipError:
            return None
        (self.folder / f"{start_s}-{end_s}s.mp4").write_bytes(data)
        return f"{self.folder.name}/{start_s}-{end_s}s.mp4"
