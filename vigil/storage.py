"""SQLite storage for `vigil serve`: streams, apps, model labels, events and per-app
metric rollups, in one file (WAL) in the data directory.

The schema is versioned with `PRAGMA user_version`; `MIGRATIONS[i]` takes a database
from version i to i + 1, each in one transaction, so a database of any older version
is brought up to date on open. One connection, shared by the server's threads under a
lock: writes are small and few (events are batched per block).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from runtime.boundaries import SinkFull

log = logging.getLogger("vigil.storage")

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
    # 2 -> 3: runs of a stream (each start of it), which its events carry
    """
    ALTER TABLE streams ADD COLUMN runs INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE events ADD COLUMN run INTEGER NOT NULL DEFAULT 0;
    """,
    # 3 -> 4: each sink's place in the events table, which is its outbox
    """
    CREATE TABLE sink_cursors (
        sink TEXT PRIMARY KEY,        -- e.g. webhook:URL
        last_id INTEGER NOT NULL      -- the last event delivered (or passed over by its filter)
    );
    """,
    # 4 -> 5: windows of every stream's events (a question without a stream)
    """
    CREATE INDEX events_t ON events (t_ms);
    """,
    # 5 -> 6: whether the model's caption was stored, or the facts' own sentence in its place
    """
    ALTER TABLE captions ADD COLUMN grounding TEXT NOT NULL DEFAULT 'model';
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)
MAX_EVENT_ID = 2**53 - 1  # the largest integer every JSON client reads exactly


@dataclass(frozen=True)
class EventQuery:
    app: str | None = None
    stream: str | None = None
    type: str | None = None
    since_ms: float | None = None
    until_ms: float | None = None
    after_id: int = 0  # pagination cursor: events with a larger id
    limit: int = 100
    before_id: int | None = None  # ... and with a smaller one
    newest_first: bool = False


class StorageError(Exception):
    """The database cannot be used; the message names the file and the cause."""


class StorageFull(StorageError, SinkFull):
    """The disk under the database is full: writes fail until there is room again
    (reads go on). Said once in the log, not at every write."""


