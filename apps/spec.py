"""App specs: what an app watches, with which detector, and what it counts.

Specs are YAML (or JSON) parsed once into a frozen `AppSpec`. Every mistake is reported
with the field path, what is wrong and the value given, e.g.
`people.yaml: slo_ms: must be > 0; was -5`.

Coordinates of lines and zones are normalized to the frame: (0, 0) top-left, (1, 1)
bottom-right. A line is two points A, B; a crossing towards B - A turned 90 degrees
clockwise on screen is "in" (for a line drawn bottom to top, moving right is "in").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from apps.detectors import HOST_DETECTORS

BUILTIN_DIR = Path(__file__).parent / "builtin"
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")

Point = tuple[float, float]


class SpecError(ValueError):
    """An app spec is invalid; the message names the source, field and fix."""


class TrackerOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    lost_track_s: float = Field(1.5, gt=0, description="keep a lost track this long for re-association")
    min_hits: int = Field(3, ge=1, description="consecutive detections before a track is confirmed")
    match_iou: float = Field(0.1, gt=0, lt=1, description="minimum IoU to match a detection to a track")
    activation_confidence: float = Field(0.25, ge=0, le=1, description="confidence to start a track")


class SkipOptions(BaseModel):
    """Static-frame skipping (NoScope's difference detector, Clipper's cache): a frame
    that differs from the last analysed one by less than `threshold` reuses its result."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    threshold: float = Field(12.0, gt=0, description="largest change of any thumbnail cell, in 8-bit levels, "
                                                       "after dividing out the global brightness")
    cell_px: int = Field(10, ge=2, description="thumbnail cell size in pixels")
    max_skip_s: float = Field(2.0, gt=0, description="analyse at least this often anyway")


class AppSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    source: str | None = Field(None, description="stream URL; `vigil run SOURCE` overrides it")
    detector: str = Field("scenedet", description="a model in the repository, or a host detector: "
                                                    f"{', '.join(sorted(HOST_DETECTORS))}")
    model_version: int | str | None = Field(None, description="model version number or label (stable, canary); "
                                                                "the latest loaded when omitted")
    detector_options: dict[str, Any] = Field(default_factory=dict, description="options of a host detector")
    classes: list[str] | None = Field(None, description="keep only these classes; all when omitted")
    fps: float | None = Field(None, gt=0, description="frames per second to analyse; every frame when omitted")
    min_confidence: float = Field(0.3, ge=0, le=1)
    lines: dict[str, tuple[Point, Point]] = Field(default_factory=dict)
    zones: dict[str, list[Point]] = Field(default_factory=dict)
    slo_ms: float = Field(1000.0, gt=0, description="latency target per frame, capture to result")
    priority: int = Field(0, ge=0, le=10, description="higher runs first when the device is contended")
    tracker: TrackerOptions = Field(default_factory=TrackerOptions)
    skip_static: SkipOptions | None = Field(None, description="skip inference on frames that did not change")
    select: Literal["fixed", "adaptive"] = Field("fixed", description="adaptive: the engine picks among the "
                                                 "model's versions by load (fast under load, accurate otherwise)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_PATTERN.match(v):
            raise ValueError("must be lowercase letters, digits, '-' or '_' (at most 64, starting "
                             "with a letter or digit)")
        return v

    @field_validator("detector")
    @classmethod
    def _detector(cls, v: str) -> str:
        if not NAME_PATTERN.match(v):
            raise ValueError("must name a model in the repository or a host detector "
                             f"({', '.join(sorted(HOST_DETECTORS))})")
        return v

    @field_validator("lines")
    @classmethod
    def _lines(cls, v: dict[str, tuple[Point, Point]]) -> dict[str, tuple[Point, Point]]:
        for name, (a, b) in v.items():
            _check_points(f"line {name!r}", (a, b))
            if a == b:
                raise ValueError(f"line {name!r} has two equal points; give two different points")
        return v

    @field_validator("zones")
    @classmethod
    def _zones(cls, v: dict[str, list[Point]]) -> dict[str, list[Point]]:
        for name, polygon in v.items():
            if len(polygon) < 3:
                raise ValueError(f"zone {name!r} needs at least 3 points; has {len(polygon)}")
            _check_points(f"zone {name!r}", polygon)
        return v

    @model_validator(mode="after")
    def _classes_known(self) -> "AppSpec":
        host = HOST_DETECTORS.get(self.detector)
        if host is not None:
            for c in self.classes or []:
                if c not in host.labels:
                    raise ValueError(f"classes: {c!r} is not produced by detector {self.detector!r} "
                                     f"(it produces {list(host.labels)})")
        elif self.detector_options:
            raise ValueError("detector_options are for host detectors; a model's options live in its model.yaml")
        if self.select == "adaptive" and (host is not None or self.model_version is not None):
            raise ValueError("select: adaptive chooses among a model's versions; it needs a model detector "
                             "and no model_version")
        return self

    @property
    def host_detector(self) -> bool:
        return self.detector in HOST_DETECTORS


def _check_points(what: str, points) -> None:
    for x, y in points:
        if not (0.0 <= x <= 1.0 and 0.0 <= y <= 1.0):
            raise ValueError(f"{what}: point ({x}, {y}) is outside the frame; coordinates are "
                             "normalized to 0..1")


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def parse_spec(data: Any, origin: str = "app spec") -> AppSpec:
    if not isinstance(data, dict):
        raise SpecError(f"{origin}: an app spec is a mapping of fields (name, detector, ...); "
                        f"got {type(data).__name__}")
    try:
        return AppSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_validation_error(origin, exc)) from None


def format_validation_error(origin: str, exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(spec)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field; check the spelling (fields: " + ", ".join(AppSpec.model_fields) + ")"
        given = err.get("input")
        shown = "" if err["type"] in ("missing", "extra_forbidden") or isinstance(given, dict) else f"; was {given!r}"
        problems.append(f"{origin}: {field}: {msg}{shown}")
    return "\n".join(problems)


def load_spec(ref: str) -> AppSpec:
    """A built-in app name, or a path to a YAML/JSON spec file."""
    path = BUILTIN_DIR / f"{ref}.yaml" if NAME_PATTERN.match(ref) and not Path(ref).exists() else Path(ref)
    if not path.exists():
        raise SpecError(f"unknown app {ref!r}: not a built-in app ({', '.join(builtin_names())}) "
                        "and no such spec file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_spec(data, origin=str(path) if path.parent != BUILTIN_DIR else ref)
