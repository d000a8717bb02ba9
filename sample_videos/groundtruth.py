"""Ground truth of a rendered clip: line crossings, zone membership, per-second facts.

Deliberately independent of `apps/`: the truth an app is scored against must not share
code with the app. Conventions (also written into every `.gt.json`):
- boxes are pixel `xyxy`, clipped to the frame; `visible` is the fraction of the
  object's own pixels not hidden by nearer objects or the frame edge;
- lines are crossed by the object's body centre (its ground position, half its nominal
  height up: near the box centre, without the swing of limbs); zones contain an
  object when its bottom centre (foot point) is inside;
- direction: see `sample_videos.preset` ("in" = towards B - A turned 90 degrees
  clockwise on screen).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sample_videos.preset import CLASSES, Point, Preset

CONVENTIONS = {
    "coordinates": "pixels, origin top-left; boxes are xyxy clipped to the frame; "
                   "line and zone points are normalized to the frame (0..1)",
    "line_anchor": "the object's body centre: its ground position, half its nominal height up "
                   "(close to the box centre, but it does not swing with arms and legs)",
    "zone_anchor": "bottom centre (foot point)",
    "direction": "a line runs from its first point A to its second point B; a crossing is "
                 "'in' when the anchor moves to the side that B-A turned 90 degrees "
                 "clockwise on screen points to (for a line drawn bottom to top, moving "
                 "right is 'in'), and 'out' otherwise",
    "visible": "fraction of the object's pixels not hidden by nearer objects or the frame edge",
    "facts": "per whole second: objects seen (visible >= 0.3) at the second's first frame, "
             "by class and zone; crossings, tracks entering and leaving during the second",
    "stays": "each track's stays in each zone (foot point, on the frames it is seen: visible >= 0.3): from "
             "the first frame seen inside to the first seen outside, or to the last seen when it ends inside",
}
MIN_VISIBLE_FOR_FACTS = 0.3


@dataclass(frozen=True)
class Crossing:
    line: str
    track_id: int
    cls: str
    direction: str  # "in" | "out"
    frame: int
    t_ms: float


def side(a: Point, b: Point, p: Point) -> float:
    """> 0 on the 'in' side of A->B (B-A turned clockwise on screen), < 0 on the other."""
    # With y pointing down, B-A turned 90 degrees clockwise on screen is (-(by-ay), bx-ax).
    nx, ny = -(b[1] - a[1]), b[0] - a[0]
    return (p[0] - a[0]) * nx + (p[1] - a[1]) * ny


def segment_hit(a: Point, b: Point, p: Point, q: Point) -> bool:
    """Does the move p->q cross the segment A-B (within its ends)?"""
    s_p, s_q = side(a, b, p), side(a, b, q)
    if s_p == 0 or (s_p > 0) == (s_q > 0):
        return False
    # Where the move meets the line, projected on A-B, must lie within [0, 1].
    t = s_p / (s_p - s_q)
    x, y = p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1])
    abx, aby = b[0] - a[0], b[1] - a[1]
    u = ((x - a[0]) * abx + (y - a[1]) * aby) / (abx * abx + aby * aby)
    return 0.0 <= u <= 1.0


def inside(polygon: tuple[Point, ...], p: Point) -> bool:
    """Even-odd rule point-in-polygon."""
    result = False
    n = len(polygon)
    for i in range(n):
        (x0, y0), (x1, y1) = polygon[i], polygon[(i + 1) % n]
        if (y0 > p[1]) != (y1 > p[1]):
            x_cross = x0 + (p[1] - y0) * (x1 - x0) / (y1 - y0)
            if p[0] < x_cross:
                result = not result
    return result


class Truth:
    """Accumulates per-frame objects into the `.gt.json` document."""

    def __init__(self, preset: Preset, width: int, height: int, fps: float) -> None:
        self.preset, self.width, self.height, self.fps = preset, width, height, fps
        self.frames: list[dict] = []
        self.crossings: list[Crossing] = []
        self._last_anchor: dict[int, Point] = {}
        self.tracks: dict[int, dict] = {}

    def _norm(self, x: float, y: float) -> Point:
        return (x / self.width, y / self.height)

    def add_frame(self, index: int, t_ms: float, objects: list[dict]) -> None:
        """objects: dicts with track_id, class, xyxy (clipped), full_xyxy, anchor, visible."""
        for obj in objects:
            centre = self._norm(*obj["anchor"])
            previous = self._last_anchor.get(obj["track_id"])
            if previous is not None:
                for name, (a, b) in self.preset.lines.items():
                    if segment_hit(a, b, previous, centre):
                        direction = "in" if side(a, b, centre) > 0 else "out"
                        self.crossings.append(Crossing(name, obj["track_id"], obj["class"],
                                                       direction, index, t_ms))
            self._last_anchor[obj["track_id"]] = centre
            if obj["visible"] > 0:
                track = self.tracks.setdefault(obj["track_id"], {"class": obj["class"], "first_frame": index})
                track["last_frame"] = index
        self.frames.append({"frame": index, "t_ms": round(t_ms, 3), "objects": [
            {"track_id": o["track_id"], "class": o["class"],
             "xyxy": [round(v, 1) for v in o["xyxy"]], "visible": round(o["visible"], 3)}
            for o in objects if o["visible"] > 0]})
        # remember foot points for zone facts
        self.frames[-1]["_feet"] = {o["track_id"]: self._norm((o["full_xyxy"][0] + o["full_xyxy"][2]) / 2,
                                                              o["full_xyxy"][3]) for o in objects}

    def line_counts(self) -> dict:
        counts: dict = {}
        for name, (a, b) in self.preset.lines.items():
            counts[name] = {"points": [list(a), list(b)], "in": 0, "out": 0,
                            "by_class": {c: {"in": 0, "out": 0} for c in CLASSES}}
        for c in self.crossings:
            counts[c.line][c.direction] += 1
            counts[c.line]["by_class"][c.cls][c.direction] += 1
        return counts

    def facts(self) -> list[dict]:
        per_second: list[dict] = []
        num_seconds = int(len(self.frames) / self.fps)
        for second in range(num_seconds):
            first = self.frames[int(round(second * self.fps))]
            objects: dict = {c: defaultdict(int) for c in CLASSES}
            for obj in first["objects"]:
                if obj["visible"] < MIN_VISIBLE_FOR_FACTS:
                    continue
                by_zone = objects[obj["class"]]
                by_zone["total"] += 1
                foot = first["_feet"][obj["track_id"]]
                for zone, polygon in self.preset.zones.items():
                    if inside(polygon, foot):
                        by_zone[zone] += 1
            crossings: dict = defaultdict(lambda: defaultdict(lambda: {"in": 0, "out": 0}))
            for c in self.crossings:
                if second * 1000 <= c.t_ms < (second + 1) * 1000:
                    crossings[c.line][c.cls][c.direction] += 1
            entered = sorted(t for t, info in self.tracks.items()
                             if second <= self.frames[info["first_frame"]]["t_ms"] / 1000 < second + 1)
            left = sorted(t for t, info in self.tracks.items()
                          if second <= self.frames[info["last_frame"]]["t_ms"] / 1000 < second + 1
                          and info["last_frame"] < len(self.frames) - 1)
            per_second.append({"t_s": second,
                               "objects": {c: dict(z) for c, z in objects.items() if z},
                               "crossings": {line: {c: dict(d) for c, d in by_cls.items()}
                                             for line, by_cls in crossings.items()},
                               "entered": entered, "left": left})
        return per_second

    def stays(self) -> list[dict]:
        """Every track's stays in every zone, by its foot point on the frames it is
        seen (visible >= MIN_VISIBLE_FOR_FACTS: a sliver behind a car is not), measured
        as the apps measure dwell: from the first frame it is seen inside to the first
        it is seen outside, or to the last frame it is seen when it ends inside
        (`ended_inside`)."""
        open_stays: dict[tuple[int, str], dict] = {}
        last_seen: dict[int, dict] = {}
        out = []
        for f in self.frames:
            for obj in f["objects"]:
                if obj["visible"] < MIN_VISIBLE_FOR_FACTS:
                    continue
                last_seen[obj["track_id"]] = f
                foot = f["_feet"][obj["track_id"]]
                for zone, polygon in self.preset.zones.items():
                    key = (obj["track_id"], zone)
                    if inside(polygon, foot):
                        open_stays.setdefault(key, {"track_id": obj["track_id"], "class": obj["class"], "zone": zone,
                                                    "enter_frame": f["frame"], "enter_ms": f["t_ms"]})
                    elif key in open_stays:
                        out.append(_closed(open_stays.pop(key), f, ended_inside=False))
        for (track_id, _), stay in open_stays.items():
            out.append(_closed(stay, last_seen[track_id], ended_inside=True))
        return sorted(out, key=lambda x: (x["enter_frame"], x["track_id"], x["zone"]))

    def document(self, **header) -> dict:
        frames = [{k: v for k, v in f.items() if not k.startswith("_")} for f in self.frames]
        return {
            "version": 1,
            **header,
            "classes": list(CLASSES),
            "conventions": CONVENTIONS,
            "lines": self.line_counts(),
            "zones": {name: [list(p) for p in poly] for name, poly in self.preset.zones.items()},
            "crossings": [{"line": c.line, "track_id": c.track_id, "class": c.cls,
                           "direction": c.direction, "frame": c.frame, "t_ms": round(c.t_ms, 3)}
                          for c in self.crossings],
            "tracks": {str(k): v for k, v in sorted(self.tracks.items())},
            "facts": self.facts(),
            "stays": self.stays(),
            "frames": frames,
        }


def _closed(stay: dict, frame: dict, ended_inside: bool) -> dict:
    return {**stay, "exit_frame": frame["frame"], "exit_ms": frame["t_ms"],
            "dwell_ms": round(frame["t_ms"] - stay["enter_ms"], 3), "ended_inside": ended_inside}
