"""llama.cpp as a peer of `vigil bench llm --peer llamacpp`: llama-cpp-python's
OpenAI-compatible server (`python -m llama_cpp.server`) on the GGUF file Vigil serves,
with Vigil's thread count, sent the same jobs at the same arrival times.

The server computes one request at a time (each completion holds the model's lock until
its last token), so its queue is in front of it. With `interrupt_requests` on, its
default, a waiting request would cut a streaming one short, so it is off. Every request
streams, so that the time of its first token is known as Vigil's engine knows it.

Same prompts: the completion endpoint takes text, not ids, so each prompt goes as the
text of Vigil's ids (special tokens written out), and `check_prompts` asks the server's
tokenizer for those ids back before anything is timed. Same output lengths: the server
has no `ignore_eos`, so a logit bias against every control token of the GGUF (the
end-of-generation ones among them) runs each request to its `max_tokens`, and every
answer must finish with reason "length".
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import httpx

from bench.launch import Launched, free_ports
from llm.gguf import read_metadata

# The server and what its `server` extra brings (a partial install fails at start-up, not
# after the engine's runs)
MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")
MISSING = "llama-cpp-python is not installed; `make llamacpp` builds it (the llamacpp extra) for --peer llamacpp"
START_TIMEOUT_S = 120.0
N_CTX = 2048  # the server's default: a prompt (under 400 tokens here) and 256 generated, with room
STOP_TIMEOUT_S = 10.0  # uvicorn waits for open streams to close; a bench stopped mid-trial leaves some
CONTROL = 3  # llama.cpp's token type of control tokens (<|im_end|>, <|endoftext|>, ...)
BAN = -1e9  # a logit bias no logit overcomes


class PeerMissing(RuntimeError):
    """The peer's package is not installed; the message says how to install it."""


class LlamaCppJob(Protocol):
    arrival_s: float
    prompt: list[int]
    num_out: int


@dataclass(frozen=True)
class Streamed:
    """One request's times (perf_counter s): sent, first and last token; and how it ended."""
    sent_s: float
    first_s: float
    last_s: float
    num_chunks: int
    finish_reason: str | None


