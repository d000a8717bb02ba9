"""Servables: loaded model versions, their labels, and the fragment sessions they share.

TF Serving's life cycle: a version is loaded beside the ones serving; the switch of
"latest" (or of a label) is one assignment under the lock; a retired version keeps
serving the requests already pinned to it and is freed when the last one finishes.

Each fragment hash has one `SessionInfo`, shared by every loaded version (of any
model) that contains that fragment, with the fragment's profile. Profiles are read
from the model's folder when present for this device, otherwise measured and stored.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from engine.lanes import use_threads
from engine.profiles import Profile, ProfileStore, device_key, measure
from models.loaded import Fragment, LoadedModel
from models.registry import load_model
from models.repository import ModelRepository, RepositoryError

log = logging.getLogger("vigil.engine")

OTHERS_MAX_CORES = 0.25  # others' load while profiling past which the profile is not stored (engine/machine_load.py)
STALE_RATIO = 2.0  # a stored latency this many times what the device does now is measured again
# stored profiles this process has found not stale: an engine loading the model again
# (each run of an evaluation, each test of a session) does not time the device again
_CHECKED: set[Profile] = set()
_CHECKED_LOCK = threading.Lock()


@dataclass
class Servable:
    model: LoadedModel
    in_flight: int = 0
    retired: bool = False

    @property
    def name(self) -> str:
        return self.model.spec.name

    @property
    def version(self) -> int:
        return self.model.version


@dataclass
class SessionInfo:
    hash: str
    fragment: Fragment
    profile: Profile
    label: str  # model/fragment of the first version that loaded it, for metrics
    refs: int = 0


@dataclass
class ModelManager:
    repository: ModelRepository
    device: str
    threads: int | None = None  # a lane's intra-op threads (engine/lanes.py): profiles are measured on them
    lock: threading.RLock = field(default_factory=threading.RLock)
    versions: dict[str, dict[int, Servable]] = field(default_factory=dict)
    labels: dict[str, dict[str, int]] = field(default_factory=dict)
    # labels set while serving (`set_label`): they win over model_config.yaml's on every later load
    set_labels: dict[str, dict[str, int]] = field(default_factory=dict)
    sessions: dict[str, SessionInfo] = field(default_factory=dict)
    # model -> why its last load failed, until a load of it succeeds: a load may be asked
    # for by an app, a restart or the API, and whoever looks later is told the reason
    failures: dict[str, str] = field(default_factory=dict)
    loading: int = 0  # loads in progress (readiness)
    on_free: Any = None  # callback(servable) after a version is freed
    # False: every version's fragments are its own (as in TF Serving or Clipper); the
    # benchmarks' baselines run this way
    share: bool = True

    def __post_init__(self) -> None:
        self._device_key = device_key(self.device, self.threads)

    # -- resolution ----------------------------------------------------------------------
    def resolve(self, name: str, ref: int | str | None) -> Servable:
        """The servable a request addresses; raises LookupError naming what is loaded. Call under lock."""
        loaded = self.versions.get(name)
        if not loaded:
            known = sorted(self.versions)
            raise LookupError(f"model {name!r} is not loaded (loaded: {known})")
        if ref is None:
            return loaded[max(loaded)]
        if isinstance(ref, str) and not ref.isdigit():
            version = self.labels.get(name, {}).get(ref)
            if version is None:
                raise LookupError(f"model {name!r} has no label {ref!r} (labels: {self.labels.get(name, {})})")
            if version not in loaded:
                raise LookupError(f"model {name!r} label {ref!r} points to version {version}, which is not loaded")
            return loaded[version]
        version = int(ref)
        if version not in loaded:
            raise LookupError(f"model {name!r} version {version} is not loaded (loaded: {sorted(loaded)})")
        return loaded[version]

    # -- loading -------------------------------------------------------------------------------
    def load(self, name: str, versions: list[int] | None = None, retire_others: bool = False) -> list[int]:
        """Load versions (default: the model's version policy) beside those serving. With
        `retire_others`, versions not in the new set stop taking requests in the same step.
        A failure is raised, and kept as the model's last failure until a load succeeds."""
        return self._recording(name, lambda: self._load(name, versions, retire_others))

    def _recording(self, name: str, load: Callable[[], Any]) -> Any:
        """`load()`, its failure kept as `name`'s last (or the last forgotten when it succeeds)."""
        try:
            out = load()
        except Exception as exc:
            with self.lock:
                self.failures[name] = str(exc) or type(exc).__name__
            raise
        with self.lock:
            self.failures.pop(name, None)
        return out

    def _load(self, name: str, versions: list[int] | None, retire_others: bool) -> list[int]:
        config = self.repository.config(name)
        available = self.repository.versions(name)
        if not available:
            raise RepositoryError(f"{self.repository.root / name}: no versions (expected {name}/<N>/model.yaml)")
        wanted = versions if versions is not None else config.version_policy.select(available)
        missing = [v for v in wanted if v not in available]
        if missing:
            raise RepositoryError(f"{self.repository.root / name}: versions {missing} are not in the repository "
                                  f"(have {available})")
        built: list[tuple[LoadedModel, dict[str, Profile]]] = []
        with self.lock:
            self.loading += 1
        try:
            for v in wanted:
                if v in self.versions.get(name, {}):
                    continue
                model = load_model(self.repository.spec(name, v), self.repository.folder(name, v), v, self.device)
                if not self.share:
                    for frag in model.fragments.values():
                        frag.hash = hashlib.sha256(f"{frag.hash}:{name}:{v}".encode()).hexdigest()
                built.append((model, self._profiles(model)))
        finally:
            with self.lock:
                self.loading -= 1
        with self.lock:  # the switch: one step under the lock
            for model, profiles in built:
                self.versions.setdefault(name, {})[model.version] = Servable(model)
                for frag in model.fragments.values():
                    info = self.sessions.get(frag.hash)
                    if info is None:
                        info = self.sessions[frag.hash] = SessionInfo(frag.hash, frag, profiles[frag.name],
                                                                      f"{name}/{frag.name}")
                    info.refs += 1
                if model.random_weights:
                    log.warning("model %s version %s serves RANDOM WEIGHTS", name, model.version)
            self.labels[name] = {**config.labels, **self.set_labels.get(name, {})}
            if retire_others:
                for v in [v for v in self.versions.get(name, {}) if v not in wanted]:
                    self._retire(name, v)
        return [m.version for m, _ in built]

    def unload(self, name: str, version: int | None = None) -> list[int]:
        with self.lock:
            loaded = self.versions.get(name, {})
            targets = list(loaded) if version is None else [version]
            for v in targets:
                if v not in loaded:
                    raise LookupError(f"model {name!r} version {v} is not loaded (loaded: {sorted(loaded)})")
            for v in targets:
                self._retire(name, v)
            return targets

    def reload(self, name: str) -> dict[str, list[int]]:
        """Bring the model in line with its version policy on disk."""
        def reload() -> dict[str, list[int]]:
            config = self.repository.config(name)
            wanted = config.version_policy.select(self.repository.versions(name))
            loaded = self._load(name, wanted, retire_others=True)
            return {"loaded": loaded, "serving": sorted(self.versions.get(name, {}))}

        return self._recording(name, reload)

    def set_label(self, name: str, label: str, version: int) -> None:
        with self.lock:
            if version not in self.versions.get(name, {}):
                raise LookupError(f"model {name!r} version {version} is not loaded")
            self.labels.setdefault(name, {})[label] = version
            self.set_labels.setdefault(name, {})[label] = version

    def _retire(self, name: str, version: int) -> None:
        servable = self.versions[name].pop(version)
        if not self.versions[name]:
            del self.versions[name]
        servable.retired = True
        if servable.in_flight == 0:
            self._free(servable)

    def release(self, servable: Servable) -> None:
        """A request pinned to `servable` finished. Call under lock."""
        servable.in_flight -= 1
        if servable.retired and servable.in_flight == 0:
            self._free(servable)

    def _free(self, servable: Servable) -> None:
        for frag in servable.model.fragments.values():
            info = self.sessions.get(frag.hash)
            if info is not None:
                info.refs -= 1
                if info.refs == 0:
                    del self.sessions[frag.hash]
        if self.on_free:
            self.on_free(servable)
        log.info("freed model %s version %s", servable.name, servable.version)

    # -- profiles -------------------------------------------------------------------------------
    def _profiles(self, model: LoadedModel) -> dict[str, Profile]:
        use_threads(self.threads)  # timed as a lane runs them
        store = ProfileStore(model.folder)
        out: dict[str, Profile] = {}
        samples: dict[str, Any] = {}
        import numpy as np

        h, w = model.spec.input.profile_frame
        frame = np.random.default_rng(0).integers(0, 255, (1, h, w, 3), dtype=np.uint8)
        for name, frag in model.fragments.items():
            sample = model.preprocess(frame)[0] if frag.parent is None else samples[frag.parent]
            samples[name] = frag.split(frag.run(frag.collate([sample])), 1)[0]
            with self.lock:
                shared = self.sessions.get(frag.hash)
            out[name] = shared.profile if shared is not None else \
                self._profile_of(model, name, frag, sample, store)
        return out

    def _profile_of(self, model: LoadedModel, name: str, frag: Fragment, sample: Any,
                    store: ProfileStore) -> Profile:
        """The fragment's stored profile unless it looks stale; otherwise measured, and
        stored unless other processes were busy meanwhile."""
        def run(b: int) -> None:
            frag.run(frag.collate([sample] * b))

        label = f"{model.spec.name}/{name}"
        profile = store.get(frag.hash, self._device_key, tuple(model.spec.batch_sizes))
        if profile is not None:
            with _CHECKED_LOCK:
                checked = profile in _CHECKED
            if checked or not _stale(profile, run, self._synchronize):
                with _CHECKED_LOCK:
                    _CHECKED.add(profile)
                return profile
            log.info("stored profile of %s looks measured on a busy machine; measuring again", label)
        log.info("profiling %s version %s on %s", label, model.version, self.device)
        profile = measure(run, tuple(model.spec.batch_sizes), frag.hash, self._device_key,
                          synchronize=self._synchronize)
        busy = profile.others_cores
        if busy is not None and busy > OTHERS_MAX_CORES:
            log.warning("profiled %s while other processes took %.2f cores: using it for this run, not storing it",
                        label, busy)
        else:
            store.put(profile)
            with _CHECKED_LOCK:
                _CHECKED.add(Profile.from_dict(profile.to_dict()))  # as the store gives it back
        return profile

    def _synchronize(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()

    def _describe_fragment(self, frag: Fragment) -> dict:
        """Under the lock: a fragment and its profile on this device (what a batch of
        each size takes: the capacity the scheduler plans with)."""
        info = self.sessions.get(frag.hash)
        profile = None if info is None else \
            {k: v for k, v in info.profile.to_dict().items() if k != "fragment_hash"}  # `hash` says it
        return {**frag.describe(), "profile": profile}

    def describe(self) -> dict:
        """Each model loaded or whose last load failed: its loaded versions (none when
        the load failed), labels, and `error`, the last failed load's reason (None since
        a load succeeded)."""
        with self.lock:
            names = sorted(set(self.versions) | set(self.failures))
            return {name: {"versions": {v: {"in_flight": s.in_flight, "random_weights": s.model.random_weights,
                                             "fragments": [self._describe_fragment(f)
                                                           for f in s.model.fragments.values()]}
                                         for v, s in sorted(self.versions.get(name, {}).items())},
                           "labels": dict(self.labels.get(name, {})),
                           "error": self.failures.get(name)}
                    for name in names}


def _stale(profile, run_batch, synchronize, tries: int = 3) -> bool:
    """A stored profile whose smallest or largest batch takes over `STALE_RATIO` times
    what the device does now (best of `tries`) was measured while something else had
    the device: planning on it would drop requests that could have been served. The
    largest batch is checked too, because a busy machine slows long batches most: a
    profile measured beside a package install can pass at batch 1 and be far too slow
    at the largest. A tighter ratio re-measures good profiles on a noisy machine."""
    import time as _time

    for size in dict.fromkeys((profile.batch_sizes[0], profile.batch_sizes[-1])):
        best = float("inf")
        for _ in range(tries):
            t0 = _time.perf_counter()
            run_batch(size)
            synchronize()
            best = min(best, (_time.perf_counter() - t0) * 1000.0)
        if profile.latency_ms(size) > STALE_RATIO * best:
            return True
    return False
