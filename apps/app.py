"""One app on one stream: sampled frames in, detections from the engine, events out.

The app never runs a model itself, nor picks its frames: the stream's runner samples
frames at the app's rate, gets their detections (from a detector or the engine's
batches) and hands them to `observe`, which tracks them and applies lines and zones.

Per frame: keep detections above `min_confidence` (or their class's `min_score`) that
pass their class's size and shape filters and lie outside the object masks -> track all
classes, the boxes of one class group on one object as one (apps/tracking.py; a
stationary object that comes back keeps its track, apps/stationary.py; one
that went out across the border is gone; with `tracker.appearance`, by each box's
colour too, measured on the frame's pixels, apps/appearance.py) ->
each track's class is its majority vote -> count only the app's classes on lines (those
that move) and zones, by where they stand: a box the border cuts is first made whole
to its track's size (apps/border.py); events carry the box as seen.

A classifier's answer (`Classes`) is kept per frame as the app's `top_k` best classes;
its best class, once at `min_confidence`, is the frame's class: a change of it is a
`class_change` event, and the summary counts the frames of each.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from apps.appearance import colours as box_colours
from apps.border import Borders, Size, learned_size, leaving_view, touching, whole_box
from apps.counting import LineCounter, ZoneChange, ZoneMonitor
from apps.filters import DetectionFilter
from apps.spec import AppSpec
from apps.stationary import StationaryKeeper, parked_for_s
from apps.tracking import Tracker, first_of_group
from core.classes import Classes
from core.detections import Detections
from core.events import Event
from core.frames import FrameBlock


@dataclass
class TrackState:
    class_id: int
    first_ms: float
    last_ms: float
    started: bool = False  # track_start emitted (the track is of one of the app's classes)
    box: list[float] | None = None  # where it was last seen, xyxy pixels
    leaving: bool = False  # last seen on the frame's border, moving out across it
    border_box: list[float] | None = None  # its first box at the borders it touches now (see leaving_view)
    size: Size = (None, None)  # (width, height), learned from its boxes clear of the border

    def see(self, seen: list[float], class_id: int, t_ms: float, frame_size: tuple[int, int]) -> list[float]:
        """Follow the track to its box `seen` (xyxy, at the tracker's precision) on the
        frame at `t_ms`; returns where its object stands: that box made whole (whole_box)."""
        box = [round(v, 1) for v in seen]
        borders = touching(box, frame_size)
        self._follow_border(box, borders, frame_size)
        self.size = learned_size(self.size, box, borders)
        # where it stands is placed at the tracker's own precision, not at the events'
        # (`box`), and so which borders it touches is too: a tenth of a pixel moves a
        # foot across a zone's edge a frame sooner or later
        whole = whole_box(seen, self.size, touching(seen, frame_size))
        self.class_id, self.last_ms, self.box = class_id, t_ms, box
        return whole

    def _follow_border(self, box: list[float], borders: Borders, frame_size: tuple[int, int]) -> None:
        """`borders`: those `box` touches; `self.box` is still the box before."""
        if not any(borders):
            self.border_box, self.leaving = None, False
            return
        if self.border_box is None or touching(self.border_box, frame_size) != borders:
            # on its first frame at these borders: the box before; from the next on, the
            # first box at them, which then touches them too and is kept
            self.border_box = self.box or box
        self.leaving = leaving_view(self.border_box, box, frame_size)


def _entry(change: ZoneChange) -> dict:
    """A zone_enter's own fields: when the track was first seen inside."""
    return {"entered_ms": round(change.at_ms, 3)}


def _exit(change: ZoneChange) -> dict:
    """A zone_exit's own fields: when the track was counted out (first seen outside, or
    last seen, when it ended inside, or the app's last frame, when the app's frames ended
    with the track kept unseen), and its stay."""
    return {"left_ms": round(change.at_ms, 3), "dwell_ms": round(change.dwell_ms, 3)}


@dataclass
class FrameResult:
    frame_id: int
    pts_ms: float
    tracked: Detections  # confirmed tracks of the app's classes
    detections: Detections = field(default_factory=Detections.empty)  # the model's, before the app's filters
    classes: list[tuple[str, float]] = field(default_factory=list)  # a classifier's best, best first


@dataclass
class App:
    spec: AppSpec
    stream_id: str
    frame_size: tuple[int, int]  # (width, height) in pixels
    stream_fps: float
    labels: tuple[str, ...]  # the detector's class names, indexed by class_id
    tracker: Tracker = field(init=False)
    lines: list[LineCounter] = field(init=False)
    zones: list[ZoneMonitor] = field(init=False)
    tracks: dict[int, TrackState] = field(default_factory=dict)
    num_frames: int = 0
    last_frame_ms: float | None = None  # the stream time of the app's latest frame
    num_tracks: int = 0  # confirmed tracks of the app's classes
    num_detections: int = 0  # detections of the app's classes at its min_confidence
    frame_class: str | None = None  # a classifier's best class at min_confidence, as last changed
    class_frames: dict[str, int] = field(default_factory=dict)  # frames of each best class
    last_classes: list[tuple[str, float]] = field(default_factory=list)
    filter: DetectionFilter = field(init=False)
    keeper: StationaryKeeper = field(init=False)

    def __post_init__(self) -> None:
        spec = self.spec
        self.filter = DetectionFilter(spec, self.labels, self.frame_size)
        self.keeper = StationaryKeeper(spec.stationary_s, parked_for_s(spec.stationary_s))
        fps = min(spec.fps, self.stream_fps) if spec.fps else self.stream_fps
        self.tracker = Tracker(spec.tracker, fps=fps, frame_size=self.frame_size, labels=self.labels)
        self._same_class = first_of_group(self.tracker.group_of, len(self.labels))
        self.lines, self.zones = [], []
        self._build_parts(spec)
        wanted = spec.classes if spec.classes is not None else list(self.labels)
        self._wanted = np.array([self.labels.index(c) for c in wanted], np.int64)
        self._loiterers = None if spec.loiter_classes is None else \
            np.array([self.labels.index(c) for c in spec.loiter_classes], np.int64)

    def _build_parts(self, spec: AppSpec) -> None:
        """The spec's lines and zones, in pixels. One already here whose geometry is
        unchanged keeps its counts (a reconfigure); a new or moved one starts from zero."""
        scale = np.array(self.frame_size, np.float64)
        lines, zones = {c.name: c for c in self.lines}, {z.name: z for z in self.zones}
        self.lines = []
        for name, (a, b) in spec.lines.items():
            a, b = np.array(a) * scale, np.array(b) * scale
            old = lines.get(name)
            keep = old is not None and np.allclose(old.a, a) and np.allclose(old.b, b)
            self.lines.append(old if keep else LineCounter(name, a, b))
        self.zones = []
        for name, poly in spec.zones.items():
            polygon = np.array(poly, np.float64) * scale
            old = zones.get(name)
            keep = old is not None and old.polygon.shape == polygon.shape and np.allclose(old.polygon, polygon)
            zone = old if keep else ZoneMonitor(name, polygon)
            zone.inertia = spec.zone_inertia
            self.zones.append(zone)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def num_found(self) -> int:
        """What the model found for the app: detections of its classes, or frames a
        classifier put in one of them, at min_confidence."""
        return self.num_detections + sum(self.class_frames.values())

    def reconfigure(self, spec: AppSpec) -> None:
        """Apply a changed spec while running (SLO, fps, priority, lines, zones,
        zone_inertia, loiter_s, stationary_s): tracks go on; a line or zone whose geometry
        is unchanged keeps its counts, a new or moved one starts from zero."""
        if spec.name != self.spec.name or spec.detector != self.spec.detector or spec.classes != self.spec.classes:
            raise ValueError("name, detector and classes cannot change while running; delete and add the app")
        self._build_parts(spec)
        self.filter = DetectionFilter(spec, self.labels, self.frame_size)
        if spec.stationary_s != self.spec.stationary_s:  # still spells go on; what is parked stays, when on
            self.keeper.stationary_s, self.keeper.park_s = spec.stationary_s, parked_for_s(spec.stationary_s)
            if spec.stationary_s is None:
                self.keeper.parked.clear()
                self.keeper.alias.clear()
        self.spec = spec

    def observe(self, block: FrameBlock, detections: list[Detections], classes: list[Classes | None] | None = None,
                colours: list[np.ndarray] | None = None) -> tuple[list[Event], list[FrameResult]]:
        """Apply one block's detections: one `Detections` per frame of `block`, which
        holds the frames sampled for this app; `classes`, a classifier's answer per frame.
        An app that tracks by colour measures its boxes on the block's pixels, or is
        given `colours`: per frame, `box_colours` of the boxes its filter keeps."""
        if len(detections) != len(block) or (classes is not None and len(classes) != len(block)):
            raise ValueError(f"{self.name}: got {len(detections)} detection sets for {len(block)} frames")
        events: list[Event] = []
        results: list[FrameResult] = []
        for i, dets in enumerate(detections):
            result = FrameResult(int(block.frame_ids[i]), float(block.pts_ms[i]), Detections.empty())
            keep = self.filter.keep(dets)
            colour = None
            if self.tracker.by_colour:
                colour = colours[i] if colours is not None else box_colours(block.pixels[i], dets.xyxy[keep])
            events += self._observe_frame(result, dets, keep, colour)
            if classes is not None and classes[i] is not None:
                events += self._classify_frame(result, classes[i])
            results.append(result)
        return events, results

    def _classify_frame(self, result: FrameResult, classes: Classes) -> list[Event]:
        top = [(self.labels[c] if c < len(self.labels) else f"class_{c}", round(p, 6))
               for c, p in classes.top(self.spec.top_k, self._wanted[self._wanted < len(classes)])]
        result.classes = self.last_classes = top
        if not top or top[0][1] < self.spec.min_confidence:
            return []
        best = top[0][0]
        self.class_frames[best] = self.class_frames.get(best, 0) + 1
        if best == self.frame_class:
            return []
        previous, self.frame_class = self.frame_class, best
        return [Event("class_change", self.name, self.stream_id, result.pts_ms, -1, best,
                      {"from": previous, "score": top[0][1], "classes": [list(t) for t in top]})]

    def _observe_frame(self, result: FrameResult, dets: Detections, keep: np.ndarray,
                       colour: np.ndarray | None) -> list[Event]:
        """`keep`: the detections the filter keeps; `colour`: theirs, when tracked by colour."""
        t_ms = result.pts_ms
        self.num_frames += 1
        self.last_frame_ms = t_ms
        result.detections = dets
        dets = dets[keep]
        self.num_detections += int(np.isin(dets.class_id, self._wanted).sum())
        tracked = self._same_objects(self.tracker.update(dets, t_ms, colour))
        events: list[Event] = []
        wholes = []  # each tracked box made whole (whole_box): where its object stands
        for tid, cid, xyxy in zip(tracked.tracker_id, tracked.class_id, tracked.xyxy):
            tid, cid = int(tid), int(cid)
            state = self.tracks.get(tid)
            if state is None:
                state = self.tracks[tid] = TrackState(cid, t_ms, t_ms)
            wholes.append(state.see([float(v) for v in xyxy], cid, t_ms, self.frame_size))
            self.keeper.seen(tid, state.box, t_ms)
            if not state.started and cid in self._wanted:
                state.started = True
                self.num_tracks += 1
                events.append(self._event("track_start", t_ms, tid, cid, box=state.box))
        wanted = np.isin(tracked.class_id, self._wanted)
        mine = tracked[wanted]
        # where they stand, for lines and zones
        placed = replace(mine, xyxy=np.array(wholes, tracked.xyxy.dtype).reshape(-1, 4)[wanted])

        def box(tid: int) -> dict:  # where the track is on this frame (an exit may be of a track not seen)
            state = self.tracks.get(tid)
            return {"box": state.box} if state is not None and state.last_ms == t_ms else {}

        moving = placed[np.array([not self.keeper.stationary(int(t), t_ms) for t in placed.tracker_id], bool)] \
            if self.keeper.stationary_s is not None else placed
        for line in self.lines:
            for c in line.update(moving):
                events.append(self._event("line_cross", t_ms, c.track_id, c.class_id,
                                          line=line.name, direction=c.direction, **box(c.track_id)))
        for zone in self.zones:
            entered, exited = zone.update(placed, t_ms)
            events += [self._event("zone_enter", t_ms, c.track_id, c.class_id, zone=zone.name,
                                   **_entry(c), **box(c.track_id)) for c in entered]
            events += [self._event("zone_exit", t_ms, c.track_id, c.class_id, zone=zone.name,
                                   **_exit(c), **box(c.track_id)) for c in exited]
            if self.spec.loiter_s is not None:
                events += [self._event("zone_dwell", t_ms, tid, cid, zone=zone.name, dwell_ms=round(stay, 3),
                                       **box(tid))
                           for tid, cid, stay in zone.loiterers(t_ms, self.spec.loiter_s * 1000.0, self._loiterers)]
        events += self._end_stale_tracks(t_ms)
        result.tracked = mine
        return events

    def _same_objects(self, tracked: Detections) -> Detections:
        """The tracker's ids as the app's: a new track on a parked object's box is that
        object back, under its own id."""
        if self.keeper.stationary_s is None or not len(tracked):
            return tracked
        return tracked.with_tracker_id(self.keeper.app_ids(tracked.tracker_id, self._parked_class(tracked.class_id),
                                                           tracked.xyxy, self.tracks))

    def _parked_class(self, class_id):
        """The class a parked object of `class_id` (an id or an [N] array) must come back
        as: its class group's first, so a parked van seen again as a bus is the van back."""
        if not len(self._same_class):
            return class_id
        known = np.clip(class_id, 0, len(self._same_class) - 1)
        return np.where(class_id == known, self._same_class[known], class_id)

    def _end_stale_tracks(self, t_ms: float, everything: bool = False) -> list[Event]:
        events: list[Event] = []
        horizon = self.spec.tracker.lost_track_s * 1000.0
        # a track last seen going out across the border has left the view: it ends on
        # the first frame without it, so that whoever comes in there next is not taken
        # for it (lost_track_s is for objects hidden inside the view)
        gone = [t for t, s in self.tracks.items()
                if everything or t_ms - s.last_ms > horizon or (s.leaving and t_ms > s.last_ms)]
        for tid in gone:
            state = self.tracks[tid]
            if not everything and state.box is not None:  # a stationary object is parked, not ended
                parked = tid in self.keeper.parked or \
                    self.keeper.park(tid, state.box, int(self._parked_class(state.class_id)), state.last_ms)
                if parked and t_ms - state.last_ms <= self.keeper.park_s * 1000.0:
                    continue
            del self.tracks[tid]
            # a track still kept (hidden, or parked) when the app's frames end, with the
            # stream or with the app, is taken as there to the last of them, as its zones'
            # occupancy took it: someone hidden a moment by a passer-by is not gone; a track
            # given up on left when it was last seen
            until = t_ms if everything else state.last_ms
            dwell: dict[str, float] = {}
            for zone in self.zones:
                entered, left, total = zone.end_track(tid, until)
                if entered is not None:
                    events.append(self._event("zone_enter", state.last_ms, tid, state.class_id, zone=zone.name,
                                              **_entry(entered)))
                if left is not None:
                    events.append(self._event("zone_exit", state.last_ms, tid, state.class_id, zone=zone.name,
                                              **_exit(left)))
                if total > 0:
                    dwell[zone.name] = round(total, 3)
            for line in self.lines:
                line.forget(tid)
            for t in [tid, *self.keeper.forget(tid)]:
                self.tracker.forget(t)
            if state.started:
                events.append(self._event("track_end", state.last_ms, tid, state.class_id,
                                          duration_ms=round(state.last_ms - state.first_ms, 3), box=state.box,
                                          **({"dwell_ms": dwell} if dwell else {})))
        return events

    def finish(self) -> list[Event]:
        """End every open track (the stream ended, or the app was removed from it)."""
        if self.last_frame_ms is None:
            return []
        return self._end_stale_tracks(self.last_frame_ms, everything=True)

    def _event(self, kind: str, t_ms: float, track_id: int, class_id: int, **data) -> Event:
        return Event(kind, self.name, self.stream_id, t_ms, track_id, self.labels[class_id], data)

    def counts(self) -> dict:
        lines = {}
        for line in self.lines:
            by_class = {self.labels[c]: d.to_dict() for c, d in sorted(line.by_class.items())}
            lines[line.name] = {**line.total.to_dict(), "by_class": by_class}
        zones = {z.name: {"entered": z.num_entered,
                          "occupancy": {self.labels[c]: n for c, n in sorted(z.occupancy().items())}}
                 for z in self.zones}
        counts = {"tracks": self.num_tracks, "lines": lines, "zones": zones}
        if self.last_classes:
            counts["classes"] = {"current": self.frame_class, "frames": dict(sorted(self.class_frames.items())),
                                 "last": [list(t) for t in self.last_classes]}
        return counts
