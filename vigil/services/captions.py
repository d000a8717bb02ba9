"""Scene captions: after each block a stream's facts are collected (`observe`, the
workers' `on_block`); every `caption_every_s` of stream time they become a
low-priority LLM request, and one thread stores each caption as it finishes. A caption
that misstates the facts (a count in view, a figure, a line or a direction they do not
give) is stored as the facts' own sentence instead, with `grounding: template`.
"""

from __future__ import annotations

import logging
import queue
import threading

from llm.captions import FactsCollector
from llm.engine import EngineFull
from llm.facts import caption_agrees, caption_text, facts_text
from llm.prompts import caption_request
from llm.sampling import SamplingParams
from llm.serving import ServedModel
from vigil.storage import Storage, StorageFull

log = logging.getLogger("vigil.services.captions")

CAPTION_PRIORITY = 0  # after questions and completions
CAPTION_TIMEOUT_S = 300.0


class Captions:
    def __init__(self, storage: Storage, every_s: float) -> None:
        self.storage = storage
        self.every_ms = every_s * 1000.0  # 0: never
        self._engine: ServedModel | None = None  # set by start(), once the LLM is loaded
        self._facts: dict[str, FactsCollector] = {}  # stream -> its facts since the last caption
        self._pending: queue.Queue = queue.Queue()  # (facts, handle) in the order they were asked
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._store_loop, name="captions", daemon=True)

    def start(self, engine: ServedModel) -> None:
        self._engine = engine
        self._thread.start()

    def observe(self, stream: str, t_ms: float, events: list[dict], in_view: dict[str, dict[str, int]]) -> None:
        """One block's facts of `stream` (on the stream's worker thread)."""
        engine = self._engine
        if engine is None or not self.every_ms:
            return
        collector = self._facts.get(stream)
        if collector is None:
            collector = self._facts[stream] = FactsCollector(stream, self.every_ms)
        done = collector.observe(t_ms, events, in_view)
        if done is None:
            return
        try:
            prompt = caption_request(engine.tokenizer, done, tuned=engine.tuned)
            handle = engine.add_request(prompt, SamplingParams(max_tokens=96, stop=("\n",)), priority=CAPTION_PRIORITY,
                                        stream=False)
        except EngineFull:
            log.warning("caption of %s skipped: the LLM has too many requests waiting", stream)
            return
        self._pending.put((done, handle))

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop storing captions (after the LLM is closed, its requests are finished, so
        the thread is not left waiting on one) and join the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _store_loop(self) -> None:
        while not self._stop.is_set():
            try:
                facts, handle = self._pending.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                out = handle.result(timeout_s=CAPTION_TIMEOUT_S)
                if out.finish_reason in ("stop", "length"):
                    text, grounding = out.text.strip(), "model"
                    if not caption_agrees(text, facts):
                        text, grounding = caption_text(facts), "template"
                    self.storage.add_caption(facts.stream, facts.t_start_ms, facts.t_end_ms, text, facts_text(facts),
                                             facts.event_ids, grounding)
            except StorageFull:
                continue  # the store said so once, and refuses every write until there is room
            except Exception:
                log.exception("caption for %s failed", facts.stream)
