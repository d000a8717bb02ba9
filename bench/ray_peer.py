"""The same model served by Ray Serve with `@serve.batch`: a real peer for `single`.

One replica (the machine's cores, like Vigil's engine), the model built from the same
`model.yaml` and weights file, the same preprocessing, requests sent through a
deployment handle at the same open-loop arrival times. `max_batch_size` and
`batch_wait_timeout_s` are tuned: each candidate is probed at one rate and the best
is searched for its goodput.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from bench.workload import Pending, Stream, run_trial, search_goodput


def _deployment(folder: str, max_batch: int, timeout_s: float, threads: int):
    from ray import serve

    @serve.deployment(max_ongoing_requests=1024, ray_actor_options={"num_cpus": 0})
    class Classifier:
        def __init__(self) -> None:
            import torch

            from models.registry import load_model
            from models.repository import ModelRepository

            torch.set_num_threads(threads)
            root = Path(folder).parent.parent
            name, version = Path(folder).parent.name, int(Path(folder).name)
            repo = ModelRepository(root)
            self.model = load_model(repo.spec(name, version), repo.folder(name, version), version, "cpu")

        @serve.batch(max_batch_size=max_batch, batch_wait_timeout_s=timeout_s)
        async def __call__(self, frames: list[np.ndarray]) -> list[np.ndarray]:
            out = self.model.infer(np.stack(frames))
            return [o["head"].probs for o in out]

    return Classifier.bind()


class RayTarget:
    def __init__(self, handle, frame: np.ndarray) -> None:
        import ray

        self.ray = ray
        self.handle = handle
        self.frame = frame
        self._lock = threading.Lock()
        self._waiting: dict = {}  # object ref -> [capture_ms, done_ms or None]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()

    def clock(self) -> float:
        return time.monotonic() * 1000.0

    def _collect(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                refs = [r for r, v in self._waiting.items() if v[1] is None]
            if not refs:
                time.sleep(0.001)
                continue
            ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0.002, fetch_local=False)
            now = self.clock()
            with self._lock:
                for r in ready:
                    self._waiting[r][1] = now

    def send(self, stream: Stream, seq: int, capture_ms: float) -> list[Pending]:
        ref = self.handle.remote(self.frame)._to_object_ref_sync()
        with self._lock:
            self._waiting[ref] = [capture_ms, None]

        def wait() -> tuple[bool, str, int | None]:
            try:
                self.ray.get(ref, timeout=120)
            except Exception:
                return False, "error", None
            while True:
                with self._lock:
                    capture, done = self._waiting[ref]
                if done is not None:
                    break
                time.sleep(0.001)
            with self._lock:
                del self._waiting[ref]
            within = done - capture <= stream.slo_ms
            return within, "ok" if within else "late", None

        return [Pending("app", stream.slo_ms, wait)]

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def ray_goodput(folder: Path, options, frame: np.ndarray, hi: float, log=print) -> float | None:
    try:
        import ray
        from ray import serve
    except ImportError:
        log("    Ray is not installed (pip install 'ray[serve]'): peer skipped")
        return None
    import torch

    threads = torch.get_num_threads()
    ray.init(num_cpus=threads, include_dashboard=False, logging_level="ERROR", log_to_driver=False,
             configure_logging=False)
    try:
        serve.start(proxy_location="Disabled")
        candidates = [(8, 0.01)] if options.quick else [(4, 0.005), (8, 0.01), (16, 0.02), (32, 0.02)]
        best, best_score = candidates[0], -1.0
        probe = 0.6 * hi
        for max_batch, timeout_s in candidates if len(candidates) > 1 else []:
            handle = serve.run(_deployment(str(folder), max_batch, timeout_s, threads), name="peer",
                               route_prefix=None)
            target = RayTarget(handle, frame)
            score = run_trial(target, [Stream("cam", (("app", "m0"),), probe, options.slo_ms)],
                              options.trial, seed=options.seed).attainment()
            target.close()
            log(f"    ray max_batch_size={max_batch} batch_wait_timeout_s={timeout_s}: "
                f"attainment {score:.3f} at {probe:.1f}/s")
            if score > best_score:
                best, best_score = (max_batch, timeout_s), score
        handle = serve.run(_deployment(str(folder), best[0], best[1], threads), name="peer", route_prefix=None)
        target = RayTarget(handle, frame)

        def attainment(rate: float) -> float:
            result = run_trial(target, [Stream("cam", (("app", "m0"),), rate, options.slo_ms)], options.trial,
                               seed=options.seed)
            log(f"    rate {rate:7.1f}/s: attainment {result.attainment():.3f}")
            return result.attainment()

        goodput = search_goodput(attainment, hi, options.steps, retries=0 if options.quick else 1)
        target.close()
        log(f"    ray tuned: max_batch_size={best[0]} batch_wait_timeout_s={best[1]}")
        return round(goodput, 2)
    finally:
        serve.shutdown()
        ray.shutdown()
