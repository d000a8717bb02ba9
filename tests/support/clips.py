"""The bundled clips and their ground truth, for tests that need them at import time
(a module named `conftest` is ambiguous once a sub-folder has its own)."""

from __future__ import annotations

import json
from pathlib import Path

from sample_videos.range import truth_path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_DIR = ROOT / "sample_videos"
BUNDLED = sorted(SAMPLE_DIR.glob("*.mp4"))


def load_truth(clip: Path) -> dict:
    return json.loads(truth_path(clip).read_text())
