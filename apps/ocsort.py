"""OC-SORT with every track's Kalman filter in one stack of arrays.

Roboflow's `OCSORTTracker` keeps one filter object per track and runs its predict and
update as tiny matrix products, one track at a time, so its cost is mostly numpy's
per-call overhead, paid once per track, and it shares the cores with the engine. Here
the states are one (T, 7, 1) array and the covariances one (T, 7, 7) array, so a frame
costs a few stacked products whatever T.

It is the same algorithm, step for step: the XCYCSR state with the paper's noise, the
timestamped steps (process noise scaled by the gap outside a 4 ms band of one frame),
the pruning by seconds lost, observation-centric momentum in the first association,
the second association on last observations, the re-update along a virtual trajectory
when a lost track is found again (ORU), and the id rules for young tracks.
`tests/apps/test_ocsort.py` holds it to the reference's ids and boxes frame by frame.

Two additions, for crowds, both off unless asked for. Where people stand or pass
close together IoU alone lets a track slide onto a neighbour, so its person's stay in
a zone runs on with someone else's.

- `appearance_gate`: colour. Given each box's colour (`apps/appearance.py`), a pair
  whose colours differ by more than the gate is not matched, and in the first
  association the likeness of colours is added to the cost, as Deep OC-SORT adds its
  embeddings'. A track's colour is a running mean over its clear boxes (none in front
  of them, none the frame's border may cut), and it keeps its last few as they were,
  since a walking person's middle shows more or less background from one stride to the
  next: a box's distance to a track is to the nearest of these. A box that is not clear
  may show some of the one in front, or another part of a person coming into view, so
  its distance counts for a quarter, and a track begun from one starts with no colour.
- `height_iou`: Hybrid-SORT's height-modulated IoU, the boxes' IoU times the overlap
  of their vertical extents. People at different depths overlap on screen but stand
  at different heights in it.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import linear_sum_assignment
from trackers.core.ocsort.utils import _build_direction_consistency_matrix_batch
from trackers.utils.converters import xcycsr_to_xyxy, xyxy_to_xcycsr
from trackers.utils.iou import IoU

from apps.appearance import Looks

# the state: [xc, yc, area, aspect, v_xc, v_yc, v_area]; the aspect has no velocity
_POS, _VEL = (0, 1, 2), (4, 5, 6)
_H = np.eye(4, 7)
_I = np.eye(7)
_R = np.diag([1.0, 1.0, 10.0, 10.0])  # OC-SORT's measurement noise
_P0 = np.diag([10.0] * 4 + [10_000.0] * 3)  # and its first uncertainty, large on velocity
_Q1 = np.diag([1.0] * 4 + [0.01, 0.01, 0.0001])  # process noise for one nominal frame
NOMINAL_S = 0.004  # a step within this many seconds of one frame uses _Q1 as it is
NOMINAL_FRAMES = 0.1  # the band for ORU's replayed steps, which carry no frame rate
_IOU = IoU()  # the reference's: it refuses boxes that are not finite
LOOK_MEMORY = 0.9  # a track's colour keeps this share of itself at each clear match
RECENT_LOOKS = 10  # and it keeps this many of its last clear boxes' colours as they were
UNCLEAR_WEIGHT = 0.25  # the share of its colour distance that counts for a box that is not clear
NO_LOOK = 0.5  # the likeness of a pair with no colour to compare


def _transition(step: float) -> np.ndarray:
    f = np.eye(7)
    for p, v in zip(_POS, _VEL):
        f[p, v] = step
    return f


def _process_noise(step: float, frame_rate: float | None) -> np.ndarray:
    band = NOMINAL_S * frame_rate if frame_rate else NOMINAL_FRAMES
    if abs(step - 1.0) <= band:
        return _Q1.copy()
    # white-noise acceleration over a gap of `step` frames
    q = np.zeros((7, 7))
    dt2 = step * step
    dt3, dt4 = dt2 * step, dt2 * dt2
    for p, v in zip(_POS, _VEL):
        sa2 = float(_Q1[v, v])
        q[p, p] = sa2 * dt4 / 4.0
        q[p, v] = q[v, p] = sa2 * dt3 / 2.0
        q[v, v] = sa2 * dt2
    q[3, 3] = _Q1[3, 3]
    return q


def _kalman_predict(x: np.ndarray, p: np.ndarray, step: float, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One step of `step` frames for a stack of filters. A shrinking area whose next
    value would not be positive stops shrinking first (a box of no area has no IoU)."""
    x[x[:, 2, 0] + step * x[:, 6, 0] <= 0, 6, 0] = 0.0
    f = _transition(step)
    return f @ x, f @ p @ f.T + noise


