"""Event snapshots (runtime/snapshots.py): the frame with the object's box and a crop,
written before the event is stored, shared by one object's events on one frame, and
kept by days and size."""

from __future__ import annotations

import os
import time

import cv2
import numpy as np

from core.events import Event
from core.frames import FrameBlock
from runtime.snapshots import LOW_WATER, PRUNE_EVERY_S, SnapshotWriter, crop_bounds, with_links

BOX = [200.0, 100.0, 260.0, 220.0]
OBJECT_RGB = (20, 200, 40)


def block() -> FrameBlock:
    pixels = np.full((2, 360, 640, 3), 128, np.uint8)
    x0, y0, x1, y1 = (int(v) for v in BOX)
    pixels[1, y0:y1, x0:x1] = OBJECT_RGB  # the object, on the second frame
    return FrameBlock("cam", 0, np.array([10, 11]), np.array([1000.0, 1066.667]), np.zeros(2), pixels)


def event(kind: str = "track_start", t_ms: float = 1066.667, track: int = 3, **data) -> Event:
    return Event(kind, "app", "cam", t_ms, track, "person", data)


def test_an_event_with_a_box_gets_its_frame_and_crop(tmp_path):
    writer = SnapshotWriter(tmp_path / "snapshots")
    shot, = writer.attach([event(box=BOX)], block())
    key = shot.data["snapshot"]
    frame = cv2.imread(str(writer.path(key)))
    crop = cv2.imread(str(writer.path(key, crop=True)))
    assert frame.shape == (360, 640, 3)
    left, top, right, bottom = crop_bounds(BOX, 640, 360)
    assert crop.shape == (bottom - top, right - left, 3)  # the crop is the event's box and its margin
    inner = crop[int(BOX[1]) - top + 5:int(BOX[3]) - top - 5, int(BOX[0]) - left + 5:int(BOX[2]) - left - 5]
    assert np.abs(inner.reshape(-1, 3).mean(0) - OBJECT_RGB[::-1]).max() < 12  # ... of the object itself
    x0, y0, x1, y1 = (int(v) for v in BOX)
    edge = frame[y0 - 1:y0 + 1, x0 + 10:x1 - 10].reshape(-1, 3).mean(0)  # the box drawn in red (BGR)
    assert edge[2] > 200 and edge[1] < 90 and edge[0] < 90, edge


def test_one_object_on_one_frame_shares_a_snapshot_and_others_get_none(tmp_path):
    writer = SnapshotWriter(tmp_path / "snapshots")
    events = [event(box=BOX), event("zone_enter", zone="z", box=BOX), event(track=4, box=[0, 0, 10, 10]),
              event("track_end", t_ms=5.0, box=BOX),  # its frame is not in this block
              event("class_change", track=-1)]  # no box
    out = writer.attach(events, block())
    assert out[0].data["snapshot"] == out[1].data["snapshot"] != out[2].data["snapshot"]
    assert "snapshot" not in out[3].data and "snapshot" not in out[4].data
    assert len(list((tmp_path / "snapshots").rglob("*.jpg"))) == 4  # two snapshots, each a frame and a crop
    assert writer.attach(events, None) == events


def test_keys_name_only_the_writers_files(tmp_path):
    writer = SnapshotWriter(tmp_path / "snapshots")
    for bad in ("../../etc/passwd", "2026-12-02/../../x", "2026-12-02/" + "g" * 32, "", None, 7):
        assert writer.path(bad) is None
    assert writer.path("2026-12-02/" + "a" * 32).name == "a" * 32 + ".jpg"


def test_retention_by_age_then_by_size(tmp_path):
    now = [time.time()]
    writer = SnapshotWriter(tmp_path / "snapshots", retain_days=1.0, max_mb=1.0, wall_s=lambda: now[0])
    keys = [writer.attach([event(track=t, box=BOX)], block())[0].data["snapshot"] for t in range(3)]
    old = writer.path(keys[0])
    for f in (old, writer.path(keys[0], crop=True)):
        os.utime(f, (now[0] - 2 * 86400, now[0] - 2 * 86400))
    assert writer.prune() == 2 and not old.exists() and writer.path(keys[1]).exists()
    pair = writer.path(keys[2]).stat().st_size + writer.path(keys[2], crop=True).stat().st_size
    writer.max_bytes = pair / LOW_WATER + 1  # one pair fits under the low-water mark, two do not
    os.utime(writer.path(keys[1]), (now[0] - 60, now[0] - 60))  # the oldest goes first
    writer.prune()
    assert not writer.path(keys[1]).exists() and writer.path(keys[2]).exists()


def test_retention_is_applied_while_snapshots_come_not_only_at_start(tmp_path):
    now = [time.time()]
    writer = SnapshotWriter(tmp_path / "snapshots", retain_days=1.0, wall_s=lambda: now[0])
    first = writer.attach([event(box=BOX)], block())[0].data["snapshot"]
    for f in (writer.path(first), writer.path(first, crop=True)):
        os.utime(f, (now[0] - 2 * 86400, now[0] - 2 * 86400))
    writer.attach([event(track=4, box=BOX)], block())
    assert writer.path(first).exists()  # within the hour since the last prune
    now[0] += PRUNE_EVERY_S
    writer.attach([event(track=5, box=BOX)], block())
    assert not writer.path(first).exists() and not writer.path(first, crop=True).exists()


def test_a_write_past_max_mb_prunes_down_to_the_low_water_mark(tmp_path):
    writer = SnapshotWriter(tmp_path / "snapshots")
    key = writer.attach([event(box=BOX)], block())[0].data["snapshot"]
    pair = writer.path(key).stat().st_size + writer.path(key, crop=True).stat().st_size
    writer.max_bytes = 3.5 * pair
    folder_bytes = []
    for t in range(10):
        writer.attach([event(track=10 + t, box=BOX)], block())
        folder_bytes.append(sum(f.stat().st_size for f in (tmp_path / "snapshots").rglob("*.jpg")))
    assert max(folder_bytes) <= writer.max_bytes
    assert not writer.path(key).exists()  # the oldest went first


def test_a_snapshot_that_cannot_be_written_leaves_the_event_without_one(tmp_path, caplog):
    writer = SnapshotWriter(tmp_path / "snapshots")
    day = time.strftime("%Y-%m-%d", time.gmtime())
    (tmp_path / "snapshots" / day).write_text("a file where the day's folder goes")
    out = writer.attach([event(box=BOX), event(track=4, box=BOX)], block())
    assert all("snapshot" not in e.data for e in out)
    assert sum("cannot write" in r.message for r in caplog.records) == 1  # said once


def test_sinks_get_the_api_paths_of_a_snapshot():
    linked = with_links({"id": 12, "type": "track_start", "snapshot": "2026-12-02/" + "a" * 32})
    assert linked["has_snapshot"] and linked["snapshot_url"] == "/v1/events/12/snapshot.jpg"
    assert linked["crop_url"] == "/v1/events/12/crop.jpg"
    assert with_links({"id": 13, "type": "track_end"}) == {"id": 13, "type": "track_end", "has_snapshot": False}
