"""Scene presets: the fixed parts of a synthetic street camera.

A preset fixes the camera, the ground plan (sidewalks, lanes, crosswalk) and the named
counting lines and zones. A seed varies only what moves, its colours and timing, and
the lighting; so an app configured with a preset's lines and zones works on every clip
rendered from that preset.

Coordinates are normalized to the frame: x in [0, 1] left to right, y in [0, 1] top to
bottom. Sizes of things are in units of the frame height, so figures keep their shape
at any aspect ratio.

Line direction convention (shared with `apps.lines`): a line runs from its first point
A to its second point B. A crossing is "in" when the anchor moves to the side that
B - A, turned 90 degrees clockwise on screen, points to; "out" the other way. For a
line drawn bottom to top, moving right is "in"; for a line drawn left to right, moving
down is "in".
"""

from __future__ import annotations

from dataclasses import dataclass, field

Point = tuple[float, float]

CLASSES = ("person", "car", "bike")


@dataclass(frozen=True)
class Lane:
    """A lane vehicles drive along at a fixed foot (ground-contact) height."""

    name: str
    cls: str  # "car" or "bike"
    foot_y: float
    direction: int  # +1 moves right, -1 moves left


@dataclass(frozen=True)
class Preset:
    name: str
    horizon_y: float  # bottom of the buildings, top of the far sidewalk
    far_walk: tuple[float, float]  # (top, bottom) of the far (north) sidewalk
    road: tuple[float, float]
    near_walk: tuple[float, float]  # near (south) sidewalk
    crosswalk_x: tuple[float, float]
    lanes: tuple[Lane, ...]
    lines: dict[str, tuple[Point, Point]] = field(default_factory=dict)
    zones: dict[str, tuple[Point, ...]] = field(default_factory=dict)
    background_seed: int = 7

    def scale_at(self, foot_y: float) -> float:
        """Mild perspective: things nearer the camera (lower in the frame) look larger."""
        top, bottom = self.far_walk[0], self.near_walk[1]
        return 0.55 + 0.75 * (foot_y - top) / (bottom - top)


STREET = Preset(
    name="street",
    horizon_y=0.30,
    far_walk=(0.30, 0.42),
    road=(0.42, 0.78),
    near_walk=(0.78, 0.95),
    crosswalk_x=(0.22, 0.30),
    lanes=(
        Lane("far_bike", "bike", 0.465, -1),
        Lane("far_car", "car", 0.565, -1),
        Lane("near_car", "car", 0.735, +1),
        Lane("near_bike", "bike", 0.775, +1),
    ),
    lines={
        # Drawn bottom to top: moving right (eastbound) is "in".
        "midblock": ((0.62, 0.97), (0.62, 0.27)),
        # Drawn left to right: moving down (southbound, toward the camera) is "in".
        "crosswalk": ((0.19, 0.60), (0.33, 0.60)),
    },
    zones={
        "crosswalk": ((0.21, 0.42), (0.31, 0.42), (0.31, 0.78), (0.21, 0.78)),
        "north_sidewalk": ((0.0, 0.29), (1.0, 0.29), (1.0, 0.42), (0.0, 0.42)),
        "road": ((0.0, 0.42), (1.0, 0.42), (1.0, 0.78), (0.0, 0.78)),
        "south_sidewalk": ((0.0, 0.78), (1.0, 0.78), (1.0, 0.96), (0.0, 0.96)),
    },
)

PRESETS = {STREET.name: STREET}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown scene preset {name!r}; known: {sorted(PRESETS)}") from None
