import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.clips import BUNDLED  # noqa: E402  (after the path is set)


@pytest.fixture(scope="session")
def bundled_clips() -> list[Path]:
    assert BUNDLED, "no bundled clips in sample_videos/"
    return BUNDLED


@pytest.fixture(scope="session")
def short_clip(tmp_path_factory) -> tuple[Path, dict]:
    """A 2-second rendered clip with its ground truth (real H.264 through PyAV)."""
    from sample_videos.render import RenderConfig, write_clip

    out = tmp_path_factory.mktemp("clips") / "short.mp4"
    truth = write_clip(RenderConfig(seed=5, duration_s=2.0), out)
    return out, truth