class Storage:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._full = False
        try:
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=10)
            self._db.row_factory = sqlite3.Row
            with self._locked() as db:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except sqlite3.Error as exc:
            raise StorageError(f"{path}: cannot open the database: {exc}") from None

    @contextmanager
    def _locked(self, write: bool = True) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock. A statement that fails rolls back its
        transaction (if SQLite has not already); a full disk is StorageFull."""
        with self._lock:
            try:
                yield self._db
            except sqlite3.OperationalError as exc:
                if self._db.in_transaction:
                    try:
                        self._db.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                if getattr(exc, "sqlite_errorcode", None) != sqlite3.SQLITE_FULL:
                    raise
                if not self._full:
                    log.error("%s: the disk is full; writes are refused until there is room (%s)", self.path, exc)
                    self._full = True
                raise StorageFull(f"the disk under {self.path.name} is full; writes resume when there is room") \
                    from None
            if self._full and write:
                self._full = False
                log.warning("%s: writes work again", self.path)

    def _migrate(self) -> None:
        with self._locked() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StorageError(f"{self.path}: schema version {version} is newer than this Vigil "
                                   f"({SCHEMA_VERSION}); upgrade Vigil or use another data_dir")
            for target in range(version, SCHEMA_VERSION):
                db.execute("BEGIN")
                for statement in _statements(MIGRATIONS[target]):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {target + 1}")
                db.execute("COMMIT")

    @property
    def schema_version(self) -> int:
        with self._locked(write=False) as db:
            return db.execute("PRAGMA user_version").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _exec(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        with self._locked(write=not sql.startswith("SELECT")) as db:
            return db.execute(sql, tuple(params)).fetchall()

    # -- streams and apps ---------------------------------------------------------------------------
    def put_stream(self, name: str, url: str, options: dict) -> None:
        self._exec("INSERT INTO streams (name, url, options, created_s) VALUES (?, ?, ?, ?) ON CONFLICT(name) DO "
                   "UPDATE SET url = excluded.url, options = excluded.options", (name, url, json.dumps(options),
                                                                                 time.time()))

    def start_run(self, name: str) -> int:
        """The number of this start of the stream (1, 2, ...); 0 for a stream not stored."""
        # past every run its events carry: a stream deleted and added again under its name goes on counting
        rows = self._exec("UPDATE streams SET runs = MAX(runs, (SELECT COALESCE(MAX(run), 0) FROM events "
                          "WHERE stream = ?1)) + 1 WHERE name = ?1 RETURNING runs", (name,))
        return rows[0]["runs"] if rows else 0

    def last_event_ms(self, stream: str) -> float | None:
        return self._exec("SELECT MAX(t_ms) AS t FROM events WHERE stream = ?", (stream,))[0]["t"]

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
    def add_events(self, events: list[dict]) -> list[dict]:
        """Events as `Event.to_dict()` gives them, in one transaction; returns them as
        stored, each with its `id` (what every listener after storage takes)."""
        if not events:
            return []
        core = ("type", "app", "stream", "t_ms", "track_id", "class", "run")
        rows = [(e["app"], e["stream"], e["type"], e["t_ms"], e["track_id"], e["class"], e.get("run", 0),
                 json.dumps({k: v for k, v in e.items() if k not in core})) for e in events]
        with self._locked() as db:
            db.execute("BEGIN")
            ids = [db.execute("INSERT INTO events (app, stream, type, t_ms, track_id, class, run, data) "
                              "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row).lastrowid for row in rows]
            db.execute("COMMIT")
        return [{"id": i, **e, "run": e.get("run", 0)} for i, e in zip(ids, events)]

    def events(self, q: EventQuery) -> list[dict]:
        where, params = ["id > ?"], [q.after_id]
        if q.before_id is not None:
            where.append("id < ?")
            params.append(q.before_id)
        matching, values = _matching(q)
        where, params = where + matching, params + values
        order = "DESC" if q.newest_first else "ASC"
        rows = self._exec(f"SELECT * FROM events WHERE {' AND '.join(where)} ORDER BY id {order} LIMIT ?",
                          [*params, q.limit])
        return [_event_row(r) for r in rows]

    def event(self, event_id: int) -> dict | None:
        rows = self._exec("SELECT * FROM events WHERE id = ?", (event_id,))
        return _event_row(rows[0]) if rows else None

    def max_event_id(self) -> int:
        return self._exec("SELECT COALESCE(MAX(id), 0) AS n FROM events")[0]["n"]

    def sink_cursor(self, sink: str) -> int | None:
        rows = self._exec("SELECT last_id FROM sink_cursors WHERE sink = ?", (sink,))
        return rows[0]["last_id"] if rows else None

    def set_sink_cursor(self, sink: str, last_id: int) -> None:
        self._exec("INSERT INTO sink_cursors VALUES (?, ?) ON CONFLICT(sink) DO UPDATE SET last_id = excluded.last_id",
                   (sink, last_id))

    def count_crossings(self, stream: str, app: str, run: int, line: str, cls: str, direction: str,
                        up_to_id: int) -> int:
        """Line crossings of one class and direction in a run of an app, up to an event."""
        return self._exec("SELECT COUNT(*) AS n FROM events WHERE stream = ? AND app = ? AND run = ? AND "
                          "type = 'line_cross' AND class = ? AND json_extract(data, '$.line') = ? AND "
                          "json_extract(data, '$.direction') = ? AND id <= ?",
                          (stream, app, run, cls, line, direction, up_to_id))[0]["n"]

    def zone_tracks(self, stream: str, app: str, run: int, zone: str, up_to_id: int) -> dict[int, str]:
        """Tracks inside a zone after an event, with the class they entered as: those
        whose last enter or exit of the zone, in a run of an app up to the event, is an
        enter."""
        rows = self._exec("SELECT e.track_id AS track, e.class AS class FROM events e JOIN "
                          "(SELECT MAX(id) AS last FROM events WHERE stream = ? AND app = ? AND run = ? AND "
                          "type IN ('zone_enter', 'zone_exit') AND json_extract(data, '$.zone') = ? AND id <= ? "
                          "GROUP BY track_id) l ON e.id = l.last WHERE e.type = 'zone_enter'",
                          (stream, app, run, zone, up_to_id))
        return {r["track"]: r["class"] for r in rows}

    def count_events(self) -> int:
        return self._exec("SELECT COUNT(*) AS n FROM events")[0]["n"]

    def window_events(self, stream: str | None = None, since_ms: float | None = None,
                      until_ms: float | None = None) -> list[dict]:
        """Every event in [since_ms, until_ms) (of one stream, or all), in id order. The
        window is read through the (stream, t_ms) or t_ms index: a question about the
        last hour of a camera that has run for a month reads that hour."""
        where, params = _matching(EventQuery(stream=stream, since_ms=since_ms, until_ms=until_ms))
        rows = self._exec(f"SELECT * FROM events WHERE {' AND '.join(where) or '1'} ORDER BY id", params)
        return [_event_row(r) for r in rows]

    # -- captions -----------------------------------------------------------------------------------
    def add_caption(self, stream: str, t_start_ms: float, t_end_ms: float, text: str, facts: str,
                    event_ids: list[int], grounding: str = "model") -> None:
        self._exec("INSERT INTO captions (stream, t_start_ms, t_end_ms, text, facts, event_ids, grounding) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)", (stream, t_start_ms, t_end_ms, text, facts, json.dumps(event_ids),
                                                    grounding))

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
        with self._locked() as db:
            db.execute("BEGIN")
            db.executemany(
                "INSERT OR REPLACE INTO rollups VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(r["app"], r["t_s"], r["window_s"], r["arrived"], r["completed"], r["within_slo"],
                  json.dumps(r["dropped"]), r["p50_ms"], r["p99_ms"]) for r in rows])
            db.execute("COMMIT")

    def rollups(self, app: str, since_s: float) -> list[dict]:
        rows = self._exec("SELECT * FROM rollups WHERE app = ? AND t_s >= ? ORDER BY t_s", (app, since_s))
        return [{**dict(r), "dropped": json.loads(r["dropped"])} for r in rows]


def _statements(script: str) -> list[str]:
    """Split a migration into statements (none of ours contain ';' inside a literal)."""
    lines = [line.split("--", 1)[0] for line in script.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def _matching(q: EventQuery) -> tuple[list[str], list]:
    """The WHERE clauses, and their parameters, of a query's columns and time window."""
    where, params = [], []
    for clause, value in (("app = ?", q.app), ("stream = ?", q.stream), ("type = ?", q.type),
                          ("t_ms >= ?", q.since_ms), ("t_ms < ?", q.until_ms)):
        if value is not None:
            where.append(clause)
            params.append(value)
    return where, params


def _event_row(r) -> dict:
    return {"id": r["id"], "type": r["type"], "app": r["app"], "stream": r["stream"], "run": r["run"],
            "t_ms": r["t_ms"], "track_id": r["track_id"], "class": r["class"], **json.loads(r["data"])}
