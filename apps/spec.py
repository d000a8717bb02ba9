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
from typing import Annotated, Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, StrictFloat, StringConstraints, ValidationError, WithJsonSchema,
                      field_validator, model_validator)

from apps.detectors import HOST_DETECTORS, build_host_detector
from apps.documents import load_yaml
from core.numbers import json_int
from streams.blocks import MAX_FPS

BUILTIN_DIR = Path(__file__).parent / "builtin"
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")  # matched whole (fullmatch): no trailing newline
NAME_RULE = "lowercase letters, digits, '-' or '_' (at most 64, starting with a letter or digit)"
MAX_SHOWN_CHARS = 200  # a value echoed in an error message is cut to this
# fields a running app may change (PATCH): the rest change what it tracks, so it restarts
# (not filters and masks: the classes they may name depend on the app's detector, which a
# PATCH body does not carry, so the PATCH schema could not state what is accepted)
LIVE_FIELDS = ("slo_ms", "fps", "lines", "zones", "zone_inertia", "priority", "min_confidence", "loiter_s",
               "stationary_s")
EVERY_CLASS = "*"  # a `filters` key: the filter of each class without its own
MAX_SLO_MS = 600_000  # ten minutes: the longest latency target any request may ask for

# Lines and zones are checked by validators that name the problem in words; their JSON
# schema states the same rules, so the OpenAPI document promises what is accepted.
_POINT = {"type": "array", "prefixItems": [{"type": "number", "minimum": 0, "maximum": 1}] * 2,
          "minItems": 2, "maxItems": 2}
Point = Annotated[tuple[StrictFloat, StrictFloat], WithJsonSchema(_POINT)]
Line = Annotated[tuple[Point, Point], WithJsonSchema({"type": "array", "prefixItems": [_POINT, _POINT],
                                                      "minItems": 2, "maxItems": 2, "uniqueItems": True})]
Zone = Annotated[list[Point], Field(max_length=256),
                 WithJsonSchema({"type": "array", "items": _POINT, "minItems": 3, "maxItems": 256})]
# names of lines and zones: they appear in events, metrics and topics
PartName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9 _-]{0,63}$")]


def valid_name(name: Any) -> bool:
    """A stream, app or model name: NAME_PATTERN, matched as a whole."""
    return isinstance(name, str) and NAME_PATTERN.fullmatch(name) is not None


def unknown_classes(classes: list[str] | None, detector: str, labels) -> str | None:
    """What is wrong with an app's `classes` for its detector's labels; None when it knows them all."""
    unknown = [c for c in classes or [] if c not in labels]
    return f"classes {unknown} are not labels of {detector!r} ({list(labels)})" if unknown else None


def shown(value: Any) -> str:
    """`repr(value)` cut to about MAX_SHOWN_CHARS characters, for error messages."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN_CHARS else f"{text[:MAX_SHOWN_CHARS]}... ({len(text)} characters)"


class SpecError(ValueError):
    """An app spec is invalid; the message names the source, field and fix."""


class AppearanceOptions(BaseModel):
    """Colour as a second cue beside IoU, for crowds (OC-SORT only; apps/ocsort.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    gate: float = Field(60.0, gt=0, le=442, description="the most the mean colour of the middle of a box (RGB, "
                                                        "0-255 a channel) may differ from its track's for the "
                                                        "box to continue the track")
    weight: float = Field(1.0, ge=0, le=10, description="what the likeness of colours adds to a pair's IoU "
                                                        "when detections are matched to tracks")


# the schema says what `_crowd_options_need_ocsort` checks, so that a client generating
# requests from it (and schemathesis) knows these fields go only with kind: ocsort
OCSORT_ONLY_SCHEMA = {"if": {"properties": {"kind": {"const": "bytetrack"}}, "required": ["kind"]},
                      "then": {"properties": {"appearance": {"type": "null"}, "height_iou": {"const": False}}}}


class TrackerOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True,
                              json_schema_extra=OCSORT_ONLY_SCHEMA)

    lost_track_s: float = Field(1.5, gt=0, le=600, description="keep a lost track this long for re-association")
    min_hits: json_int(ge=1, le=1000) = Field(3, description="detections in a row that confirm a track: it "
                                                             "is confirmed on the min_hits-th (the second at "
                                                             "the earliest)")
    match_iou: float = Field(0.1, gt=0, lt=1, description="minimum IoU to match a detection to a track")
    activation_confidence: float = Field(0.25, ge=0, le=1, description="confidence to start a track")
    kind: Literal["bytetrack", "ocsort"] = Field(
        "ocsort", description="the tracker: ocsort (OC-SORT, the default: "
        "corrects its Kalman filter from the detections after an occlusion and weighs motion direction) or "
        "bytetrack (IoU matching on the filter's boxes, "
        "with a second pass for low-confidence detections below activation_confidence); both take every "
        "field above")
    appearance: AppearanceOptions | None = Field(
        None, description="ocsort only: match by colour too, so that where people stand or pass close together "
        "a track does not slide onto a neighbour; off when unset")
    height_iou: bool = Field(False, description="ocsort only: match on IoU times the overlap of the boxes' heights "
                                                "(Hybrid-SORT), so that people overlapping on screen at different "
                                                "depths are told apart")
    class_groups: list[Annotated[list[Annotated[str, Field(max_length=64)]], Field(min_length=2, max_length=256)]] = \
        Field(default_factory=list, max_length=16,
              description="sets of classes the detector takes one object for in turn (COCO's car, truck and bus): "
                          "boxes of one set that overlap are one object, tracked as one whatever class each frame "
                          "gives it, and its class is the one it had most often; sets that share a class are one")

    @model_validator(mode="after")
    def _crowd_options_need_ocsort(self) -> TrackerOptions:
        for name in ("appearance", "height_iou"):
            if getattr(self, name) not in (None, False) and self.kind != "ocsort":
                raise ValueError(f"tracker.{name} needs kind: ocsort; kind is {self.kind}, which matches by IoU "
                                 "alone")
        return self


