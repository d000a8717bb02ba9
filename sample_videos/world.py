"""The moving part of a synthetic street: pedestrians, cars and bikes on a preset.

Everything random comes from one `numpy.random.Generator`, so a seed fixes the whole
clip. Positions are normalized (x of the frame width, y of the frame height) and name
the object's foot point: the bottom centre where it touches the ground.

Behaviour, kept simple but plausible:
- vehicles keep their lane, follow the one ahead at a safe gap, and yield to anyone on
  the crosswalk if they have not reached it yet, so queues form and dissolve;
- pedestrians walk along a sidewalk; some walk to the crosswalk, wait at the curb,
  cross and walk off along the other side; some stop for a while on the way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sample_videos.preset import Lane, Preset

# Desired speeds: horizontal in frame widths per second, crossing in heights per second.
PERSON_SPEED = (0.035, 0.06)
CROSS_SPEED = (0.055, 0.08)
CAR_SPEED = (0.16, 0.27)
BIKE_SPEED = (0.09, 0.14)
EDGE_MARGIN = 0.25  # spawn and despawn this far outside the frame

SHIRTS = [(200, 60, 50), (40, 90, 180), (230, 200, 60), (60, 150, 70), (240, 240, 235),
          (30, 30, 35), (150, 60, 160), (230, 120, 40), (90, 180, 200), (170, 30, 60),
          (120, 120, 125), (250, 150, 170)]
PANTS = [(40, 45, 70), (25, 25, 30), (90, 80, 60), (60, 60, 65), (140, 120, 90), (30, 60, 110)]
SKIN = [(240, 205, 175), (210, 165, 120), (160, 110, 75), (110, 75, 50), (225, 185, 150)]
HAIR = [(20, 15, 10), (70, 45, 25), (150, 110, 60), (200, 190, 160), (40, 30, 25)]
CAR_PAINT = [(180, 30, 35), (25, 60, 140), (220, 220, 225), (35, 35, 40), (140, 145, 150),
             (20, 100, 60), (230, 180, 40), (90, 30, 90), (200, 110, 40), (60, 130, 170)]
BIKE_FRAMES = [(200, 30, 30), (30, 30, 30), (40, 110, 200), (230, 230, 230), (40, 160, 80)]


@dataclass
class Agent:
    track_id: int
    cls: str
    x: float
    foot_y: float
    direction: int  # +1 right, -1 left (for a person crossing: the way it faces afterwards)
    speed: float
    size: float  # multiplies the class's base size
    colors: dict[str, tuple[int, int, int]]
    variant: str = ""
    phase: float = 0.0  # gait or pedal phase, advances with distance travelled
    vx: float = 0.0  # current velocity, frame widths per second
    vy: float = 0.0
    # pedestrian plan
    state: str = "walk"  # walk | wait | cross | pause
    cross_at_x: float | None = None
    target_y: float = 0.0
    timer_s: float = 0.0
    pause_at_x: float | None = None
    lane: Lane | None = None
    extras: dict[str, float] = field(default_factory=dict)

    @property
    def moving(self) -> bool:
        return abs(self.vx) + abs(self.vy) > 1e-6


@dataclass(frozen=True)
class Density:
    """Mean arrivals per second; `vigil`'s renderer option --density multiplies all."""

    person: float = 0.55
    car_per_lane: float = 0.28
    bike_per_lane: float = 0.06
    cross_probability: float = 0.55
    pause_probability: float = 0.15

    def scaled(self, factor: float) -> "Density":
        if factor <= 0:
            raise ValueError(f"density must be > 0; was {factor}")
        return Density(self.person * factor, self.car_per_lane * factor,
                       self.bike_per_lane * factor, self.cross_probability,
                       self.pause_probability)


