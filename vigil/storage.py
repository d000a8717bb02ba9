"""SQLite storage for `vigil serve`: streams, apps, model labels, events and per-app
metric rollups, in one file (WAL) in the data directory.

The schema is versioned with `PRAGMA user_version`; `MIGRATIONS[i]` takes a database
from version i to i + 1, each in one transaction, so a database of any older version
is brought up to date on open. One connection, shared by the server's threads under a
lock: writes are small and few (events are batched per block).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

MIGRATIONS: list[str] = [
    # 0 -> 1
    """
    CREATE TABLE streams (
        name TEXT PRIMARY KEY,
        url TEXT NOT NULL,            -- as given (credentials kept to reconnect; never returned)
        options TEXT NOT NULL,        -- JSON StreamOptions
        created_s REAL NOT NULL
    );
    CREATE TABLE apps (
        name TEXT PRIMARY KEY,
        spec TEXT NOT NULL,           -- JSON AppSpec
        created_s REAL NOT NULL
    );
    CREATE TABLE model_labels (
        model TEXT NOT NULL,
        label TEXT NOT NULL,
        version INTEGER NOT NULL,
        PRIMARY KEY (model, label)
    );
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        app TEXT NOT NULL,
        stream TEXT NOT NULL,
        type TEXT NOT NULL,
        t_ms REAL NOT NULL,           -- stream time (epoch ms for live streams)
        track_id INTEGER NOT NULL,
        class TEXT NOT NULL,
        data TEXT NOT NULL            -- JSON, type-specific fields
    );
    CREATE INDEX events_app_t ON events (app, t_ms);
    CREATE INDEX events_stream_t ON events (stream, t_ms);
    CREATE TABLE rollups (
        app TEXT NOT NULL,
        t_s REAL NOT NULL,            -- window start, epoch seconds
        window_s REAL NOT NULL,
        arrived INTEGER NOT NULL,
        completed INTEGER NOT NULL,
        within_slo INTEGER NOT NULL,
        dropped TEXT NOT NULL,        -- JSON {reason: n}
        p50_ms REAL,
        p99_ms REAL,
        PRIMARY KEY (app, t_s)
    );
    """,
    # 1 -> 2: scene captions written by the LLM
    """
    CREATE TABLE captions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        stream TEXT NOT NULL,
        t_start_ms REAL NOT NULL,
        t_end_ms REAL NOT NULL,
        text TEXT NOT NULL,
        facts TEXT NOT NULL,          -- the facts text the caption was written from
        event_ids TEXT NOT NULL       -- JSON list
    );
    CREATE INDEX captions_stream_t ON captions (stream, t_start_ms);
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


@dataclass(frozen=True)
class EventQuery:
    app: str | None = None
    stream: str | None = None
    type: str | None = None
    since_ms: float | None = None
    until_ms: float | None = None
    after_id: int = 0  # pagination cursor: events with a larger id
    limit: int = 100


