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
from pathlib import Path

from engine.arbiter import DeviceArbiter
from llm.embedder import Embedder
from llm.adapters import AdapterError
from llm.engine import EngineConfig, EngineFull, LLMEngine
from llm.metrics import LLMMetrics, LLMSeries
from llm.prompts import answer_request
from llm.qa import answer
from llm.sampling import SamplingParams
from llm.serving import ServedModel, load_llm, model_id, split_id
from vigil.services.apps import AppService
from vigil.services.captions import Captions
from vigil.services.errors import Conflict, Forbidden, NotFound, Overloaded
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
        self.engine: ServedModel | None = None  # llm_model's, set by load(): captions and questions
        self.engines: dict[str, LLMEngine] = {}  # every LLM loaded, by its base model's name
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
        for served in self.settings.served_llms():
            name = split_id(served)[0]
            try:
                engine = load_llm(self.settings.model_repository, name, self.device, config, arbiter=self.arbiter,
                                  metrics=LLMMetrics(self.series, name)).start()
            except (FileNotFoundError, ValueError) as exc:
                log.warning("LLM %s not loaded: %s", name, exc)
                continue
            self.engines[name] = engine
            adapters = engine.adapters.names()
            log.info("LLM %s loaded%s", name, f" with its adapters {', '.join(adapters)}" if adapters else "")
        if self.settings.llm_model:
            try:
                self.engine = self.engine_for(self.settings.llm_model)
            except NotFound as exc:
                log.warning("llm_model %s not served: %s", self.settings.llm_model, exc)
        if self.engine is not None:
            self.captions.start(self.engine)

    def served_ids(self) -> list[str]:
        """Every id served: each LLM's base model, then each of its adapters."""
        return [model_id(name, adapter) for name, engine in self.engines.items()
                for adapter in (None, *engine.adapters.names())]

    def engine_for(self, model: str | None = None) -> ServedModel:
        """The engine and adapter serving id `model` (None: llm_model's)."""
        if model is None:
            if self.engine is None:
                raise Overloaded("the LLM is not loaded (yet); see /readyz and the server log")
            return self.engine
        name, adapter = split_id(model)
        engine = self.engines.get(name)
        if engine is None or (adapter is not None and adapter not in engine.adapters.loaded):
            raise NotFound(f"model: no LLM {model!r}; served: {self.served_ids()}")
        return ServedModel(engine, adapter)

    def load_adapter(self, served: str, folder: Path) -> str:
        """Serve the LoRA adapter at `folder` (within the model repository) as `served`
        (`<llm>:<adapter>`, or a bare adapter name for llm_model's base); its id."""
        name, adapter = split_id(served) if ":" in served else (self._default_base(), served)
        engine = self.engines.get(name)
        if engine is None:
            raise NotFound(f"lora_name: no LLM {name!r} to adapt; served: {sorted(self.engines)}")
        root = self.settings.model_repository.resolve()
        try:
            path = (folder if folder.is_absolute() else root / name / folder).resolve()
            inside, found = path.is_relative_to(root), path.is_dir()
        except (OSError, RuntimeError) as exc:  # a loop of links, a name too long: no such folder
            raise NotFound(f"lora_path: {exc.strerror if isinstance(exc, OSError) else exc}") from None
        if not inside:
            raise Forbidden(f"lora_path: {folder} is outside the model repository ({root}); adapters load from "
                            "within it")
        if not found:
            raise NotFound(f"lora_path: no folder {path}")
        try:
            engine.load_lora(adapter, path)
        except AdapterError as exc:
            raise Conflict(str(exc)) from None
        except ValueError as exc:  # CheckpointError: what does not fit its base
            raise Conflict(f"lora_path: {exc}") from None
        return model_id(name, adapter)

    def unload_adapter(self, served: str) -> str:
        name, adapter = split_id(served) if ":" in served else (self._default_base(), served)
        engine = self.engines.get(name)
        if engine is None or adapter not in engine.adapters.loaded:
            raise NotFound(f"lora_name: no adapter {served!r}; served: {self.served_ids()}")
        if self.engine is not None and self.engine.engine is engine and self.engine.adapter == adapter:
            raise Conflict(f"lora_name: {served} writes captions and answers /v1/ask (llm_model); it stays")
        try:
            engine.unload_lora(adapter)
        except AdapterError as exc:
            raise Conflict(str(exc)) from None
        return model_id(name, adapter)

    def _default_base(self) -> str:
        if not self.settings.llm_model:
            raise NotFound("lora_name: name the LLM as <llm>:<adapter> (no llm_model is set)")
        return split_id(self.settings.llm_model)[0]

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
        served = self.engine_for()
        if stream is not None and stream not in self.streams.names():
            raise NotFound(f"no stream {stream!r}")
        lines, zones = self.apps.lines_and_zones()

        def generate(prompt: str | list[int]) -> str:
            try:
                handle = served.add_request(prompt, SamplingParams(max_tokens=64, stop=("\n",)),
                                            priority=ASK_PRIORITY, stream=False)
            except EngineFull as exc:
                raise Overloaded(str(exc)) from None
            return handle.result(ASK_TIMEOUT_S).text

        events = self.storage.window_events(stream, since_ms, until_ms)  # the window only, by index
        return answer(question, events, self.storage.captions(stream), generate, lines, zones,
                      self._sentence_embedder, stream, since_ms, until_ms,
                      prompt=lambda agg, q: answer_request(served.tokenizer, agg, q, served.tuned),
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
