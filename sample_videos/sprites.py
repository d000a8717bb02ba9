"""Drawing: the fixed background of a preset and each agent as a list of primitives.

An agent is drawn as a short list of primitives (polygon, disc, ring, thick line) in
pixel coordinates. The same list paints the colour frame and, with the agent's index
as colour, an id buffer; the id buffer gives each object's visible fraction after
occlusion, and the primitives' extent gives its exact box.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from sample_videos.preset import Preset
from sample_videos.world import Agent, World

SHIFT = 4  # cv2 fixed-point bits: 1/16 pixel positions keep slow motion smooth
ONE = 1 << SHIFT

Color = tuple[int, int, int]


@dataclass(frozen=True)
class Prim:
    kind: str  # "poly" | "disc" | "ring" | "line"
    points: np.ndarray  # [K, 2] float pixels (disc/ring: [[cx, cy]])
    color: Color
    size: float = 0.0  # radius for disc/ring, thickness for line/ring rim


def _fixed(points: np.ndarray) -> np.ndarray:
    return np.round(points * ONE).astype(np.int32)


def draw(canvas: np.ndarray, prims: list[Prim], color: Color | int | None = None,
         antialias: bool = True) -> None:
    """Paint primitives; `color` overrides theirs (used for the id buffer)."""
    aa = cv2.LINE_AA if antialias else cv2.LINE_8
    for p in prims:
        c = p.color if color is None else color
        if p.kind == "poly":
            cv2.fillPoly(canvas, [_fixed(p.points)], c, aa, SHIFT)
        elif p.kind == "disc":
            cv2.circle(canvas, tuple(_fixed(p.points[0])), int(p.size * ONE), c, -1, aa, SHIFT)
        elif p.kind == "ring":
            rim = max(2, int(round(p.size * 0.22)))
            cv2.circle(canvas, tuple(_fixed(p.points[0])), int(p.size * ONE), c, rim, aa, SHIFT)
        elif p.kind == "line":
            pts = _fixed(p.points)
            cv2.line(canvas, tuple(pts[0]), tuple(pts[1]), c, max(1, int(round(p.size))), aa, SHIFT)


def extent(prims: list[Prim]) -> np.ndarray:
    """[4] xyxy box around the primitives, in pixels."""
    lo = np.array([np.inf, np.inf])
    hi = -lo
    for p in prims:
        if p.kind in ("disc", "ring"):
            pad = p.size
        elif p.kind == "line":
            pad = p.size / 2
        else:
            pad = 0.0
        lo = np.minimum(lo, p.points.min(axis=0) - pad)
        hi = np.maximum(hi, p.points.max(axis=0) + pad)
    return np.concatenate([lo, hi])


# -- agents -------------------------------------------------------------------------
NOMINAL_HEIGHT = {"person": 0.15, "car": 0.12, "bike": 0.15}  # of the frame height, at scale 1


def anchor(agent: Agent, world: World, width: int, height: int) -> tuple[float, float]:
    """The object's body centre in pixels: its ground position, half its nominal height
    up. Unlike a box centre it does not swing with arms and legs, so a person standing
    on a line is not counted crossing it back and forth."""
    h = NOMINAL_HEIGHT[agent.cls] * world.preset.scale_at(agent.foot_y) * agent.size * height
    if agent.cls == "car" and agent.variant == "van":
        h *= 1.12
    return agent.x * width, agent.foot_y * height - h / 2


def agent_prims(agent: Agent, world: World, width: int, height: int) -> list[Prim]:
    fx, fy = agent.x * width, agent.foot_y * height
    scale = world.preset.scale_at(agent.foot_y) * agent.size * height
    if agent.cls == "person":
        return _person(agent, fx, fy, 0.15 * scale)
    if agent.cls == "car":
        return _car(agent, fx, fy, 0.30 * scale, 0.12 * scale)
    return _bike(agent, fx, fy, 0.15 * scale)


def _limb(a: tuple[float, float], b: tuple[float, float], color: Color, thick: float) -> Prim:
    return Prim("line", np.array([a, b], dtype=np.float64), color, thick)


def _person(a: Agent, fx: float, fy: float, h: float) -> list[Prim]:
    c = a.colors
    head_r = 0.075 * h
    hip = (fx, fy - 0.48 * h)
    shoulder_y = fy - 0.80 * h
    leg = 0.48 * h
    prims: list[Prim] = []
    side_view = a.state != "cross"
    swing = 0.45 * math.sin(a.phase) if a.moving else 0.0
    if side_view:
        d = a.direction
        for sign, shade in ((-1, 0.8), (1, 1.0)):
            th = sign * swing
            knee = (hip[0] + d * 0.5 * leg * math.sin(th), hip[1] + 0.5 * leg * math.cos(th))
            bend = th - 0.35 * max(0.0, -sign * math.sin(a.phase)) if a.moving else th
            foot = (knee[0] + d * 0.5 * leg * math.sin(bend), knee[1] + 0.5 * leg * math.cos(bend))
            pants = tuple(int(v * shade) for v in c["pants"])
            prims += [_limb(hip, knee, pants, 0.085 * h), _limb(knee, foot, pants, 0.075 * h),
                      _limb(foot, (foot[0] + d * 0.05 * h, foot[1]), (30, 25, 20), 0.05 * h)]
        torso_w = 0.17 * h
    else:
        lift = 0.06 * h
        for sign in (-1, 1):
            up = lift * max(0.0, sign * math.sin(a.phase))
            top = (fx + sign * 0.045 * h, hip[1])
            foot = (fx + sign * 0.05 * h, fy - up)
            prims.append(_limb(top, foot, c["pants"], 0.08 * h))
        torso_w = 0.24 * h
    torso = np.array([[fx - torso_w / 2, shoulder_y], [fx + torso_w / 2, shoulder_y],
                      [fx + torso_w * 0.42, hip[1] + 0.03 * h], [fx - torso_w * 0.42, hip[1] + 0.03 * h]])
    prims.append(Prim("poly", torso, c["shirt"]))
    arm = 0.36 * h
    shoulder = (fx, shoulder_y + 0.04 * h)
    if side_view:
        d = a.direction
        for sign in (-1, 1):
            th = -sign * swing * 0.8
            hand = (shoulder[0] + d * arm * math.sin(th), shoulder[1] + arm * math.cos(th))
            prims.append(_limb(shoulder, hand, c["shirt"], 0.06 * h))
            prims.append(Prim("disc", np.array([hand]), c["skin"], 0.03 * h))
    else:
        for sign in (-1, 1):
            s = (fx + sign * torso_w * 0.5, shoulder_y + 0.04 * h)
            hand = (s[0] + sign * 0.03 * h, s[1] + arm * 0.95)
            prims.append(_limb(s, hand, c["shirt"], 0.06 * h))
    if a.variant == "bag":
        bx = fx - (a.direction * 0.1 * h if side_view else 0.0)
        prims.append(Prim("poly", np.array([[bx - 0.06 * h, hip[1] - 0.12 * h], [bx + 0.06 * h, hip[1] - 0.12 * h],
                                            [bx + 0.06 * h, hip[1] + 0.05 * h], [bx - 0.06 * h, hip[1] + 0.05 * h]]),
                          (90, 60, 40)))
    head = (fx, fy - h + head_r)
    prims.append(_limb((fx, shoulder_y), (fx, head[1] + head_r * 0.5), c["skin"], 0.05 * h))
    prims.append(Prim("disc", np.array([head]), c["skin"], head_r))
    hair_pts = np.array([[head[0] - head_r, head[1]], [head[0] + head_r, head[1]],
                         [head[0] + head_r * 0.7, head[1] - head_r], [head[0] - head_r * 0.7, head[1] - head_r]])
    prims.append(Prim("poly", hair_pts, c["hair"]))
    if a.variant == "hat":
        prims.append(Prim("poly", np.array([[head[0] - head_r * 1.3, head[1] - head_r * 0.6],
                                            [head[0] + head_r * 1.3, head[1] - head_r * 0.6],
                                            [head[0] + head_r * 0.8, head[1] - head_r * 1.4],
                                            [head[0] - head_r * 0.8, head[1] - head_r * 1.4]]), c["shirt"]))
    return prims


def _car(a: Agent, fx: float, fy: float, length: float, h: float) -> list[Prim]:
    d = a.direction
    body = a.colors["body"]
    dark = tuple(int(v * 0.55) for v in body)
    tall = 1.12 if a.variant == "van" else 1.0
    h = h * tall
    rw = 0.2 * h / tall

    def X(u: float) -> float:  # u in [-0.5, 0.5] along the car, +0.5 is the front
        return fx + d * u * length

    lower = np.array([[X(-0.5), fy - 0.22 * h], [X(0.5), fy - 0.22 * h], [X(0.5), fy - 0.48 * h],
                      [X(0.44), fy - 0.58 * h], [X(-0.5), fy - 0.60 * h]])
    if a.variant == "van":
        cabin = [(-0.48, 0.58), (0.30, 0.58), (0.22, 1.0), (-0.48, 1.0)]
    elif a.variant == "hatch":
        cabin = [(-0.44, 0.58), (0.22, 0.58), (0.08, 0.98), (-0.38, 0.98)]
    else:
        cabin = [(-0.30, 0.58), (0.24, 0.58), (0.10, 0.97), (-0.20, 0.97)]
    cab = np.array([[X(u), fy - v * h] for u, v in cabin])
    glass_c = (140, 170, 190)
    inset = 0.06
    glass = np.array([[X(cabin[0][0] + inset), fy - 0.62 * h], [X(cabin[1][0] - inset * 1.6), fy - 0.62 * h],
                      [X(cabin[2][0] - inset * 0.6), fy - (cabin[2][1] - 0.07) * h],
                      [X(cabin[3][0] + inset * 0.6), fy - (cabin[3][1] - 0.07) * h]])
    pillar_u = (cabin[0][0] + cabin[1][0]) / 2
    prims = [
        Prim("poly", lower, body),
        Prim("poly", cab, body),
        Prim("poly", glass, glass_c),
        _limb((X(pillar_u), fy - 0.6 * h), (X(pillar_u - 0.02), fy - (cabin[2][1] - 0.05) * h), body, 0.05 * h),
        _limb((X(-0.5), fy - 0.40 * h), (X(0.5), fy - 0.40 * h), dark, 0.04 * h),
        Prim("poly", np.array([[X(0.47), fy - 0.50 * h], [X(0.5), fy - 0.50 * h],
                               [X(0.5), fy - 0.40 * h], [X(0.47), fy - 0.40 * h]]), (250, 240, 190)),
        Prim("poly", np.array([[X(-0.5), fy - 0.55 * h], [X(-0.47), fy - 0.55 * h],
                               [X(-0.47), fy - 0.43 * h], [X(-0.5), fy - 0.43 * h]]), (200, 20, 20)),
    ]
    for u in (-0.32, 0.32):
        center = np.array([[X(u), fy - rw]])
        prims.append(Prim("disc", center, (22, 22, 24), rw))
        prims.append(Prim("disc", center, (150, 150, 155), rw * 0.45))
        spoke = a.phase
        prims.append(_limb((X(u) + 0.4 * rw * math.cos(spoke), fy - rw + 0.4 * rw * math.sin(spoke)),
                           (X(u) - 0.4 * rw * math.cos(spoke), fy - rw - 0.4 * rw * math.sin(spoke)),
                           (80, 80, 85), 0.06 * h))
    return prims


def _bike(a: Agent, fx: float, fy: float, h: float) -> list[Prim]:
    d = a.direction
    c = a.colors
    rw = 0.17 * h
    rear, front = (fx - d * 0.26 * h, fy - rw), (fx + d * 0.26 * h, fy - rw)
    crank = (fx - d * 0.02 * h, fy - rw)
    seat = (fx - d * 0.09 * h, fy - 0.52 * h)
    bar = (fx + d * 0.20 * h, fy - 0.58 * h)
    frame = c["frame"]
    t = 0.035 * h
    prims = [Prim("ring", np.array([rear]), (25, 25, 25), rw), Prim("ring", np.array([front]), (25, 25, 25), rw),
             _limb(rear, crank, frame, t), _limb(crank, seat, frame, t), _limb(seat, bar, frame, t),
             _limb(bar, front, frame, t), _limb(rear, seat, frame, t), _limb(crank, bar, frame, t)]
    hip = (seat[0], seat[1] - 0.03 * h)
    shoulder = (fx + d * 0.06 * h, fy - 0.88 * h)
    for sign, shade in ((-1, 0.75), (1, 1.0)):
        ang = a.phase + (0 if sign > 0 else math.pi)
        pedal = (crank[0] + 0.09 * h * math.cos(ang), crank[1] + 0.09 * h * math.sin(ang))
        knee = ((hip[0] + pedal[0]) / 2 + d * 0.1 * h, (hip[1] + pedal[1]) / 2 - 0.05 * h)
        pants = tuple(int(v * shade) for v in c["pants"])
        prims += [_limb(hip, knee, pants, 0.07 * h), _limb(knee, pedal, pants, 0.06 * h)]
    torso = np.array([[hip[0] - d * 0.06 * h, hip[1]], [hip[0] + d * 0.06 * h, hip[1] + 0.01 * h],
                      [shoulder[0] + d * 0.06 * h, shoulder[1] + 0.02 * h], [shoulder[0] - d * 0.07 * h, shoulder[1]]])
    prims.append(Prim("poly", torso, c["shirt"]))
    prims.append(_limb(shoulder, bar, c["shirt"], 0.05 * h))
    head = (shoulder[0] + d * 0.05 * h, shoulder[1] - 0.08 * h)
    prims.append(Prim("disc", np.array([head]), c["skin"], 0.065 * h))
    prims.append(Prim("poly", np.array([[head[0] - 0.08 * h, head[1]], [head[0] + 0.08 * h, head[1]],
                                        [head[0] + 0.05 * h, head[1] - 0.07 * h], [head[0] - 0.06 * h, head[1] - 0.07 * h]]),
                      c["helmet"]))
    return prims


def shadow_ellipse(agent: Agent, box: np.ndarray, height: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Centre and half-axes of a soft ground shadow under an agent."""
    fy = agent.foot_y * height
    half_w = max(2, int((box[2] - box[0]) * 0.55))
    return (int((box[0] + box[2]) / 2), int(fy)), (half_w, max(2, int(half_w * 0.18)))