class SkipOptions(BaseModel):
    """Static-frame skipping (NoScope's difference detector, Clipper's cache): a frame
    that differs from the last analysed one by less than `threshold` reuses its result."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    threshold: float = Field(12.0, gt=0, le=255, description="largest change of any thumbnail cell, in 8-bit "
                                                               "levels, after dividing out the global brightness")
    cell_px: json_int(ge=2, le=256) = Field(10, description="thumbnail cell size in pixels")
    max_skip_s: float = Field(2.0, gt=0, le=3600, description="analyse at least this often anyway")


class ClassFilter(BaseModel):
    """What a detection of a class must be to count: its box's size and shape, as shares
    of the frame (so one filter fits every resolution), and its score. A minimum over
    its maximum is not refused (the OpenAPI schema, which states every rule the server
    enforces, cannot compare two fields): that class then keeps no detection, and the
    app's quiet warning says so after `quiet_after_s`."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    min_area: float = Field(0.0, ge=0, le=1, description="smallest box area, as a share of the frame's area")
    max_area: float = Field(1.0, gt=0, le=1, description="largest box area, as a share of the frame's area")
    min_ratio: float = Field(0.0, ge=0, le=100, description="smallest box width / height, in pixels")
    max_ratio: float = Field(100.0, gt=0, le=100, description="largest box width / height, in pixels")
    min_score: float | None = Field(None, ge=0, le=1, description="this class's confidence floor "
                                                                  "(the app's min_confidence when omitted)")


