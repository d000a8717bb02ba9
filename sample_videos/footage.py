"""Real footage that Vigil is evaluated on but does not ship, and its hand labels.

Each video comes from a registry package (Debian's opencv-doc for vtest.avi), found where
the package installs it or where `scripts/real-footage.sh` (run by `make demo`) copied it.
Its labels are `footage/NAME.labels.json` beside this file: for some frames, a box around
every person in view (`person`), `ignore` boxes around people nobody could judge fairly
(mostly hidden or cut by the frame's edge), where a detection counts neither way, and a
box around every car, van, truck or bus (`vehicle`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LABELS = Path(__file__).resolve().parent / "footage"
PLACES = {"vtest": [Path("/usr/share/doc/opencv-doc/examples/data/vtest.avi"), ROOT / ".cache/vtest.avi"]}
FETCH = {"vtest": "apt-get install opencv-doc, or scripts/real-footage.sh (which make demo runs)"}


@dataclass(frozen=True)
class LabelledFrame:
    index: int
    person: np.ndarray  # [N, 4] xyxy, frame pixels
    ignore: np.ndarray  # [M, 4]
    vehicle: np.ndarray  # [K, 4]

    def count_error(self, count: int) -> int:
        """How far a head count is from the labels: zero anywhere from the people
        labelled to those plus the ones in ignore boxes."""
        return max(0, len(self.person) - count, count - len(self.person) - len(self.ignore))


@dataclass(frozen=True)
class Footage:
    name: str
    video: Path
    size: tuple[int, int]  # width, height
    frames: list[LabelledFrame]


def footage_names() -> list[str]:
    return sorted(p.name.removesuffix(".labels.json") for p in LABELS.glob("*.labels.json"))


def _boxes(rows: list, what: str, size: tuple[int, int]) -> np.ndarray:
    boxes = np.array(rows, np.float64).reshape(-1, 4)
    w, h = size
    bad = ~((boxes[:, 0] < boxes[:, 2]) & (boxes[:, 1] < boxes[:, 3]) & (boxes[:, :2] >= 0).all(1)
            & (boxes[:, 2] <= w) & (boxes[:, 3] <= h))
    if bad.any():
        raise ValueError(f"{what}: box {boxes[bad][0].tolist()} is not x1 < x2, y1 < y2 inside {w}x{h}")
    return boxes


def load_footage(name: str) -> Footage:
    """The labels of footage `name` and where its video is; ValueError naming what is
    missing and how to install it."""
    path = LABELS / f"{name}.labels.json"
    if not path.is_file():
        raise ValueError(f"no labelled footage {name!r} (have {footage_names()})")
    doc = json.loads(path.read_text())
    size = tuple(doc["size"])
    frames = [LabelledFrame(int(k), *(_boxes(v.get(kind, []), f"{path.name} frame {k}", size)
                                      for kind in ("person", "ignore", "vehicle")))
              for k, v in sorted(doc["frames"].items(), key=lambda kv: int(kv[0]))]
    video = next((p for p in PLACES.get(name, []) if p.is_file()), None)
    if video is None:
        raise ValueError(f"{doc['video']} is not installed: {FETCH.get(name, 'see ' + path.name)}")
    return Footage(name, video, size, frames)


def read_frames(video: Path, indices: list[int]) -> tuple[dict[int, np.ndarray], float]:
    """RGB frames of a video, by index, and its frame rate."""
    cap, wanted, out, i = cv2.VideoCapture(str(video)), set(indices), {}, 0
    try:
        while len(out) < len(wanted):
            ok, frame = cap.read()
            if not ok:
                raise ValueError(f"{video} ends at frame {i}, before frame {max(wanted)}")
            if i in wanted:
                out[i] = cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
            i += 1
        fps = cap.get(cv2.CAP_PROP_FPS)
    finally:
        cap.release()
    return out, fps
