"""`vigil ask --source CLIP`: questions about a clip, offline. The clip is run through
the default apps once (outputs kept under OUT/ask-<clip>/ and reused), its events
become the event store, and the LLM (SmolLM2-Instruct with its scene adapter unless
told otherwise) answers from the exact aggregates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from llm.embedder import Embedder
from llm.prompts import answer_request
from llm.qa import answer
from llm.sampling import SamplingParams
from llm.serving import ServedModel, load_llm, split_id
from vigil.settings import ANSWERER


class AskError(Exception):
    pass


def run_clip_once(source: str, out_root: Path, models: Path, device: str,
                  log: Callable[[str], None]) -> tuple[Path, list]:
    from apps.spec import load_spec
    from runtime.offline import RunError, RunOptions, default_apps, run_offline

    apps = default_apps(source)
    specs = [load_spec(a) for a in apps]
    out = out_root / f"ask-{Path(source).stem}"
    events = out / "events.jsonl"
    summary = out / "summary.json"
    if not (events.exists() and summary.exists() and json.loads(summary.read_text()).get("source") == source):
        log(f"running {source} through {', '.join(apps)} (once) ...")
        try:
            run_offline(source, specs, RunOptions(out_dir=out, video=False, device=device, repository=models))
        except RunError as exc:
            raise AskError(str(exc)) from None
    return events, specs


def load_events(path: Path) -> list[dict]:
    return [{"id": i + 1, **json.loads(line)} for i, line in enumerate(path.read_text().splitlines()) if line]


def ask_offline(question: str, source: str, out_root: Path, models: Path, device: str = "auto",
                log: Callable[[str], None] = print, engine=None, embedder: Embedder | None = None,
                llm: str = ANSWERER) -> dict:
    """`engine`: a ServedModel to step by the caller; else LLM `llm` of the repository
    (`<model>:<adapter>` for one of its adapters) is loaded for this question."""
    from engine.device import resolve_device

    device = resolve_device(device) if device else "cpu"
    events_path, specs = run_clip_once(source, out_root, models, device, log)
    events = load_events(events_path)
    own = engine is None
    if own:
        name, adapter = split_id(llm)
        try:
            loaded = load_llm(models, name, device)
        except (FileNotFoundError, ValueError) as exc:
            raise AskError(f"LLM {llm}: {exc}") from None
        if adapter is not None and adapter not in loaded.adapters.loaded:
            loaded.close()
            raise AskError(f"LLM {llm}: {name} has no adapter {adapter!r}; adapters: {loaded.adapters.names()}")
        engine = ServedModel(loaded, adapter)
    try:
        def generate(prompt: str | list[int]) -> str:
            handle = engine.add_request(prompt, SamplingParams(max_tokens=64, stop=("\n",)), stream=False)
            if own:
                while engine.engine.has_work():
                    engine.engine.step()
            return handle.result(120).text

        lines = sorted({n for s in specs for n in s.lines})
        zones = sorted({n for s in specs for n in s.zones})
        try:
            return answer(question, events, [], generate, lines, zones, embedder,
                          prompt=lambda agg, q: answer_request(engine.tokenizer, agg, q, engine.tuned))
        except ValueError as exc:
            raise AskError(f"question: {exc}") from None
    finally:
        if own:
            engine.engine.close()