class ObjectMask(BaseModel):
    """A polygon where detections (of `classes`, or of every class) are ignored: a
    detection is inside when its box's bottom centre is, where an object touches the
    ground (Frigate's rule), so a parked car's lot can be masked without hiding the
    people who walk past in front of it."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # points: StrictFloat

    polygon: Zone = Field(description="at least 3 normalized [x, y] points")
    classes: list[Annotated[str, Field(max_length=64)]] | None = Field(
        None, max_length=256, description="the classes it hides; every class when omitted")

    @field_validator("polygon")
    @classmethod
    def _polygon(cls, v: list[Point]) -> list[Point]:
        if len(v) < 3:
            raise ValueError(f"a mask needs at least 3 points; has {len(v)}")
        _check_points("mask", v)
        return v


_HOSTS = sorted(HOST_DETECTORS)
# The rules between fields (the validator below), as JSON Schema says them
_CROSS_FIELD_RULES = [
    {"if": {"required": ["select"], "properties": {"select": {"const": "adaptive"}}},
     "then": {"properties": {"model_version": {"type": "null"}, "detector": {"not": {"enum": _HOSTS}}}}},
    {"if": {"properties": {"detector": {"not": {"enum": _HOSTS}}}},
     "then": {"properties": {"detector_options": {"maxProperties": 0}}}},
    *({"if": {"required": ["detector"], "properties": {"detector": {"const": name}}},
       "then": {"properties": {"classes": {"anyOf": [{"type": "array", "items": {"enum": list(info.labels)}},
                                                      {"type": "null"}]},
                               "filters": {"propertyNames": {"enum": [*info.labels, EVERY_CLASS]}},
                               "loiter_classes": {"anyOf": [{"type": "array", "items": {"enum": list(info.labels)}},
                                                            {"type": "null"}]},
                               "masks": {"items": {"properties": {"classes": {"anyOf": [
                                   {"type": "array", "items": {"enum": list(info.labels)}}, {"type": "null"}]}}}},
                               "tracker": {"properties": {"class_groups": {"items": {
                                   "items": {"enum": list(info.labels)}}}}},
                               "detector_options": info.options.model_json_schema()}}}
      for name, info in HOST_DETECTORS.items()),
]


class AppSpec(BaseModel):
    """Every number is finite and bounded, every collection capped: a spec is stored,
    returned by every listing and applied to every frame."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False,
                              json_schema_extra={"allOf": _CROSS_FIELD_RULES})

    name: str = Field(description=NAME_RULE, max_length=64, json_schema_extra={"pattern": f"^{NAME_PATTERN.pattern}$"})
    source: str | None = Field(None, max_length=4096, description="the stream (a name under `vigil serve`, a URL "
                                                                 "or path for `vigil run`, which overrides it)")
    detector: str = Field("scenedet", max_length=64, json_schema_extra={"pattern": f"^{NAME_PATTERN.pattern}$"},
                          description=f"a model in the repository, or a host detector: {', '.join(HOST_DETECTORS)}")
    model_version: json_int(ge=1, le=2**31) | Annotated[str, Field(max_length=64)] | None = Field(
        None, description="model version number or label (stable, canary); the latest loaded when omitted")
    detector_options: dict[str, Any] = Field(default_factory=dict, max_length=32,
                                             description="options of a host detector")
    classes: list[Annotated[str, Field(max_length=64)]] | None = Field(
        None, max_length=256, description="keep only these classes; all when omitted")
    fps: float | None = Field(None, gt=0, le=MAX_FPS, strict=True,
                              description="frames per second to analyse; every frame when omitted")
    min_fps: float | None = Field(None, gt=0, le=MAX_FPS, strict=True,
                                  description="under overload the server may lower this app's sampled rate down "
                                              "to this many frames per second (at most fps) before its frames "
                                              "are dropped; never lowered when omitted")
    min_confidence: float = Field(0.3, ge=0, le=1, strict=True, description="detections scored below this are "
                                  "ignored (a class's filters.min_score overrides it)")
    top_k: json_int(ge=1, le=100) = Field(5, description="a classifier's best classes kept per frame")
    lines: dict[PartName, Line] = Field(default_factory=dict, max_length=64,
                                        json_schema_extra={"additionalProperties": False},
                                        description="name -> [[x, y], [x, y]], normalized (0,0 top-left): counted "
                                                    "crossings; `in` is toward B - A turned 90 degrees clockwise")
    zones: dict[PartName, Zone] = Field(default_factory=dict, max_length=64,
                                        json_schema_extra={"additionalProperties": False},
                                        description="name -> polygon of normalized points: occupancy, enter, exit "
                                                    "and dwell, by a track's bottom centre")
    slo_ms: float = Field(1000.0, gt=0, le=MAX_SLO_MS, strict=True,
                          description="latency target per frame, capture to result")
    priority: json_int(ge=0, le=10) = Field(0, description="higher runs first when the device is contended")
    tracker: TrackerOptions = Field(default_factory=TrackerOptions, description="how detections become tracks")
    skip_static: SkipOptions | None = Field(None, description="skip inference on frames that did not change")
    select: Literal["fixed", "adaptive"] = Field("fixed", description="adaptive: the engine picks among the "
                                                 "model's versions by load (fast under load, accurate otherwise)")
    zone_inertia: json_int(ge=1, le=30) = Field(3, description="the app's frames in a row a track must be seen on "
                                              "the other side of a zone's border before it counts as in or out "
                                              "(dated to the first of them): a foot stepping out for a frame is the "
                                              "same stay")
    loiter_s: float | None = Field(None, gt=0, le=86_400, strict=True,
                                   description="a zone_dwell event when a track has stayed this long in one of "
                                               "the app's zones (once per stay); none when omitted")
    loiter_classes: list[Annotated[str, Field(max_length=64)]] | None = Field(
        None, max_length=256, description="the classes loiter_s applies to; every class of the app when omitted")
    stationary_s: float | None = Field(None, gt=0, le=3600, strict=True,
                                       description="a track whose box stays put this long is stationary: it crosses "
                                                   "no line, and when lost and found again on the same spot it is the "
                                                   "same track (a parked car); off when omitted")
    filters: dict[Annotated[str, Field(max_length=64)], ClassFilter] = Field(
        default_factory=dict, max_length=256,
        description=f"per class (or {EVERY_CLASS!r} for every class without its own): the size, shape and score "
                    "a detection needs to count")
    masks: list[ObjectMask] = Field(default_factory=list, max_length=32,
                                    description="object masks: polygons where detections are ignored")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not valid_name(v):
            raise ValueError(f"must be {NAME_RULE}")
        return v

    @field_validator("detector")
    @classmethod
    def _detector(cls, v: str) -> str:
        if not valid_name(v):
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
            for c in self.named_classes:
                if c not in host.labels:
                    raise ValueError(f"classes: {c!r} is not produced by detector {self.detector!r} "
                                     f"(it produces {list(host.labels)})")
            build_host_detector(self.detector, self.detector_options)  # refuses bad options now, not per frame
        elif self.detector_options:
            raise ValueError("detector_options are for host detectors; a model's options live in its model.yaml")
        if self.select == "adaptive" and (host is not None or self.model_version is not None):
            raise ValueError("select: adaptive chooses among a model's versions; it needs a model detector "
                             "and no model_version")
        return self

    @property
    def host_detector(self) -> bool:
        return self.detector in HOST_DETECTORS

    @property
    def named_classes(self) -> list[str]:
        """Every class the spec names (classes, filters, masks, the tracker's class groups):
        each must be a label of its detector."""
        named = list(self.classes or []) + [c for c in self.filters if c != EVERY_CLASS]
        named += [c for m in self.masks for c in m.classes or []] + list(self.loiter_classes or [])
        named += [c for group in self.tracker.class_groups for c in group]
        return list(dict.fromkeys(named))


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
        raise SpecError(format_errors(exc.errors(), origin, AppSpec)) from None


