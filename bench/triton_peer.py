"""The same model served by NVIDIA Triton's dynamic batcher: a real peer for `single`.

Triton runs in a process of its own (bench/triton_server.py in the Triton venv that
`make triton-venv` makes), one model instance, the machine's cores, the model built
from the same `model.yaml` and weights file. Requests go over Triton's HTTP endpoint
(the KServe v2 protocol with the binary-data extension: a JSON header, then the raw
frame) at the same open-loop arrival times, from one asyncio client thread.
`max_queue_delay_microseconds`, `max_batch_size` and the preferred batch sizes are
tuned: each candidate's goodput is searched in a few steps, and the best candidate is
then searched as every policy is.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import httpx
import numpy as np

from bench.launch import Launched, free_ports
from bench.workload import Pending, Stream, run_trial, search_goodput
from vigil.settings import ROOT

TRITON_PYTHON = ROOT / ".triton-venv" / "bin" / "python"
MODEL = "m0"
START_TIMEOUT_S = 180.0
# (max_batch_size, max_queue_delay_microseconds, preferred batch sizes)
CANDIDATES = ((4, 2000, (4,)), (8, 5000, (4, 8)), (16, 10000, (8, 16)), (32, 20000, (16, 32)))
QUICK_CANDIDATES = ((8, 5000, (4, 8)),)


class TritonServer:
    """`python -m bench.triton_server` in the Triton venv, until its model answers ready."""

    def __init__(self, folder: Path, max_batch: int, delay_us: int, preferred: tuple[int, ...], threads: int,
                 log_dir: Path) -> None:
        http, grpc, metrics = free_ports(3)
        self.url = f"http://127.0.0.1:{http}"
        self._server = Launched(
            "Triton", [str(TRITON_PYTHON), "-m", "bench.triton_server", str(folder), "--http-port", str(http),
                       "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--max-batch", str(max_batch),
                       "--delay-us", str(delay_us), "--threads", str(threads), "--preferred", *map(str, preferred)],
            ROOT, log_dir / f"triton-{max_batch}-{delay_us}.log", f"{self.url}/v2/models/{MODEL}/ready",
            START_TIMEOUT_S, new_session=True)

    def stop(self) -> None:
        self._server.stop()


def infer_body(frame: np.ndarray) -> tuple[bytes, dict[str, str]]:
    """A KServe v2 request for one frame, with the binary-data extension."""
    header = json.dumps({"inputs": [{"name": "frames", "shape": [1, *frame.shape], "datatype": "UINT8",
                                     "parameters": {"binary_data_size": frame.nbytes}}],
                         "outputs": [{"name": "head", "parameters": {"binary_data": True}}]}).encode()
    return header + frame.tobytes(), {"Inference-Header-Content-Length": str(len(header)),
                                      "Content-Type": "application/octet-stream"}


def infer_output(response: httpx.Response) -> np.ndarray:
    """The `head` output of a binary-data response."""
    n = int(response.headers["Inference-Header-Content-Length"])
    shape = json.loads(response.content[:n])["outputs"][0]["shape"]
    return np.frombuffer(response.content[n:], np.float32).reshape(shape)


def check_outputs(url: str, folder: Path, frame: np.ndarray) -> None:
    """Triton's output for the frame is the engine's loader's own (the peer serves the
    same model, not just something as fast)."""
    from models.registry import load_model
    from models.repository import ModelRepository

    body, headers = infer_body(frame)
    got = infer_output(httpx.post(f"{url}/v2/models/{MODEL}/infer", content=body, headers=headers, timeout=60))
    repo = ModelRepository(folder.parent.parent)
    name, version = folder.parent.name, int(folder.name)
    model = load_model(repo.spec(name, version), folder, version, "cpu")
    want = model.infer(frame[None])[0]["head"].probs
    if not np.allclose(got.reshape(-1), want.reshape(-1), rtol=1e-4, atol=1e-4):
        raise RuntimeError(f"Triton's output differs from the model's own: {got.reshape(-1)[:4]} vs "
                           f"{want.reshape(-1)[:4]}")


class TritonTarget:
    """Sends a stream's requests to Triton from one event loop; a request's result time is
    when its response has arrived."""

    def __init__(self, url: str, frame: np.ndarray) -> None:
        self.url = f"{url}/v2/models/{MODEL}/infer"
        self.body, self.headers = infer_body(frame)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.client = asyncio.run_coroutine_threadsafe(self._client(), self.loop).result()

    async def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=512,
                                                                  max_keepalive_connections=512))

    def clock(self) -> float:
        return time.monotonic() * 1000.0

    async def _infer(self) -> float:
        r = await self.client.post(self.url, content=self.body, headers=self.headers)
        r.raise_for_status()
        return self.clock()

    def send(self, stream: Stream, seq: int, capture_ms: float) -> list[Pending]:
        done: Future = asyncio.run_coroutine_threadsafe(self._infer(), self.loop)

        def wait() -> tuple[bool, str, int | None]:
            try:
                finished = done.result(timeout=120)
            except Exception:
                return False, "error", None
            within = finished - capture_ms <= stream.slo_ms
            return within, "ok" if within else "late", None

        return [Pending("app", stream.slo_ms, wait)]

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.client.aclose(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


def triton_goodput(folder: Path, options, frame: np.ndarray, hi: float, log=print) -> float | None:
    """Triton's goodput with its best candidate configuration: each candidate's goodput
    is searched briefly, and the best one is searched as every policy is."""
    if not TRITON_PYTHON.exists():
        log(f"    no Triton venv at {TRITON_PYTHON.parent.parent} (make triton-venv): peer skipped")
        return None
    import torch

    threads = torch.get_num_threads()
    candidates = QUICK_CANDIDATES if options.quick else CANDIDATES
    with tempfile.TemporaryDirectory(prefix="vigil-triton-") as tmp:
        best, best_goodput = candidates[0], -1.0
        for cand in candidates if len(candidates) > 1 else []:
            found = _goodput(folder, cand, threads, Path(tmp), options, frame, hi, max(3, options.steps // 2), 0,
                             lambda m: None)
            log(f"    triton max_batch_size={cand[0]} max_queue_delay_microseconds={cand[1]} "
                f"preferred={list(cand[2])}: goodput {found:.1f}/s (short search)")
            if found > best_goodput:
                best, best_goodput = cand, found
        goodput = _goodput(folder, best, threads, Path(tmp), options, frame, hi, options.steps,
                           0 if options.quick else 1, log, check=True)
    log(f"    triton tuned: max_batch_size={best[0]} max_queue_delay_microseconds={best[1]} "
        f"preferred={list(best[2])}")
    return round(goodput, 2)


def _goodput(folder: Path, cand: tuple, threads: int, tmp: Path, options, frame: np.ndarray, hi: float, steps: int,
             retries: int, log, check: bool = False) -> float:
    server = TritonServer(folder, *cand, threads, tmp)
    target = TritonTarget(server.url, frame)
    try:
        if check:
            check_outputs(server.url, folder, frame)

        def attainment(rate: float) -> float:
            result = run_trial(target, [Stream("cam", (("app", MODEL),), rate, options.slo_ms)], options.trial,
                               seed=options.seed)
            log(f"    rate {rate:7.1f}/s: attainment {result.attainment():.3f}")
            return result.attainment()

        run_trial(target, [Stream("cam", (("app", MODEL),), 0.5 * hi, options.slo_ms)],
                  max(2.0, options.trial / 2), seed=options.seed + 99)  # warm, as every policy is
        return search_goodput(attainment, hi, steps, retries=retries)
    finally:
        target.close()
        server.stop()
