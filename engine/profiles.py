"""Batch-latency profiles: l(b) per fragment, measured on the device that runs it.

A profile holds the mean and standard deviation of one batch's latency for each
allowed batch size, measured after warm-up. Between measured sizes latency is
interpolated linearly, and beyond the largest by the fitted line l(b) = alpha*b + beta
(Nexus). Profiles are stored beside the model, keyed by device, and reused while the
fragment's content hash and the device key stay the same.

On a GPU a bigger batch gives more items a second up to the largest size, which is why
Nexus fills batches as far as the SLO allows. On a CPU it does not: past the size whose
activations fit the caches, each item costs more (SceneDet's backbone on one core costs
more an item in batches of 16 than in sixes or eights). A profile therefore also names
its efficient batch, the largest measured size within `EFFICIENT_TOLERANCE` of the best
items per second, and the scheduler never forms a batch past it.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from engine.machine_load import OthersLoad

EFFICIENT_TOLERANCE = 0.03  # sizes this close to the best items/s (above the rounds' own spread) count as as good


@dataclass(frozen=True)
class Profile:
    fragment_hash: str
    device_key: str
    batch_sizes: tuple[int, ...]
    mean_ms: tuple[float, ...]
    std_ms: tuple[float, ...]
    # cores' worth of CPU that other processes took while it was measured
    # (engine/machine_load.py); None where that is not known
    others_cores: float | None = None

    def __post_init__(self) -> None:
        if not self.batch_sizes or list(self.batch_sizes) != sorted(set(self.batch_sizes)):
            raise ValueError(f"batch_sizes must be increasing and non-empty; was {self.batch_sizes}")
        if not (len(self.mean_ms) == len(self.std_ms) == len(self.batch_sizes)):
            raise ValueError("profile arrays disagree in length")
        # every batch size's interpolated latency, once: the scheduler asks for them
        # under the engine's lock, many times a plan, where an np.interp call each time adds up
        every = np.arange(1, self.batch_sizes[-1] + 1, dtype=np.float64)
        sizes = np.array(self.batch_sizes, np.float64)
        object.__setattr__(self, "_means", np.interp(every, sizes, np.array(self.mean_ms)).tolist())
        object.__setattr__(self, "_stds", np.interp(every, sizes, np.array(self.std_ms)).tolist())
        object.__setattr__(self, "_line", None)  # fit(), the first time a batch past the largest is asked for
        rates = [b / m if m > 0 else math.inf for b, m in zip(self.batch_sizes, self.mean_ms)]
        good = [b for b, r in zip(self.batch_sizes, rates) if r >= (1 - EFFICIENT_TOLERANCE) * max(rates)]
        object.__setattr__(self, "_efficient", max(good))

    @property
    def max_batch(self) -> int:
        return self.batch_sizes[-1]

    @property
    def efficient_batch(self) -> int:
        """The largest measured size whose items/s is within `EFFICIENT_TOLERANCE` of the
        best: a bigger batch only finishes fewer items a second and holds the device longer."""
        return self._efficient

    def latency_ms(self, batch: int, sigmas: float = 0.0) -> float:
        """Expected latency of a batch of `batch`, plus `sigmas` standard deviations."""
        if batch < 1:
            raise ValueError(f"batch must be >= 1; was {batch}")
        if batch <= len(self._means):
            return self._means[batch - 1] + sigmas * self._stds[batch - 1]
        if self._line is None:
            object.__setattr__(self, "_line", self.fit())
        alpha, beta = self._line
        return alpha * batch + beta + sigmas * float(self.std_ms[-1])

    def fit(self) -> tuple[float, float]:
        """Least-squares (alpha, beta) of l(b) = alpha*b + beta."""
        if len(self.batch_sizes) == 1:
            return 0.0, float(self.mean_ms[0])
        alpha, beta = np.polyfit(np.array(self.batch_sizes, np.float64), np.array(self.mean_ms), 1)
        return float(alpha), float(beta)

    def largest_batch_within(self, budget_ms: float, limit: int | None = None, sigmas: float = 0.0) -> int:
        """The largest allowed batch whose latency fits the budget; 0 when none does."""
        best = 0
        for b in range(1, min(limit or self.max_batch, self.max_batch) + 1):
            if self.latency_ms(b, sigmas) <= budget_ms:
                best = b
            else:
                break
        return best

    def throughput(self, batch: int) -> float:
        """Items per second at this batch size."""
        return batch * 1000.0 / self.latency_ms(batch)

    @classmethod
    def linear(cls, alpha_ms: float, beta_ms: float, max_batch: int, fragment_hash: str = "linear",
               device_key: str = "model") -> "Profile":
        """l(b) = alpha * b + beta ms at every batch size up to `max_batch`, with no
        spread: a device that behaves as a model says (simulations and tests)."""
        sizes = tuple(range(1, max_batch + 1))
        return cls(fragment_hash, device_key, sizes, tuple(alpha_ms * b + beta_ms for b in sizes),
                   tuple(0.0 for _ in sizes))

    def scaled(self, factor: float) -> "Profile":
        """The same profile with every latency multiplied: what the device gives now."""
        return Profile(self.fragment_hash, self.device_key, self.batch_sizes,
                       tuple(m * factor for m in self.mean_ms), tuple(s * factor for s in self.std_ms),
                       self.others_cores)

    def to_dict(self) -> dict:
        out = {"fragment_hash": self.fragment_hash, "device_key": self.device_key,
               "batch_sizes": list(self.batch_sizes), "mean_ms": [round(v, 4) for v in self.mean_ms],
               "std_ms": [round(v, 4) for v in self.std_ms]}
        if self.others_cores is not None:
            out["others_cores"] = round(self.others_cores, 2)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "Profile":
        return cls(d["fragment_hash"], d["device_key"], tuple(d["batch_sizes"]), tuple(d["mean_ms"]),
                   tuple(d["std_ms"]), d.get("others_cores"))


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name where Linux tells it (`platform.processor()` is empty there,
    and "x86_64" alone let a profile from one CPU plan for another), else what
    `platform` knows."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return f"{platform.machine()}-{value.strip()}"
    return platform.processor() or platform.machine()


def device_key(device: str, threads: int | None = None) -> str:
    """Identifies the hardware and software a profile was measured on: on a CPU, with
    the threads a batch runs on (engine/lanes.py; None: torch's count)."""
    import torch

    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(torch.device(device))
    else:
        name = f"{cpu_model()}-{threads or torch.get_num_threads()}threads"
    return f"{device.split(':')[0]}:{name}:torch{torch.__version__}".replace(" ", "_").replace("/", "_")


def measure(run_batch: Callable[[int], None], batch_sizes: tuple[int, ...], fragment_hash: str, dev_key: str,
            warmup: int = 2, repeats: int = 7, synchronize: Callable[[], None] = lambda: None,
            timer: Callable[[], float] = time.perf_counter) -> Profile:
    """Time `run_batch(b)` for each size in `repeats` rounds that each run every size
    once, after `warmup` untimed rounds. A slow spell of the machine (another process,
    a busy neighbour on the host) then falls on every size alike instead of on the
    sizes timed during it, so the sizes compare fairly, which the efficient batch
    depends on; the median over rounds drops a spell shorter than half of them. The
    profile keeps what other processes took of the machine meanwhile (`others_cores`):
    a longer spell slows every size, and whoever plans with it can say so."""
    with OthersLoad() as others:
        times = _timed(run_batch, batch_sizes, warmup, repeats, synchronize, timer)
    means = [float(np.median(times[b])) for b in batch_sizes]
    stds = [float(np.std(times[b])) for b in batch_sizes]
    # A bigger batch never takes less time; a dip is noise, and planning on it would
    # overfill batches.
    means = np.maximum.accumulate(means).tolist()
    return Profile(fragment_hash, dev_key, tuple(batch_sizes), tuple(means), tuple(stds), others.cores)


def _timed(run_batch: Callable[[int], None], batch_sizes: tuple[int, ...], warmup: int, repeats: int,
           synchronize: Callable[[], None], timer: Callable[[], float]) -> dict[int, list[float]]:
    """Each size's latencies (ms), one a round, after the warm-up rounds."""
    for _ in range(warmup):
        for b in batch_sizes:
            run_batch(b)
    synchronize()
    times: dict[int, list[float]] = {b: [] for b in batch_sizes}
    for _ in range(repeats):
        for b in batch_sizes:
            t0 = timer()
            run_batch(b)
            synchronize()
            times[b].append((timer() - t0) * 1000.0)
    return times


@dataclass
class ProfileStore:
    """Profiles on disk: `<model dir>/profiles/<device key>.json`, by fragment hash."""

    folder: Path
    _cache: dict[str, dict] = field(default_factory=dict)

    def _path(self, dev_key: str) -> Path:
        return self.folder / "profiles" / f"{dev_key}.json"

    def get(self, fragment_hash: str, dev_key: str, batch_sizes: tuple[int, ...]) -> Profile | None:
        path = self._path(dev_key)
        if dev_key not in self._cache:
            try:
                self._cache[dev_key] = json.loads(path.read_text()) if path.exists() else {}
            except (OSError, json.JSONDecodeError):
                self._cache[dev_key] = {}  # a damaged profile file is measured again
        entry = self._cache[dev_key].get(fragment_hash)
        if entry is None:
            return None
        profile = Profile.from_dict(entry)
        return profile if profile.batch_sizes == tuple(batch_sizes) else None

    def put(self, profile: Profile) -> None:
        entries = self._cache.setdefault(profile.device_key, {})
        entries[profile.fragment_hash] = profile.to_dict()
        path = self._path(profile.device_key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # processes sharing the repository write apart
            tmp.write_text(json.dumps(entries, indent=1))
            tmp.replace(path)
        except OSError:
            pass  # a read-only model repository still serves; it only profiles again next time