# -- background ---------------------------------------------------------------------
def background(preset: Preset, width: int, height: int) -> np.ndarray:
    """The empty street, [H, W, 3] uint8 RGB. Fixed by the preset alone."""
    rng = np.random.default_rng(preset.background_seed)
    img = np.zeros((height, width, 3), np.float32)

    def band(y0: float, y1: float) -> slice:
        return slice(int(y0 * height), int(y1 * height))

    def texture(amount: float, cell: int) -> np.ndarray:
        small = rng.normal(0, 1, (max(2, height // cell), max(2, width // cell), 1)).astype(np.float32)
        big = cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)[..., None]
        fine = rng.normal(0, 0.5, (height, width, 1)).astype(np.float32)
        return (big + fine) * amount

    # sky and buildings
    sky = band(0, preset.horizon_y)
    img[sky] = (150, 185, 215)
    x = 0
    facade = [(170, 80, 60), (200, 185, 150), (120, 125, 130), (180, 150, 110), (150, 90, 80), (210, 205, 190)]
    while x < width:
        w = int(rng.integers(width // 9, width // 4))
        top = int(rng.uniform(0.02, 0.12) * height)
        color = np.array(facade[rng.integers(len(facade))], np.float32)
        bottom = int(preset.horizon_y * height)
        img[top:bottom, x:x + w] = color
        win_w, win_h = max(3, w // 8), max(3, height // 30)
        lit = rng.random((64, 64)) < 0.25
        for row, wy in enumerate(range(top + win_h, bottom - 2 * win_h, 2 * win_h)):
            for col, wx in enumerate(range(x + win_w // 2, x + w - win_w, 2 * win_w)):
                img[wy:wy + win_h, wx:wx + win_w] = (230, 210, 130) if lit[row % 64, col % 64] else (50, 60, 80)
        door = x + w // 2
        img[bottom - 3 * win_h:bottom, door - win_w // 2:door + win_w // 2] = (60, 45, 35)
        img[top:top + 2, x:x + w] = color * 0.6
        x += w
    # sidewalks with tile joints
    for y0, y1 in (preset.far_walk, preset.near_walk):
        rows = band(y0, y1)
        img[rows] = (175, 172, 165)
        ys, ye = rows.start, rows.stop
        tile = max(8, width // 24)
        img[ys:ye, ::tile] *= 0.85
        img[ys:ye:max(4, tile // 2)] *= 0.9
    img[band(preset.near_walk[1], 1.0)] = (80, 120, 60)  # verge
    road = band(*preset.road)
    img[road] = (88, 88, 92)
    img[band(preset.road[0], preset.road[0] + 0.012)] = (200, 200, 195)  # curbs
    img[band(preset.road[1] - 0.012, preset.road[1])] = (200, 200, 195)
    mid = int((preset.lanes[1].foot_y + preset.lanes[2].foot_y) / 2 * height) - int(0.03 * height)
    for xs in range(0, width, width // 16):
        img[mid:mid + 2, xs:xs + width // 32] = (230, 200, 70)
    for lane_y in (0.49, 0.755):
        y = int(lane_y * height)
        img[y:y + 2, :] = (225, 225, 220)
    cx0, cx1 = int(preset.crosswalk_x[0] * width), int(preset.crosswalk_x[1] * width)
    stripe = max(3, height // 60)
    for y in range(road.start + 2 * stripe, road.stop - stripe, 2 * stripe):
        img[y:y + stripe, cx0:cx1] = (235, 235, 230)
    img += texture(7.0, 6)
    # lamp posts and tree trunks on the far sidewalk, part of the fixed scene
    for px in (0.08, 0.45, 0.83):
        x0 = int(px * width)
        y_base = int((preset.far_walk[0] + 0.02) * height)
        cv2.line(img, (x0, y_base), (x0, int(0.12 * height)), (50, 55, 60), max(2, width // 320))
        cv2.circle(img, (x0, int(0.12 * height)), max(3, width // 160), (235, 225, 170), -1)
    return np.clip(img, 0, 255).astype(np.uint8)
