"""Host detectors: the ones that run beside the apps instead of in the engine.

A detector that keeps per-stream state (a background model) cannot be batched across
streams, so it runs on the app's side, one instance per app and stream. Everything
else is a model in the engine's repository, named by the app spec's `detector`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

from pydantic import BaseModel, ValidationError

from apps.detectors.motion import MotionDetector, MotionOptions
from core.detections import Detections
from core.frames import FrameBlock


class Detector(Protocol):
    labels: tuple[str, ...]

    def detect(self, block: FrameBlock) -> list[Detections]:
        """One `Detections` per frame of the block, in pixel coordinates of the block."""
        ...


@dataclass(frozen=True)
class DetectorInfo:
    labels: tuple[str, ...]
    options: type[BaseModel]  # what `detector_options` may hold
    build: Callable[[Any], Detector]  # from options of that type
    summary: str


HOST_DETECTORS: dict[str, DetectorInfo] = {
    "motion": DetectorInfo(("motion",), MotionOptions, MotionDetector,
                           "background subtraction: moving blobs, no classes"),
}


def build_host_detector(name: str, options: dict[str, Any] | None = None) -> Detector:
    try:
        info = HOST_DETECTORS[name]
    except KeyError:
        raise ValueError(f"unknown host detector {name!r}; known: {sorted(HOST_DETECTORS)}") from None
    try:
        return info.build(info.options.model_validate(dict(options or {})))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))[:64]}: {e['msg']}" for e in exc.errors()[:5])
        raise ValueError(f"detector {name!r}: bad detector_options: {problems}") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"detector {name!r}: bad detector_options: {exc}") from None
