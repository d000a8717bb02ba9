"""Clips of the streams' recordings: a window of stream time, or the seconds around an
event (recording: pre_s before it, post_s after it; a track_end's clip covers the
whole track). Cut on the request's thread, packets copied, never re-encoded."""

from __future__ import annotations

import math

from apps.spec import NAME_PATTERN
from runtime.event_clips import event_window
from streams.recording import ClipError, RecordingStore, cut_clip
from vigil.services.errors import Invalid, NotFound
from vigil.settings import Recording
from vigil.storage import Storage

OFF = "recording is off (recording: {enabled: true} in the server config)"


class ClipService:
    def __init__(self, store: RecordingStore | None, settings: Recording, storage: Storage) -> None:
        self.store = store
        self.settings = settings
        self.storage = storage

    def _store(self, stream: str) -> RecordingStore:
        if self.store is None:
            raise NotFound(OFF)
        if not NAME_PATTERN.fullmatch(stream):  # it names a folder
            raise NotFound(f"no stream {stream!r}")
        return self.store

    def segments(self, stream: str) -> list[dict]:
        """The stream's recorded segments, oldest first (`end_ms` null: being written);
        a deleted stream's stay until retention takes them."""
        store = self._store(stream)
        return [{"start_ms": s.start_ms, "end_ms": s.end_ms, "bytes": s.size} for s in store.segments(stream)]

    def window(self, stream: str, start_ms: float, end_ms: float) -> bytes:
        store = self._store(stream)
        if not (math.isfinite(start_ms) and math.isfinite(end_ms)) or end_ms <= start_ms:
            raise Invalid(f"end_ms ({end_ms}) must come after start_ms ({start_ms})")
        if end_ms - start_ms > self.settings.max_clip_s * 1000.0:
            raise Invalid(f"a clip is at most recording.max_clip_s ({self.settings.max_clip_s:g} s); "
                          f"asked for {(end_ms - start_ms) / 1000.0:.1f} s")
        try:
            return cut_clip(store.segments(stream), start_ms, end_ms)
        except ClipError as exc:
            raise NotFound(f"stream {stream!r}: {exc} (recording.retain_days and max_gb say how long it is kept)") \
                from None

    def event(self, event_id: int) -> bytes:
        event = self.storage.event(event_id)
        if event is None:
            raise NotFound(f"no event {event_id}")
        r = self.settings
        start, end = event_window(event["type"], float(event["t_ms"]), event, r.pre_s, r.post_s, r.max_clip_s)
        return self.window(event["stream"], start, end)
