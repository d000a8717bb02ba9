"""Events an app emits: track_start, track_end, line_cross, zone_enter, zone_exit,
zone_dwell (a track's stay in a zone reached the app's `loiter_s`);
class_change when a classifier's best class changes (track_id -1, class the new one);
and model_selected when adaptive selection moves an app to another model version
(track_id -1, class "")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

EVENT_TYPES = ("track_start", "track_end", "line_cross", "zone_enter", "zone_exit", "zone_dwell", "class_change",
               "model_selected")


@dataclass(frozen=True)
class Event:
    type: str
    app: str
    stream: str
    t_ms: float  # stream time
    track_id: int
    cls: str
    # line+direction, zone, duration_ms, dwell_ms; entered_ms / left_ms (a zone_enter's /
    # zone_exit's first frame seen in / out, or its last frame seen when a track ends
    # inside, or the app's last frame when its frames end with the track kept unseen;
    # t_ms is the frame that settled it, or the track's last when it ended);
    # box (xyxy pixels: where the object was on the event's frame, or last seen for
    # track_end; none on the zone events said with a track_end); snapshot (its stored
    # picture, runtime/snapshots.py)
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.type not in EVENT_TYPES:
            raise ValueError(f"event type must be one of {EVENT_TYPES}; was {self.type!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "app": self.app, "stream": self.stream, "t_ms": round(self.t_ms, 3),
                "track_id": self.track_id, "class": self.cls, **self.data}