class World:
    def __init__(self, preset: Preset, rng: np.random.Generator, density: Density,
                 aspect: float) -> None:
        self.preset = preset
        self.rng = rng
        self.density = density
        self.aspect = aspect  # width / height, to turn height units into width units
        self.agents: list[Agent] = []
        self.arrivals = True  # False holds back new arrivals (quiet stretches)
        self._next_id = 1

    # -- spawning ---------------------------------------------------------------------
    def _new_id(self) -> int:
        track_id = self._next_id
        self._next_id += 1
        return track_id

    def _color(self, palette: list[tuple[int, int, int]]) -> tuple[int, int, int]:
        base = palette[self.rng.integers(len(palette))]
        jitter = self.rng.integers(-18, 19, size=3)
        return tuple(int(np.clip(c + j, 0, 255)) for c, j in zip(base, jitter))

    def spawn_person(self) -> None:
        rng, p = self.rng, self.preset
        far = rng.random() < 0.5
        top, bottom = p.far_walk if far else p.near_walk
        foot_y = rng.uniform(top + 0.035, bottom - 0.02)
        direction = 1 if rng.random() < 0.5 else -1
        x = -0.05 if direction > 0 else 1.05
        agent = Agent(self._new_id(), "person", x, foot_y, direction,
                      speed=rng.uniform(*PERSON_SPEED), size=rng.uniform(0.85, 1.15),
                      colors={"shirt": self._color(SHIRTS), "pants": self._color(PANTS),
                              "skin": SKIN[rng.integers(len(SKIN))],
                              "hair": HAIR[rng.integers(len(HAIR))]},
                      variant=str(rng.choice(["plain", "bag", "hat", "plain"])),
                      phase=rng.uniform(0, 2 * math.pi))
        cx0, cx1 = p.crosswalk_x
        ahead = (cx0 > x) if direction > 0 else (cx1 < x)
        if ahead and rng.random() < self.density.cross_probability:
            # keep right: southbound (from the far side, facing the camera) on the
            # screen-left half of the crosswalk, northbound on the screen-right half
            mid = (cx0 + cx1) / 2
            lo, hi = (cx0 + 0.008, mid - 0.004) if far else (mid + 0.004, cx1 - 0.008)
            agent.cross_at_x = rng.uniform(lo, hi)
            other_top, other_bottom = p.near_walk if far else p.far_walk
            agent.target_y = rng.uniform(other_top + 0.035, other_bottom - 0.02)
        elif rng.random() < self.density.pause_probability:
            agent.pause_at_x = rng.uniform(0.1, 0.9)
        self.agents.append(agent)

    def spawn_vehicle(self, lane: Lane) -> None:
        rng = self.rng
        x = -EDGE_MARGIN if lane.direction > 0 else 1 + EDGE_MARGIN
        half = self.half_length(lane.cls, 1.0, lane.foot_y)
        for other in self.agents:  # only enter when the lane's mouth is clear
            if other.lane is lane and abs(other.x - x) < 2.6 * half + 0.05:
                return
        if lane.cls == "car":
            variant = str(rng.choice(["sedan", "sedan", "hatch", "van"]))
            size = rng.uniform(0.9, 1.1) * (1.1 if variant == "van" else 1.0)
            colors = {"body": self._color(CAR_PAINT)}
            speed = rng.uniform(*CAR_SPEED)
        else:
            variant = "bike"
            size = rng.uniform(0.9, 1.1)
            colors = {"frame": self._color(BIKE_FRAMES), "shirt": self._color(SHIRTS),
                      "pants": self._color(PANTS), "skin": SKIN[rng.integers(len(SKIN))],
                      "helmet": self._color(SHIRTS)}
            speed = rng.uniform(*BIKE_SPEED)
        self.agents.append(Agent(self._new_id(), lane.cls, x, lane.foot_y, lane.direction,
                                 speed=speed, size=size, colors=colors, variant=variant,
                                 state="drive", lane=lane,
                                 phase=rng.uniform(0, 2 * math.pi)))

    # -- geometry shared with the sprites ---------------------------------------------
    def half_length(self, cls: str, size: float, foot_y: float) -> float:
        """Half an object's length along its lane, in frame widths."""
        base = {"car": 0.30, "bike": 0.13, "person": 0.05}[cls]
        return 0.5 * base * size * self.preset.scale_at(foot_y) / self.aspect

    # -- stepping ---------------------------------------------------------------------
    def step(self, dt: float) -> None:
        d = self.density
        if self.rng.random() < d.person * dt and self.arrivals:
            self.spawn_person()
        for lane in self.preset.lanes:
            rate = d.car_per_lane if lane.cls == "car" else d.bike_per_lane
            if self.rng.random() < rate * dt and self.arrivals:
                self.spawn_vehicle(lane)
        crossing = [a for a in self.agents if a.cls == "person" and a.state == "cross"]
        for agent in self.agents:
            if agent.cls == "person":
                self._step_person(agent, dt)
            else:
                self._step_vehicle(agent, dt, crossing)
        self.agents = [a for a in self.agents if -EDGE_MARGIN - 0.1 <= a.x <= 1 + EDGE_MARGIN + 0.1]

    def _step_person(self, a: Agent, dt: float) -> None:
        a.vx = a.vy = 0.0
        if a.state == "walk":
            target = a.cross_at_x if a.cross_at_x is not None else a.pause_at_x
            a.vx = a.direction * a.speed
            if target is not None and (a.x - target) * a.direction >= 0:
                a.vx = 0.0
                if a.cross_at_x is not None:
                    a.state, a.timer_s = "wait", self.rng.uniform(0.3, 2.0)
                else:
                    a.state, a.timer_s = "pause", self.rng.uniform(1.0, 3.0)
        elif a.state in ("wait", "pause"):
            a.timer_s -= dt
            if a.timer_s <= 0:
                if a.state == "wait":
                    a.state = "cross"
                    a.extras["cross_speed"] = self.rng.uniform(*CROSS_SPEED)
                else:
                    a.state, a.pause_at_x = "walk", None
        elif a.state == "cross":
            step = a.extras["cross_speed"]
            a.vy = step if a.target_y > a.foot_y else -step
            if abs(a.target_y - a.foot_y) <= step * dt:
                a.foot_y, a.vy = a.target_y, 0.0
                a.state, a.cross_at_x = "walk", None
                a.direction = 1 if self.rng.random() < 0.5 else -1
        a.x += a.vx * dt
        a.foot_y += a.vy * dt
        a.phase += (abs(a.vx) * self.aspect + abs(a.vy)) * dt / (0.035 * self.preset.scale_at(a.foot_y)) * math.pi

    def _step_vehicle(self, a: Agent, dt: float, crossing: list[Agent]) -> None:
        assert a.lane is not None
        half = self.half_length(a.cls, a.size, a.foot_y)
        front = a.x + a.direction * half
        gap = math.inf
        for other in self.agents:
            if other is a or other.lane is not a.lane:
                continue
            ahead = (other.x - a.x) * a.direction
            if ahead > 0:
                other_back = other.x - other.direction * self.half_length(other.cls, other.size, other.foot_y)
                gap = min(gap, (other_back - front) * a.direction)
        cx0, cx1 = self.preset.crosswalk_x
        stop_line = cx0 - 0.015 if a.direction > 0 else cx1 + 0.015
        to_stop = (stop_line - front) * a.direction
        if to_stop > -0.005 and self._crosswalk_busy(a, crossing):
            gap = min(gap, to_stop)
        safe, slow = 0.03, 0.12
        factor = float(np.clip((gap - safe) / slow, 0.0, 1.0)) if math.isfinite(gap) else 1.0
        a.vx = a.direction * a.speed * factor
        a.x += a.vx * dt
        a.phase += abs(a.vx) * dt * 40.0

    def _crosswalk_busy(self, vehicle: Agent, crossing: list[Agent]) -> bool:
        """Someone on the crosswalk (or stepping onto it) in or near this lane."""
        for person in crossing:
            if abs(person.foot_y - vehicle.foot_y) < 0.12:
                return True
        return False