def _kalman_update(x: np.ndarray, p: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One measurement update of a stack of filters, in the reference's order of
    products (Joseph form): x (M, 7, 1), p (M, 7, 7), z (M, 4, 1)."""
    innovation = z - _H @ x
    pht = p @ _H.T
    gain = pht @ np.linalg.inv(_H @ pht + _R)
    i_kh = _I - gain @ _H
    return x + gain @ innovation, i_kh @ p @ i_kh.transpose(0, 2, 1) + gain @ _R @ gain.transpose(0, 2, 1)


class _Track:
    __slots__ = ("age", "tracker_id", "lost", "lost_s", "hits", "last", "seen", "velocity", "frozen", "step",
                 "noise_rate", "looks")

    def __init__(self, box: np.ndarray, look: np.ndarray) -> None:
        self.age = 0
        self.tracker_id = -1
        self.lost = 0  # predicts since the last match
        self.lost_s = 0.0
        self.hits = 0  # consecutive matches
        self.last = box
        self.seen: dict[int, np.ndarray] = {}  # age -> box, the last few
        self.velocity: np.ndarray | None = None
        self.frozen: tuple[np.ndarray, np.ndarray] | None = None  # (x, P) when it was first missed
        # the step and frame rate its process noise was last built for: the reference
        # reuses that noise while the step repeats, even when the rate came from ORU
        self.step: float | None = None
        self.noise_rate: float | None = None
        # row 0: the running mean of its clear boxes' colours; then the last RECENT_LOOKS
        # of them as they were, newest last; NaN where none yet
        self.looks = np.full((1 + RECENT_LOOKS, 3), np.nan, np.float32)
        self.looks[0] = self.looks[-1] = look

    @property
    def look(self) -> np.ndarray:
        return self.looks[0]

    def remember(self, look: np.ndarray) -> None:
        """Learn from a clear box's colour (finite)."""
        mean = self.looks[0]
        self.looks[0] = look if np.isnan(mean[0]) else LOOK_MEMORY * mean + (1 - LOOK_MEMORY) * look
        self.looks[1:-1] = self.looks[2:]
        self.looks[-1] = look

    def reference_box(self, delta_t: int) -> np.ndarray | None:
        """The observation `delta_t` predicts back, or the nearest later one."""
        if not self.seen:
            return None
        for back in range(delta_t, 0, -1):
            if self.age - back in self.seen:
                return self.seen[self.age - back]
        return self.seen[max(self.seen)]


class _FrameClock:
    """Frame steps between a tracker's timestamps, as the reference derives them: the
    first frame counts as one nominal frame, a repeated time as a step of 0."""

    def __init__(self, frame_rate: float) -> None:
        self.frame_rate = frame_rate
        self.last_t: float | None = None

    def advance(self, t_s: float) -> tuple[float | None, float, float | None]:
        """(frame step, seconds elapsed, frame rate for the noise band); a step of None
        for a time that is not finite or goes backwards, which leaves the clock as it was."""
        if not math.isfinite(t_s):
            return None, 0.0, None
        if self.last_t is None:
            self.last_t = t_s
            elapsed = 1.0 / self.frame_rate
            return elapsed * self.frame_rate, elapsed, self.frame_rate
        if t_s < self.last_t:
            return None, 0.0, None
        if t_s == self.last_t:
            return 0.0, 0.0, None
        elapsed = t_s - self.last_t
        self.last_t = t_s
        return elapsed * self.frame_rate, elapsed, self.frame_rate


class _ColourMatch:
    """`appearance_gate`: which boxes a track may take by colour, and how alike they are.
    A box's distance to a track is to the nearest of the track's colours (its running
    mean and its recent ones), a quarter of it for a box that is not clear; NaN where
    either has none, which the gate passes."""

    def __init__(self, gate: float, weight: float) -> None:
        self.gate = gate  # the largest colour distance (RGB) a match may have
        self.weight = weight  # the likeness's share of the first association's cost

    @staticmethod
    def boxes(looks: Looks | None, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The colours [M, 3] of the boxes at `rows` and whether each is clear [M]: a
        box with no colour is not."""
        if looks is None:
            raise ValueError("this tracker matches by colour (appearance_gate): update needs the boxes' looks")
        colour = looks.colour[rows]
        return colour, looks.clear[rows] & np.isfinite(colour).all(1)

    @staticmethod
    def distance(tracks: list[_Track], colour: np.ndarray, clear: np.ndarray) -> np.ndarray:
        """(tracks, boxes) distances between the tracks' colours and the boxes' [M, 3]."""
        mine = np.array([t.looks for t in tracks], np.float32).reshape(-1, 1 + RECENT_LOOKS, 3)
        distance = np.fmin.reduce(np.linalg.norm(mine[:, :, None, :] - colour[None, None, :, :], axis=3), axis=1)
        return np.where(clear[None, :], distance, UNCLEAR_WEIGHT * distance)

    def gated(self, iou: np.ndarray, distance: np.ndarray) -> np.ndarray:
        """`iou` with 0 for the pairs whose colours differ by more than the gate: a box
        that overlaps a track but shows someone else does not continue it."""
        return np.where(distance > self.gate, 0.0, iou)  # NaN (nothing to compare) passes

    def likeness(self, distance: np.ndarray) -> np.ndarray:
        """1 for the same colour, 0 at the gate's distance; NO_LOOK with nothing to compare."""
        return np.nan_to_num(np.clip(1.0 - distance / self.gate, 0.0, 1.0), nan=NO_LOOK)


class OCSort:
    """`update` takes one frame's boxes, scores and time in seconds, and returns which
    detections belong to which track: (detection index, track id or -1 for a young
    or unmatched track), in the reference's order. With `appearance_gate`, `update`
    also takes the boxes' `Looks`."""

    def __init__(self, *, lost_track_buffer: int, frame_rate: float, minimum_consecutive_frames: int,
                 minimum_iou_threshold: float, high_conf_det_threshold: float,
                 direction_consistency_weight: float = 0.2, delta_t: int = 3,
                 appearance_gate: float | None = None, appearance_weight: float = 1.0,
                 height_iou: bool = False) -> None:
        if not (math.isfinite(frame_rate) and frame_rate > 0):
            raise ValueError(f"frame_rate must be finite and > 0; was {frame_rate}")
        self.max_lost_s = lost_track_buffer / 30.0  # the buffer counts frames at 30 fps
        self._clock = _FrameClock(frame_rate)
        # matches after the detection that began a track, as the reference counts them:
        # one fewer than the app's min_hits (apps/tracking.py)
        self.min_hits = minimum_consecutive_frames
        self.match_iou = minimum_iou_threshold
        self.high_score = high_conf_det_threshold
        self.direction_weight = direction_consistency_weight
        self.delta_t = delta_t
        self._colours = None if appearance_gate is None else _ColourMatch(appearance_gate, appearance_weight)
        self.height_iou = height_iou
        self.tracks: list[_Track] = []
        self._x = np.zeros((0, 7, 1))
        self._p = np.zeros((0, 7, 7))
        self._frames = 0
        self._next_id = 0

    def update(self, xyxy: np.ndarray, confidence: np.ndarray, t_s: float,
               looks: Looks | None = None) -> tuple[np.ndarray, np.ndarray]:
        step, elapsed, rate = self._clock.advance(t_s)
        if step is None:  # time went backwards: the reference leaves its tracks alone
            return np.arange(len(xyxy)), np.full(len(xyxy), -1, np.int64)
        if not self.tracks and not len(xyxy):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        is_high = confidence >= self.high_score
        high = np.flatnonzero(is_high)
        boxes, scores = xyxy[high], confidence[high]
        colours = self._colours
        colour, clear = colours.boxes(looks, high) if colours is not None else \
            (np.full((len(high), 3), np.nan, np.float32), np.zeros(len(high), bool))
        if step > 0:
            self._predict(step, elapsed, rate)
        self._keep([t.lost_s <= self.max_lost_s for t in self.tracks])

        out_det: list[int] = []
        out_id: list[int] = []
        updates: list[tuple[int, np.ndarray, np.ndarray | None]] = []

        def matched(track: int, det: int) -> None:
            self._observe(track, boxes[det], step, updates)
            if clear[det]:
                self.tracks[track].remember(colour[det])
            out_det.append(int(high[det]))
            out_id.append(self._resolve_id(self.tracks[track]))

        predicted = xcycsr_to_xyxy(self._x[:, :4, 0]) if self.tracks else np.zeros((0, 4))
        iou = self._overlap(predicted, boxes)
        distance = colours.distance(self.tracks, colour, clear) if colours is not None else None
        if distance is not None:
            iou = colours.gated(iou, distance)
        cost = iou + self.direction_weight * self._direction(boxes, scores) if self.direction_weight else iou
        if distance is not None:
            cost = cost + colours.weight * colours.likeness(distance)
        pairs, lost, new = self._assign(iou, cost)
        for track, det in pairs:
            matched(track, det)
        if new and lost:
            # the second chance: a lost track's last observation against what is left
            last = np.array([self.tracks[t].last for t in lost])
            iou = self._overlap(last, boxes[new])
            if colours is not None:
                iou = colours.gated(iou, colours.distance([self.tracks[t] for t in lost], colour[new], clear[new]))
            again, _, left = self._assign(iou, iou)  # IoU alone: no direction term here
            for track, det in again:
                matched(lost[track], new[det])
            new = [new[i] for i in left]
        self._apply(updates)
        self._spawn(boxes[new], np.where(clear[new, None], colour[new], np.nan))
        out_det += [int(high[d]) for d in new] + [int(i) for i in np.flatnonzero(~is_high)]
        out_id += [-1] * (len(out_det) - len(out_id))
        self._keep([t.lost_s <= self.max_lost_s for t in self.tracks])
        self._frames += 1
        return np.asarray(out_det, np.int64), np.asarray(out_id, np.int64)

    def forget(self, track_id: int) -> None:
        self._keep([t.tracker_id != track_id for t in self.tracks])

    def _predict(self, step: float, elapsed: float, rate: float | None) -> None:
        noise: dict[float | None, np.ndarray] = {}
        per_track = []
        for i, t in enumerate(self.tracks):
            if t.lost == 1:  # missed once: keep the state ORU will start from
                t.frozen = (self._x[i].copy(), self._p[i].copy())
            if step != t.step:
                t.step, t.noise_rate = step, rate
            if t.noise_rate not in noise:
                noise[t.noise_rate] = _process_noise(step, t.noise_rate)
            per_track.append(noise[t.noise_rate])
            if t.lost > 0:
                t.hits = 0
            t.lost += 1
            t.lost_s += elapsed
            t.age += 1
        self._x, self._p = _kalman_predict(self._x, self._p, step, np.array(per_track).reshape(-1, 7, 7))

    def _observe(self, i: int, box: np.ndarray, step: float, updates: list) -> None:
        t = self.tracks[i]
        if t.frozen is not None:
            self._re_update(i, box, step)
        updates.append((i, box, t.reference_box(self.delta_t)))
        t.lost, t.lost_s = 0, 0.0
        t.hits += 1
        t.last = box
        t.seen[t.age] = box
        for age in [a for a in t.seen if a < t.age - self.delta_t]:
            del t.seen[age]

    def _re_update(self, i: int, box: np.ndarray, step: float) -> None:
        """ORU: back to the state before the track was lost, then along a straight
        line from its last observation to `box`, one update per frame it missed."""
        t = self.tracks[i]
        x, p = (a[None].copy() for a in t.frozen)
        t.frozen, t.step = None, None
        gap = t.lost
        x1, y1, s1, r1 = xyxy_to_xcycsr(t.last)
        x2, y2, s2, r2 = xyxy_to_xcycsr(box)
        w1, h1 = np.sqrt(s1 * r1), (np.sqrt(s1 / r1) if r1 != 0 else np.float64(0.0))
        w2, h2 = np.sqrt(s2 * r2), (np.sqrt(s2 / r2) if r2 != 0 else np.float64(0.0))
        dx, dy, dw, dh = (x2 - x1) / gap, (y2 - y1) / gap, (w2 - w1) / gap, (h2 - h1) / gap
        for k in range(gap):
            w, h = w1 + (k + 1) * dw, h1 + (k + 1) * dh
            z = np.array([x1 + (k + 1) * dx, y1 + (k + 1) * dy, w * h, w / h], np.float64).reshape(1, 4, 1)
            x, p = _kalman_update(x, p, z)
            if k < gap - 1:
                if step != t.step:
                    t.step, t.noise_rate = step, None
                x, p = _kalman_predict(x, p, step, _process_noise(step, t.noise_rate))
        self._x[i], self._p[i] = x[0], p[0]

    def _apply(self, updates: list[tuple[int, np.ndarray, np.ndarray | None]]) -> None:
        """The matches' filter updates, and their directions: from the observation
        `delta_t` back to the new one (a unit [dy, dx])."""
        if not updates:
            return
        rows = np.array([i for i, _, _ in updates])
        boxes = np.array([b for _, b, _ in updates])
        z = xyxy_to_xcycsr(boxes).reshape(-1, 4, 1)
        self._x[rows], self._p[rows] = _kalman_update(self._x[rows], self._p[rows], z)
        moved = [k for k, (_, _, r) in enumerate(updates) if r is not None]
        if moved:
            start = np.array([updates[k][2] for k in moved])
            d = (boxes[moved, :2] + boxes[moved, 2:]) / 2.0 - (start[:, :2] + start[:, 2:]) / 2.0
            dy, dx = d[:, 1], d[:, 0]
            direction = np.stack([dy, dx], 1) / (np.sqrt(dy ** 2 + dx ** 2) + 1e-6)[:, None]
            for k, v in zip(moved, direction):
                self.tracks[updates[k][0]].velocity = v

    def _overlap(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(len(a), len(b)) IoU, modulated by height with `height_iou`."""
        iou = _IOU.compute(a, b)
        if not self.height_iou or not iou.size:
            return iou
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        top, bottom = a[:, None, 1], a[:, None, 3]
        shared = np.clip(np.minimum(bottom, b[None, :, 3]) - np.maximum(top, b[None, :, 1]), 0, None)
        spanned = np.maximum(bottom, b[None, :, 3]) - np.minimum(top, b[None, :, 1])
        return iou * shared / np.maximum(spanned, 1e-9)

    def _spawn(self, boxes: np.ndarray, colour: np.ndarray) -> None:
        if not len(boxes):
            return
        self.tracks += [_Track(b, c.copy()) for b, c in zip(boxes, colour)]
        x = np.zeros((len(boxes), 7, 1))
        x[:, :4, 0] = xyxy_to_xcycsr(boxes)
        self._x = np.concatenate([self._x, x])
        self._p = np.concatenate([self._p, np.broadcast_to(_P0, (len(boxes), 7, 7))])

    def _keep(self, keep: list[bool]) -> None:
        if all(keep):
            return
        self.tracks = [t for t, k in zip(self.tracks, keep) if k]
        self._x, self._p = self._x[keep], self._p[keep]

    def _resolve_id(self, t: _Track) -> int:
        """The reference's rule: in the first `min_hits` + 1 frames it is given every
        matched track gets an id at once; later a track needs `min_hits` matches in a
        row, after the detection that began it or after a miss."""
        if (t.lost == 0) if self._frames <= self.min_hits else (t.hits >= self.min_hits):
            if t.tracker_id == -1:
                t.tracker_id, self._next_id = self._next_id, self._next_id + 1
            return t.tracker_id
        return -1

    def _direction(self, boxes: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """Observation-centric momentum: how well the way from each track's earlier
        observation to each detection agrees with the track's own direction."""
        velocity = np.array([t.velocity if t.velocity is not None else np.zeros(2) for t in self.tracks])
        reference = np.array([r if (r := t.reference_box(self.delta_t)) is not None else t.last
                              for t in self.tracks])
        has_velocity = np.array([t.velocity is not None for t in self.tracks], np.float32)[:, None]
        matrix = _build_direction_consistency_matrix_batch(velocity.reshape(-1, 2), reference.reshape(-1, 4),
                                                           boxes, has_velocity)
        matrix *= scores[None, :]  # in place, as the reference: it stays float32
        return matrix

    def _assign(self, iou: np.ndarray, cost: np.ndarray) -> tuple[list[tuple[int, int]], list[int], list[int]]:
        """Hungarian assignment on `cost`; a pair counts when its IoU reaches the
        threshold. Returns the pairs and the unmatched tracks and detections, sorted."""
        pairs = []
        if iou.size:
            rows, cols = linear_sum_assignment(cost, maximize=True)
            pairs = [(int(r), int(c)) for r, c in zip(rows, cols) if iou[r, c] >= self.match_iou]
        tracks, dets = {r for r, _ in pairs}, {c for _, c in pairs}
        return (pairs, [r for r in range(iou.shape[0]) if r not in tracks],
                [c for c in range(iou.shape[1]) if c not in dets])
