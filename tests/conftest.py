import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

SAMPLE_DIR = ROOT / "sample_videos"
BUNDLED = sorted(SAMPLE_DIR.glob("*.mp4"))


@pytest.fixture(scope="session")
def bundled_clips() -> list[Path]:
    assert BUNDLED, "no bundled clips in sample_videos/"
    return BUNDLED


def load_truth(clip: Path) -> dict:
    return json.loads(clip.with_name(clip.stem + ".gt.json").read_text())


@pytest.fixture(scope="session")
def short_clip(tmp_path_factory) -> tuple[Path, dict]:
    """A 2-second rendered clip with its ground truth (real H.264 through PyAV)."""
    from sample_videos.render import RenderConfig, write_clip

    out = tmp_path_factory.mktemp("clips") / "short.mp4"
    truth = write_clip(RenderConfig(seed=5, duration_s=2.0), out)
    return out, truth
