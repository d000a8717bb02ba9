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


@pytest.mark.slow  # a million rows
def test_a_windowed_read_of_a_million_events_reads_its_window(tmp_path):
    """What `/v1/ask` reads for a window: its events only, found by index. The work
    SQLite does is counted in virtual-machine steps (a progress handler), which does not
    depend on the machine's speed."""
    path = tmp_path / "vigil.db"
    Storage(path).close()
    raw = sqlite3.connect(str(path))
    n, streams = 1_000_000, ("gate", "lobby")
    raw.executemany("INSERT INTO events (app, stream, type, t_ms, track_id, class, run, data) "
                    "VALUES ('a', ?, 'line_cross', ?, ?, 'person', 1, '{}')",
                    ((streams[i % 2], i * 100.0, i) for i in range(n)))
    raw.commit()
    raw.close()
    db = Storage(path)
    steps = {"n": 0}

    def counted(read):
        steps["n"] = 0
        db._db.set_progress_handler(lambda: steps.__setitem__("n", steps["n"] + 1) or 0, 100)
        try:
            return read(), steps["n"]
        finally:
            db._db.set_progress_handler(None, 100)

    # a 10 s window, an hour after the first event: 100 events, 50 of each stream
    lo, hi = 3_600_000.0, 3_610_000.0
    window, window_steps = counted(lambda: db.window_events(None, lo, hi))
    assert [e["track_id"] for e in window] == list(range(36_000, 36_100))
    gate, gate_steps = counted(lambda: db.window_events("gate", lo, hi))
    assert [e["track_id"] for e in gate] == list(range(36_000, 36_100, 2)) and {e["stream"] for e in gate} == {"gate"}
    _, count_steps = counted(lambda: db._exec("SELECT COUNT(*) FROM events WHERE data = '{}'"))  # every row
    assert window_steps * 1000 < count_steps and gate_steps * 1000 < count_steps, (window_steps, gate_steps,
                                                                                   count_steps)
    assert len(db.window_events("lobby")) == n // 2  # no window: the whole stream, as before
    db.close()