class Storage:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=10)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._migrate()

    def _migrate(self) -> None:
        with self._lock:
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise RuntimeError(f"{self.path}: schema version {version} is newer than this Vigil "
                                   f"({SCHEMA_VERSION}); upgrade Vigil or use another data_dir")
            for target in range(version, SCHEMA_VERSION):
                self._db.execute("BEGIN")
                try:
                    for statement in _statements(MIGRATIONS[target]):
                        self._db.execute(statement)
                    self._db.execute(f"PRAGMA user_version = {target + 1}")
                    self._db.execute("COMMIT")
                except Exception:
                    self._db.execute("ROLLBACK")
                    raise

    @property
    def schema_version(self) -> int:
        with self._lock:
            return self._db.execute("PRAGMA user_version").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _exec(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, tuple(params)).fetchall()

    # -- streams and apps ---------------------------------------------------------------------------
    def put_stream(self, name: str, url: str, options: dict) -> None:
        self._exec("INSERT OR REPLACE INTO streams VALUES (?, ?, ?, ?)", (name, url, json.dumps(options), time.time()))

    def delete_stream(self, name: str) -> None:
        self._exec("DELETE FROM streams WHERE name = ?", (name,))

    def streams(self) -> list[tuple[str, str, dict]]:
        return [(r["name"], r["url"], json.loads(r["options"]))
                for r in self._exec("SELECT * FROM streams ORDER BY created_s")]

    def put_app(self, name: str, spec: dict) -> None:
        self._exec("INSERT INTO apps VALUES (?, ?, ?) ON CONFLICT(name) DO UPDATE SET spec = excluded.spec",
                   (name, json.dumps(spec), time.time()))

    def delete_app(self, name: str) -> None:
        self._exec("DELETE FROM apps WHERE name = ?", (name,))

    def apps(self) -> list[dict]:
        return [json.loads(r["spec"]) for r in self._exec("SELECT spec FROM apps ORDER BY created_s")]

    def put_label(self, model: str, label: str, version: int) -> None:
        self._exec("INSERT OR REPLACE INTO model_labels VALUES (?, ?, ?)", (model, label, version))

    def labels(self) -> list[tuple[str, str, int]]:
        return [(r["model"], r["label"], r["version"]) for r in self._exec("SELECT * FROM model_labels")]

    # -- events -------------------------------------------------------------------------------------
    def add_events(self, events: list[dict]) -> None:
        """Events as `Event.to_dict()` gives them; one transaction."""
        if not events:
            return
        core = ("type", "app", "stream", "t_ms", "track_id", "class")
        rows = [(e["app"], e["stream"], e["type"], e["t_ms"], e["track_id"], e["class"],
                 json.dumps({k: v for k, v in e.items() if k not in core})) for e in events]
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT INTO events (app, stream, type, t_ms, track_id, class, data) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
            self._db.execute("COMMIT")

    def events(self, q: EventQuery) -> list[dict]:
        where, params = ["id > ?"], [q.after_id]
        for column, value in (("app", q.app), ("stream", q.stream), ("type", q.type)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if q.since_ms is not None:
            where.append("t_ms >= ?")
            params.append(q.since_ms)
        if q.until_ms is not None:
            where.append("t_ms < ?")
            params.append(q.until_ms)
        rows = self._exec(f"SELECT * FROM events WHERE {' AND '.join(where)} ORDER BY id LIMIT ?",
                          [*params, q.limit])
        return [{"id": r["id"], "type": r["type"], "app": r["app"], "stream": r["stream"], "t_ms": r["t_ms"],
                 "track_id": r["track_id"], "class": r["class"], **json.loads(r["data"])} for r in rows]

    def count_events(self) -> int:
        return self._exec("SELECT COUNT(*) AS n FROM events")[0]["n"]

    def all_events(self, stream: str | None = None) -> list[dict]:
        out, after = [], 0
        while True:
            page = self.events(EventQuery(stream=stream, after_id=after, limit=5000))
            out += page
            if len(page) < 5000:
                return out
            after = page[-1]["id"]

    # -- captions -----------------------------------------------------------------------------------
    def add_caption(self, stream: str, t_start_ms: float, t_end_ms: float, text: str, facts: str,
                    event_ids: list[int]) -> None:
        self._exec("INSERT INTO captions (stream, t_start_ms, t_end_ms, text, facts, event_ids) VALUES (?, ?, ?, ?, ?, ?)",
                   (stream, t_start_ms, t_end_ms, text, facts, json.dumps(event_ids)))

    def captions(self, stream: str | None = None, since_ms: float | None = None, until_ms: float | None = None,
                 limit: int = 1000) -> list[dict]:
        where, params = ["1"], []
        if stream is not None:
            where.append("stream = ?")
            params.append(stream)
        if since_ms is not None:
            where.append("t_end_ms > ?")
            params.append(since_ms)
        if until_ms is not None:
            where.append("t_start_ms < ?")
            params.append(until_ms)
        rows = self._exec(f"SELECT * FROM captions WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?",
                          [*params, limit])
        return [{**dict(r), "event_ids": json.loads(r["event_ids"])} for r in reversed(rows)]

    # -- rollups ------------------------------------------------------------------------------------
    def add_rollups(self, rows: list[dict]) -> None:
        if not rows:
            return
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR REPLACE INTO rollups VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(r["app"], r["t_s"], r["window_s"], r["arrived"], r["completed"], r["within_slo"],
                  json.dumps(r["dropped"]), r["p50_ms"], r["p99_ms"]) for r in rows])
            self._db.execute("COMMIT")

    def rollups(self, app: str, since_s: float) -> list[dict]:
        rows = self._exec("SELECT * FROM rollups WHERE app = ? AND t_s >= ? ORDER BY t_s", (app, since_s))
        return [{**dict(r), "dropped": json.loads(r["dropped"])} for r in rows]


def _statements(script: str) -> list[str]:
    """Split a migration into statements (none of ours contain ';' inside a literal)."""
    lines = [line.split("--", 1)[0] for line in script.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
