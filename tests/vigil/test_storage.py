"""SQLite storage: migrations, round trips, event filters and pages, on a real file."""

from __future__ import annotations

import sqlite3

import pytest

from vigil.storage import SCHEMA_VERSION, EventQuery, Storage, StorageError


def event(i: int, app: str = "a", stream: str = "s", type: str = "line_cross", **data) -> dict:
    return {"type": type, "app": app, "stream": stream, "t_ms": float(i * 100), "track_id": i, "class": "person",
            **data}


def test_new_database_is_migrated_and_in_wal_mode(tmp_path):
    db = Storage(tmp_path / "v.db")
    assert db.schema_version == SCHEMA_VERSION
    db.close()
    raw = sqlite3.connect(tmp_path / "v.db")
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_newer_schema_is_refused_rather_than_damaged(tmp_path):
    Storage(tmp_path / "v.db").close()
    raw = sqlite3.connect(tmp_path / "v.db")
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.commit()
    raw.close()
    with pytest.raises(StorageError, match="newer"):
        Storage(tmp_path / "v.db")


def test_streams_apps_and_labels_survive_reopening(tmp_path):
    db = Storage(tmp_path / "v.db")
    db.put_stream("cam", "rtsp://u:p@h/x", {"transport": "udp"})
    db.put_app("people", {"name": "people", "slo_ms": 500})
    db.put_app("people", {"name": "people", "slo_ms": 800})  # an update keeps its place
    db.put_label("scenedet", "stable", 1)
    db.close()
    db = Storage(tmp_path / "v.db")
    assert db.streams() == [("cam", "rtsp://u:p@h/x", {"transport": "udp"})]
    assert db.apps() == [{"name": "people", "slo_ms": 800}]
    assert db.labels() == [("scenedet", "stable", 1)]
    db.delete_app("people")
    db.delete_stream("cam")
    assert db.apps() == [] and db.streams() == []


def test_events_filter_by_app_type_and_time_and_page_by_id(tmp_path):
    db = Storage(tmp_path / "v.db")
    db.add_events([event(i, app="a" if i % 2 else "b", line="north", direction="in") for i in range(50)])
    a = db.events(EventQuery(app="a", limit=1000))
    assert len(a) == 25 and all(e["app"] == "a" for e in a)
    assert a[0]["line"] == "north" and a[0]["direction"] == "in"
    window = db.events(EventQuery(since_ms=1000, until_ms=2000, limit=1000))
    assert [e["t_ms"] for e in window] == [float(t) for t in range(1000, 2000, 100)]
    pages, after = [], 0
    while True:
        page = db.events(EventQuery(after_id=after, limit=7))
        if not page:
            break
        pages.append(page)
        after = page[-1]["id"]
    assert sum(len(p) for p in pages) == 50 and len(pages) == 8
    assert db.events(EventQuery(type="track_start")) == []


def test_rollups_round_trip(tmp_path):
    db = Storage(tmp_path / "v.db")
    row = {"app": "a", "t_s": 100.0, "window_s": 5.0, "arrived": 10, "completed": 9, "within_slo": 8,
           "dropped": {"deadline": 1}, "p50_ms": 12.5, "p99_ms": 40.0}
    db.add_rollups([row])
    assert db.rollups("a", 0) == [row]
    assert db.rollups("a", 101) == []