def format_errors(errors: list[dict], origin: str | None = None, model: type[BaseModel] | None = None) -> str:
    """Pydantic's errors, a line each: `origin: field: problem; was VALUE`, the value cut
    short (a 1 MB bad field must not come back as a 1 MB error), the first ten only (a
    thousand bad points need only a few), an unknown field with the known ones of the
    model it was found in (`model`'s own, or a nested model's)."""
    prefix = f"{origin}: " if origin else ""
    problems = []
    for err in errors[:10]:
        field = field_path(err["loc"]) or "(spec)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            fields = _fields_at(model, err["loc"][:-1])
            msg = "unknown field; check the spelling" + (f" (fields: {', '.join(fields)})" if fields else "")
        given = err.get("input")
        quiet = err["type"] in ("missing", "extra_forbidden") or isinstance(given, dict)
        echo = "" if quiet else f"; was {shown(given)}"
        problems.append(f"{prefix}{field[:MAX_SHOWN_CHARS]}: {msg[:MAX_SHOWN_CHARS]}{echo}")
    if len(errors) > 10:
        problems.append(f"{prefix}... and {len(errors) - 10} more problems")
    return "\n".join(problems)


def _fields_at(model: type[BaseModel] | None, loc: tuple) -> list[str]:
    """The field names of the model found at `loc` inside `model` ([] if it is not one)."""
    for part in loc:
        info = model.model_fields.get(part) if model is not None and isinstance(part, str) else None
        kind = getattr(info, "annotation", None)
        for candidate in (kind, *getattr(kind, "__args__", ())):  # X, or X | None
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                model = candidate
                break
        else:
            return []
    return list(model.model_fields) if model is not None else []


_BRANCH_TAGS = {"int", "str", "float", "bool", "list", "none", "constrained-str", "constrained-int"}


def field_path(loc) -> str:
    """`zones.z.3` from a pydantic error's location, without the tags of union branches
    (`model_version.function-after[...]`) that mean nothing to the user."""
    return ".".join(str(p) for p in loc
                    if not (isinstance(p, str) and ("[" in p or "(" in p or p in _BRANCH_TAGS)))


def load_spec(ref: str) -> AppSpec:
    """A built-in app name, or a path to a YAML/JSON spec file."""
    path = BUILTIN_DIR / f"{ref}.yaml" if valid_name(ref) and not Path(ref).exists() else Path(ref)
    if not path.exists():
        raise SpecError(f"unknown app {ref!r}: not a built-in app ({', '.join(builtin_names())}) "
                        "and no such spec file")
    try:
        data = load_yaml(path.read_text())
    except ValueError as exc:
        raise SpecError(f"{path}: {exc}") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_spec(data, origin=str(path) if path.parent != BUILTIN_DIR else ref)