def require_llamacpp() -> None:
    missing = [m for m in MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise PeerMissing(f"{MISSING} (missing: {', '.join(missing)})")


def server_command(model: Path, port: int, num_threads: int, n_ctx: int, python: str = sys.executable) -> list[str]:
    """The server as a user starts it; prompt and decode threads both Vigil's count."""
    return [python, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--n_threads", str(num_threads), "--n_threads_batch", str(num_threads), "--n_ctx", str(n_ctx),
            "--interrupt_requests", "false"]


def control_token_bias(gguf: Path) -> dict[str, float]:
    """A logit bias (token id -> bias) against every control token of the GGUF file."""
    metadata, _ = read_metadata(gguf)
    types = metadata.get("tokenizer.ggml.token_type") or []
    bias = {str(i): BAN for i, t in enumerate(types) if t == CONTROL}
    eos = metadata.get("tokenizer.ggml.eos_token_id")
    if eos is not None:
        bias[str(eos)] = BAN
    if not bias:
        raise ValueError(f"{gguf}: no control or EOS token to bias against; the peer could stop early")
    return bias


def completion_body(text: str, num_out: int, bias: dict[str, float]) -> dict:
    """Greedy, as Vigil's bench requests are, with no penalty, for exactly `num_out` tokens."""
    return {"prompt": text, "max_tokens": num_out, "temperature": 0.0, "repeat_penalty": 1.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0, "logit_bias": bias, "stream": True}


def stream_completion(host: str, port: int, body: dict, timeout_s: float = 600.0) -> Streamed:
    """POST /v1/completions and read its server-sent events to the end."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        sent = time.perf_counter()
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"llama.cpp server: HTTP {resp.status}: {resp.read()[:500]!r}")
        first = last = None
        chunks, finish = 0, None
        while line := resp.readline():
            if not line.startswith(b"data: "):
                continue  # blank separators and keep-alive pings
            data = line[6:].strip()
            if data == b"[DONE]":
                break
            choice = json.loads(data)["choices"][0]
            now = time.perf_counter()
            if choice.get("text"):
                first = first if first is not None else now
                last, chunks = now, chunks + 1
            finish = choice.get("finish_reason") or finish
        if first is None:
            raise RuntimeError("llama.cpp server: a stream without a token")
        return Streamed(sent, first, last, chunks, finish)
    finally:
        conn.close()


class LlamaCppServer:
    """llama-cpp-python's server on `gguf`, up once /v1/models answers; `stop` ends its
    process group. Use it as a context manager so that an error or Ctrl-C stops it too."""

    def __init__(self, gguf: Path, num_threads: int, n_ctx: int, log_dir: Path | None = None) -> None:
        require_llamacpp()
        (port,) = free_ports(1)
        self.host, self.port, self.n_ctx = "127.0.0.1", port, n_ctx
        self.url = f"http://{self.host}:{port}"
        log_dir = log_dir or Path(tempfile.mkdtemp(prefix="vigil-bench-llamacpp-"))
        self._server = Launched("llama.cpp server", server_command(gguf, port, num_threads, n_ctx), Path.cwd(),
                                log_dir / "llamacpp-server.log", f"{self.url}/v1/models", START_TIMEOUT_S,
                                new_session=True, stop_timeout_s=STOP_TIMEOUT_S)
        self.log_path = self._server.log_path

    def tokenize(self, text: str) -> list[int]:
        r = httpx.post(f"{self.url}/extras/tokenize", json={"input": text}, timeout=30)
        r.raise_for_status()
        return r.json()["tokens"]

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> "LlamaCppServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def check_prompts(server: LlamaCppServer, prompts: list[list[int]], to_text: Callable[[list[int]], str]) -> None:
    """The server's tokenizer must give back Vigil's ids from their text: the same prompts."""
    for ids in prompts:
        got = server.tokenize(to_text(ids))
        if got != ids:
            at = next((i for i, (a, b) in enumerate(zip(got, ids)) if a != b), min(len(got), len(ids)))
            raise RuntimeError(f"llama.cpp tokenizes a prompt's text differently from Vigil ({len(got)} ids, "
                               f"not {len(ids)}; first difference at {at}): not the same workload")


def run_llamacpp(server: LlamaCppServer, jobs: list[LlamaCppJob], to_text: Callable[[list[int]], str],
                 bias: dict[str, float]) -> tuple[list[float], float, int, list[float]]:
    """As bench.llm.run_vigil: per-request latency (s), makespan (s), generated tokens,
    per-request time to first token (s); a thread per request, each sending at its arrival."""
    for job in jobs:
        if len(job.prompt) + job.num_out > server.n_ctx:
            raise ValueError(f"a prompt of {len(job.prompt)} tokens and {job.num_out} more exceed the server's "
                             f"n_ctx {server.n_ctx}")
    bodies = [completion_body(to_text(job.prompt), job.num_out, bias) for job in jobs]
    done: list[Streamed | BaseException | None] = [None] * len(jobs)
    t0 = time.perf_counter()

    def client(i: int) -> None:
        delay = t0 + jobs[i].arrival_s - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        try:
            done[i] = stream_completion(server.host, server.port, bodies[i])
        except BaseException as exc:  # re-raised on the calling thread
            done[i] = exc

    threads = [threading.Thread(target=client, args=(i,), name=f"bench-llamacpp-client-{i}", daemon=True)
               for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    makespan = time.perf_counter() - t0
    latencies, firsts, tokens = [], [], 0
    for job, s in zip(jobs, done):
        if isinstance(s, BaseException):
            raise RuntimeError(f"llama.cpp server: a request failed ({s}); see {server.log_path}") from s
        if s.finish_reason != "length":
            raise RuntimeError(f"llama.cpp server: a request ended with {s.finish_reason!r} before its "
                               f"{job.num_out} tokens")
        latencies.append(s.last_s - s.sent_s)
        firsts.append(s.first_s - s.sent_s)
        tokens += job.num_out
    return latencies, makespan, tokens, firsts
