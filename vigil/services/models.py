"""Models: the vision models of the repository, their versions on disk and loaded,
labels (written to storage, so a restart brings them back) and uploads of new versions.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from apps.spec import unknown_classes
from engine.engine import Engine
from models.repository import ModelConfig, ModelRepository, RepositoryError
from vigil.services.errors import Conflict, Invalid, NotFound
from vigil.settings import Limits
from vigil.storage import Storage

log = logging.getLogger("vigil.services.models")


class ModelService:
    def __init__(self, repository: ModelRepository, engine: Engine, storage: Storage, limits: Limits) -> None:
        self.repository = repository
        self.engine = engine
        self.storage = storage
        self.limits = limits

    def restore(self) -> None:
        """Load the models whose labels storage holds and point the labels again."""
        for model, label, version in self.storage.labels():
            try:
                self.engine.load(model)
                self.engine.set_label(model, label, version)
            except (RepositoryError, LookupError, ValueError) as exc:
                log.warning("label %s=%s of %s not restored: %s", label, version, model, exc)

    def list(self) -> list[dict]:
        loaded = self.engine.models()
        out = []
        for name in self.repository.model_names():
            try:
                config = self.repository.config(name)
                on_disk = self.repository.versions(name)
                error = None
            except (RepositoryError, ValueError) as exc:
                config, on_disk, error = None, [], str(exc)
            live = loaded.get(name, {})
            labels = dict(config.labels) if config else {}
            labels.update(live.get("labels", {}))
            versions = live.get("versions", {})
            out.append({"name": name, "versions_on_disk": on_disk, "loaded": sorted(int(v) for v in versions),
                        "labels": labels,
                        # what is wrong with its files, else why its last load failed (until one succeeds)
                        "error": self.shown(error or live.get("error")),
                        "license": self.license(name, config),
                        # per loaded version: its fragments, with what a batch of each size takes here
                        "fragments": {str(v): info["fragments"] for v, info in sorted(versions.items())}})
        return out

    def get(self, name: str) -> dict:
        for m in self.list():
            if m["name"] == name:
                return m
        raise NotFound(f"no model {name!r} in the model repository ({', '.join(self.repository.model_names())})")

    def license(self, name: str, config: ModelConfig | None = None) -> dict | None:
        """The weights' licence, as model_config.yaml states it (None: it does not)."""
        try:
            config = config or self.repository.config(name)
        except (RepositoryError, ValueError):
            return None
        return config.license.model_dump(mode="json") if config.license else None

    def shown(self, text: str | None) -> str | None:
        """A message for a client: paths inside the model repository relative to it
        (the server's own folders are not the client's business)."""
        root = str(self.repository.root)
        return None if text is None else text.replace(root + "/", "").replace(root, "the model repository")

    def check_detector(self, detector: str, classes: list[str] | None) -> None:
        """`detector` is a model of the repository whose newest version knows `classes`."""
        if detector not in self.repository.model_names():
            raise NotFound(f"detector: {detector!r} is neither a host detector nor a model in the "
                           f"repository ({', '.join(self.repository.model_names())})")
        try:
            versions = self.repository.versions(detector)
            labels = self.repository.spec(detector, max(versions)).labels
        except (RepositoryError, ValueError) as exc:
            raise Invalid(f"detector: {exc}") from None
        wrong = unknown_classes(classes, detector, labels)
        if wrong:
            raise Invalid(wrong)

    def load(self, name: str, versions: list[int] | None = None) -> dict:
        self._call(name, lambda: self.engine.load(name, versions))
        return self.get(name)

    def unload(self, name: str, version: int | None = None) -> dict:
        self._call(name, lambda: self.engine.unload(name, version))
        return self.get(name)

    def reload(self, name: str) -> dict:
        self._call(name, lambda: self.engine.reload(name))
        return self.get(name)

    def set_label(self, name: str, label: str, version: int) -> dict:
        def apply() -> None:
            self.engine.ensure_loaded(name)  # a label points at a loaded version
            self.engine.set_label(name, label, version)

        self._call(name, apply)
        self.storage.put_label(name, label, version)
        return self.get(name)

    def add_version(self, name: str, archive: Path) -> dict:
        """An uploaded archive of a version folder becomes `name`'s next version, once it
        loads (vigil/model_upload.py); the server's own model files are never touched."""
        from llm.model import CheckpointError
        from models.registry import load_model
        from models.repository import NAME, read_spec
        from vigil.model_upload import UploadError, add_version

        if not NAME.match(name):
            raise Invalid(f"name: a model name is lowercase letters, digits, - and _ (at most 64); was {name!r}")

        llm = False

        def check(folder: Path, version: int) -> None:
            nonlocal llm
            if not (folder / "model.yaml").exists():  # an LLM's GGUF file: it must load, as llm_model would
                from llm.checkpoint import load_checkpoint

                llm = True
                try:
                    load_checkpoint(folder, "cpu")
                except ValueError as exc:  # the file, its architecture, quantization or tokenizer
                    raise CheckpointError(str(exc)) from None
                return
            spec = read_spec(folder / "model.yaml", name)
            model = load_model(spec, folder, version, "cpu")  # it must build and run before it is added
            del model

        try:
            version = add_version(self.repository.root, name, archive, self.limits.max_model_upload_bytes,
                                  self.limits.max_model_files, check)
        except UploadError as exc:
            raise Invalid(f"archive: {exc}") from None
        except (RepositoryError, CheckpointError) as exc:
            raise Invalid(self.shown(str(exc)).replace(".upload-", "upload ")) from None
        log.info("model %s: version %d added from an upload", name, version)
        if llm:  # served once llm_model or llm_models names it
            return {"name": name, "kind": "llm", "added_version": version}
        if self.engine.versions(name):  # loaded: the new version goes live
            self._call(name, lambda: self.engine.reload(name))
        return {**self.get(name), "added_version": version}

    def _call(self, name: str, fn: Callable[[], Any]) -> Any:
        if name not in self.repository.model_names():
            raise NotFound(f"no model {name!r} in the model repository ({', '.join(self.repository.model_names())})")
        try:
            return fn()
        except RepositoryError as exc:
            raise Invalid(self.shown(str(exc))) from None
        except (LookupError, ValueError) as exc:
            raise Conflict(self.shown(str(exc))) from None
