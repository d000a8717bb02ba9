"""Which footage is the synthetic range's own: what `synthetic://` renders live, and a
clip the renderer wrote, which has its ground truth (NAME.gt.json) beside it."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse


def truth_path(clip: Path) -> Path:
    return clip.with_name(clip.stem + ".gt.json")


def from_the_range(source: str) -> bool:
    if source.startswith("synthetic://"):
        return True
    parsed = urlparse(source)
    if parsed.scheme not in ("", "file"):
        return False  # a camera (rtsp://, http://, ...)
    path = Path(parsed.path if parsed.scheme == "file" else source)
    return truth_path(path).is_file()
