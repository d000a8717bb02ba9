"""The LLMs: loaded at start (`llm_model`, then `llm_models`, each version chosen by the
repository's version policy), the engines the OpenAI routes admit requests to, scene
captions, and questions about what the apps recorded (both by `llm_model`'s engine).

A question waits on the LLM, so it runs on this service's own few threads, never on
the pool that serves every other route; past `limits.max_waiting_llm_requests`
questions in flight a new one is Overloaded.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from engine.arbiter import DeviceArbiter
from llm.embedder import Embedder
from llm.engine import EngineConfig, EngineFull, LLMEngine
from llm.metrics import LLMMetrics, LLMSeries
from llm.prompts import answer_request
from llm.qa import answer
from llm.sampling import SamplingParams
from llm.serving import load_llm
from vigil.services.apps import AppService
from vigil.services.captions import Captions
from vigil.services.errors import NotFound, Overloaded
from vigil.services.streams import StreamService
from vigil.settings import Settings
from vigil.storage import Storage

log = logging.getLogger("vigil.services.llm")

ASK_THREADS = 4  # questions answered at once (each waits on the LLM); the rest queue, up to the LLM's bound
ASK_PRIORITY = 8
ASK_TIMEOUT_S = 120.0


class LLMService:
    def __init__(self, settings: Settings, device: str, arbiter: DeviceArbiter, series: LLMSeries, storage: Storage,
                 captions: Captions, streams: StreamService, apps: AppService) -> None:
        self.settings = settings
        self.device = device
        self.arbiter = arbiter  # the device, shared with the vision engine
        self.series = series
        self.storage = storage
        self.captions = captions
        self.streams = streams
        self.apps = apps
        self.engine: LLMEngine | None = None  # llm_model's, set by load(): captions and questions
        self.engines: dict[str, LLMEngine] = {}  # every LLM loaded, by name
        self._embedder: Embedder | None = None
        self._embedder_lock = threading.Lock()
        self._asks = ThreadPoolExecutor(ASK_THREADS, thread_name_prefix="ask")
        self._lock = threading.Lock()
        self._asks_in_flight = 0

    def load(self) -> None:
        """Load and start the LLMs, and captions by llm_model's; one that cannot load is
        logged (the rest of the server runs without it)."""
        config = EngineConfig(max_waiting=self.settings.limits.max_waiting_llm_requests,
                              min_share=self.settings.llm_min_share)
        for name in self.settings.served_llms():
            try:
                engine = load_llm(self.settings.model_repository, name, self.device, config, arbiter=self.arbiter,
                                  metrics=LLMMetrics(self.series, name)).start()
            except (FileNotFoundError, ValueError) as exc:
                log.warning("LLM %s not loaded: %s", name, exc)
                continue
            self.engines[name] = engine
            log.info("LLM %s loaded%s", name, f" with its adapter {engine.lora}" if engine.lora else "")
        self.engine = self.engines.get(self.settings.llm_model or "")
        if self.engine is not None:
            self.captions.start(self.engine)

    def engine_for(self, model: str | None = None) -> LLMEngine:
        """The LLM engine serving `model` (None: llm_model's)."""
        if model is None:
            if self.engine is None:
                raise Overloaded("the LLM is not loaded (yet); see /readyz and the server log")
            return self.engine
        engine = self.engines.get(model)
        if engine is None:
            raise NotFound(f"model: no LLM {model!r}; served: {sorted(self.engines)}")
        return engine

    def submit_ask(self, question: str, stream: str | None = None, since_ms: float | None = None,
                   until_ms: float | None = None) -> Future:
        """`ask` on this service's threads; Overloaded past `limits.max_waiting_llm_requests`
        questions in flight."""
        self.engine_for()
        limit = self.settings.limits.max_waiting_llm_requests
        with self._lock:
            if self._asks_in_flight >= limit:
                raise Overloaded(f"{self._asks_in_flight} questions are being answered already (the most allowed, "
                                 "limits.max_waiting_llm_requests); try again shortly")
            self._asks_in_flight += 1
        future = self._asks.submit(self.ask, question, stream, since_ms, until_ms)
        future.add_done_callback(self._ask_done)
        return future

    def ask(self, question: str, stream: str | None = None, since_ms: float | None = None,
            until_ms: float | None = None) -> dict:
        """An answer from the stored events and captions, with citations."""
        engine = self.engine_for()
        if stream is not None and stream not in self.streams.names():
            raise NotFound(f"no stream {stream!r}")
        lines, zones = self.apps.lines_and_zones()

        def generate(prompt: str | list[int]) -> str:
            try:
                handle = engine.add_request(prompt, SamplingParams(max_tokens=64, stop=("\n",)),
                                            priority=ASK_PRIORITY, stream=False)
            except EngineFull as exc:
                raise Overloaded(str(exc)) from None
            return handle.result(ASK_TIMEOUT_S).text

        events = self.storage.window_events(stream, since_ms, until_ms)  # the window only, by index
        return answer(question, events, self.storage.captions(stream), generate, lines, zones,
                      self._sentence_embedder, stream, since_ms, until_ms,
                      prompt=lambda agg, q: answer_request(engine.tokenizer, agg, q, engine.lora is not None),
                      now_ms=time.time() * 1000.0)

    def close(self) -> None:
        """Refuse new questions, finish the engine's requests, then join the captions thread."""
        self._asks.shutdown(wait=False, cancel_futures=True)
        for engine in self.engines.values():
            engine.close()
        self.captions.close()

    def _ask_done(self, _: Future) -> None:
        with self._lock:
            self._asks_in_flight -= 1

    def _sentence_embedder(self) -> Embedder:
        """Loaded once, by the first question that has captions to rank: a question that
        is refused, or has no captions in its window, never waits for it (llm/embedder.py
        says why it is not sentence-transformers)."""
        with self._embedder_lock:
            if self._embedder is None:
                self._embedder = Embedder()
            return self._embedder
