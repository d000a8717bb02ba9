"""The model verbs of the engine's boundary: versions in and out, labels, and what is
loaded and how fast it runs.

The engine (engine/engine.py) takes these from `ModelVerbs`; they reach the model
manager (engine/servables.py) under the lock of the engine's core (engine/core.py), so
a version is never swapped in the middle of a plan. Plain data in and out, as a cluster backend exposes them.
"""

from __future__ import annotations

from engine.core import EngineCore
from engine.metrics import EngineMetrics
from engine.profiles import Profile
from engine.servables import ModelManager


class ModelVerbs:
    core: EngineCore
    manager: ModelManager  # the core's
    metrics: EngineMetrics

    def load(self, name: str, versions: list[int] | None = None) -> list[int]:
        loaded = self.manager.load(name, versions)
        self._mark_random(name)
        return loaded

    def ensure_loaded(self, name: str) -> None:
        """Load a model unless some version of it is loaded (cheap on the request path)."""
        if not self.versions(name):
            self.load(name)

    def unload(self, name: str, version: int | None = None) -> list[int]:
        return self.manager.unload(name, version)

    def reload(self, name: str) -> dict[str, list[int]]:
        out = self.manager.reload(name)
        self._mark_random(name)
        return out

    def set_label(self, name: str, label: str, version: int) -> None:
        self.manager.set_label(name, label, version)

    def labels(self, name: str, version: int | str | None = None) -> tuple[str, ...]:
        """The class labels of the loaded version a request with this version would get
        (LookupError when none is)."""
        with self.core.lock:
            return tuple(self.manager.resolve(name, version).model.spec.labels)

    def resolve_version(self, name: str, version: int | str | None = None) -> int:
        """The loaded version a request with this version (a number, a label, or None for
        the latest) would get; LookupError naming what is loaded when none is."""
        with self.core.lock:
            return self.manager.resolve(name, version).version

    def domain(self, name: str, version: int | str | None = None) -> str | None:
        """What the version a request would get was trained on (model.yaml's domain)."""
        with self.core.lock:
            return self.manager.resolve(name, version).model.spec.domain

    def versions(self, name: str) -> list[int]:
        with self.core.lock:
            return sorted(self.manager.versions.get(name, {}))

    def fragment_profiles(self, name: str, version: int | str | None = None) -> list[Profile]:
        """The stored profiles of a loaded version's fragments, root first."""
        with self.core.lock:
            model = self.manager.resolve(name, version).model
            return [self.manager.sessions[f.hash].profile for f in model.fragments.values()]

    @property
    def ready(self) -> bool:
        return self.manager.loading == 0

    def profiles(self) -> dict[str, dict]:
        with self.core.lock:
            return {info.label: info.profile.to_dict() for info in self.manager.sessions.values()}

    def models(self) -> dict:
        return self.manager.describe()

    def selections(self) -> list[dict]:
        """Every adaptive-selection switch (the newest 10,000)."""
        with self.core.lock:
            return list(self.core.admission.selector.switches)

    def _mark_random(self, name: str) -> None:
        with self.core.lock:
            for v, s in self.manager.versions.get(name, {}).items():
                self.metrics.random_weights.labels(name, str(v)).set(1 if s.model.random_weights else 0)
