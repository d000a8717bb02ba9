"""Snapshots of events: the frame an event was seen on with the object's box drawn, and
a crop of the object, as JPEG.

They are written before the event is stored, so whatever reads a stored event (the
API, MQTT, webhooks) finds its snapshot already there. An event with a box on one of
its block's frames carries `snapshot: "<UTC day>/<key>"`; the files are
`<folder>/<day>/<key>.jpg` and `<key>-crop.jpg`. Events of one object on one frame
(its track_start and a zone_enter, say) share one snapshot.

Retention: files older than `retain_days` go, then the oldest while the folder holds
more than `max_mb`. It is applied at start, when a write takes the folder past
`max_mb` (down to `LOW_WATER` of it, so that a full folder is not scanned at every
write), and at a write `PRUNE_EVERY_S` after the last time. A snapshot that cannot be
written (disk full) is logged once and the event is stored without one.
"""

from __future__ import annotations

import logging
import os
import re
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Callable

import cv2
import numpy as np

from core.events import Event
from core.frames import FrameBlock

log = logging.getLogger("vigil.snapshots")

CROP_MARGIN = 0.15  # of the box's width and height, on each side of the crop
JPEG_QUALITY = 85
BOX_RGB = (255, 48, 48)
PRUNE_EVERY_S = 3600.0  # age retention is applied at least this often while snapshots come
LOW_WATER = 0.9  # of max_mb, what a prune for size leaves
KEY = re.compile(r"^\d{4}-\d{2}-\d{2}/[0-9a-f]{32}$")


def with_links(event: dict) -> dict:
    """A stored event as sinks send it: with its snapshot's and crop's API paths when it
    has one (`has_snapshot`, as Frigate says it)."""
    if not event.get("snapshot"):
        return {**event, "has_snapshot": False}
    base = f"/v1/events/{event['id']}"
    return {**event, "has_snapshot": True, "snapshot_url": f"{base}/snapshot.jpg", "crop_url": f"{base}/crop.jpg"}


def crop_bounds(box: list[float], width: int, height: int, margin: float = CROP_MARGIN) -> tuple[int, int, int, int]:
    """The crop of `box` (xyxy) with `margin` of its size around it, inside the frame."""
    x0, y0, x1, y1 = box
    dx, dy = (x1 - x0) * margin, (y1 - y0) * margin
    left, top = max(0, int(np.floor(x0 - dx))), max(0, int(np.floor(y0 - dy)))
    right, bottom = min(width, int(np.ceil(x1 + dx))), min(height, int(np.ceil(y1 + dy)))
    return left, top, max(left + 1, right), max(top + 1, bottom)


class SnapshotWriter:
    def __init__(self, folder: Path, retain_days: float = 7.0, max_mb: float = 1024.0,
                 wall_s: Callable[[], float] = time.time) -> None:
        self.folder = folder
        self.retain_days = retain_days
        self.max_bytes = max_mb * 1024 * 1024
        self.wall_s = wall_s
        self._failed = False
        self._bytes = 0  # in the folder, as of the last prune and the writes since
        self._pruned_at = wall_s()
        folder.mkdir(parents=True, exist_ok=True)
        self.prune()

    def attach(self, events: list[Event], block: FrameBlock | None) -> list[Event]:
        """`events` with a snapshot for each that has a box on one of `block`'s frames."""
        if block is None or not any("box" in e.data for e in events):
            return events
        frames = {float(t): i for i, t in enumerate(block.pts_ms)}
        made: dict[tuple, str | None] = {}
        out = []
        for e in events:
            i = frames.get(e.t_ms)
            if i is None or "box" not in e.data:
                out.append(e)
                continue
            seen = (i, e.track_id, tuple(e.data["box"]))
            if seen not in made:
                made[seen] = self._write(block.pixels[i], e.data["box"])
            key = made[seen]
            out.append(e if key is None else replace(e, data={**e.data, "snapshot": key}))
        return out

    def path(self, key: str, crop: bool = False) -> Path | None:
        """The file of a stored key, or None for a key this writer could not have made."""
        if not isinstance(key, str) or not KEY.match(key):
            return None
        return self.folder / f"{key}{'-crop' if crop else ''}.jpg"

    def _write(self, rgb: np.ndarray, box: list[float]) -> str | None:
        height, width = rgb.shape[:2]
        bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
        left, top, right, bottom = crop_bounds(box, width, height)
        crop = bgr[top:bottom, left:right].copy()  # before the box is drawn on the frame
        x0, y0, x1, y1 = (int(round(v)) for v in box)
        cv2.rectangle(bgr, (x0, y0), (x1, y1), BOX_RGB[::-1], 2)
        day = time.strftime("%Y-%m-%d", time.gmtime(self.wall_s()))
        key = f"{day}/{uuid.uuid4().hex}"
        try:
            (self.folder / day).mkdir(exist_ok=True)
            for name, image in ((f"{key}-crop.jpg", crop), (f"{key}.jpg", bgr)):  # the full frame names it: last
                ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
                if not ok:
                    raise OSError("JPEG encoding failed")
                tmp = self.folder / f"{name}.tmp"
                tmp.write_bytes(data.tobytes())
                os.replace(tmp, self.folder / name)
                self._bytes += data.size
        except OSError as exc:
            if not self._failed:
                log.error("snapshots: cannot write under %s (%s); events are stored without them", self.folder, exc)
                self._failed = True
            return None
        self._failed = False
        if self._bytes > self.max_bytes or self.wall_s() - self._pruned_at >= PRUNE_EVERY_S:
            self.prune()
        return key

    def prune(self) -> int:
        """Remove what retention says; returns the files removed."""
        self._pruned_at = self.wall_s()
        cutoff = self._pruned_at - self.retain_days * 86400.0
        files = []
        for day in self.folder.iterdir():
            if not day.is_dir():
                continue
            for f in day.glob("*.jpg"):
                try:
                    st = f.stat()
                except OSError:
                    continue
                files.append((st.st_mtime, st.st_size, f))
        files.sort()
        total = sum(size for _, size, _ in files)
        keep_bytes = self.max_bytes * LOW_WATER if total > self.max_bytes else self.max_bytes
        removed = 0
        for mtime, size, f in files:
            if mtime >= cutoff and total <= keep_bytes:
                break
            f.unlink(missing_ok=True)
            total -= size
            removed += 1
        self._bytes = total
        for day in self.folder.iterdir():
            if day.is_dir() and not any(day.iterdir()):
                day.rmdir()
        return removed
