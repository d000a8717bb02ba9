"""GET /v1/models/{name} as the model service answers it: a model whose load failed keeps
the reason until a load succeeds, and each model states its weights' licence."""

from __future__ import annotations

import pytest
import torch

from engine.engine import Engine
from models.repository import ModelRepository
from repo import tiny_state, write_model
from vigil.services.errors import Invalid
from vigil.services.models import ModelService
from vigil.settings import Limits
from vigil.storage import Storage


@pytest.fixture
def service(tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "good", 1, config={"license": {"spdx": "MIT", "authors": "us", "url": "https://example.org"}})
    write_model(repo, "bad", 1, state={"backbone.0.weight": torch.zeros(1)})
    engine = Engine(ModelRepository(repo), "cpu")
    storage = Storage(tmp_path / "data" / "vigil.db")
    yield ModelService(ModelRepository(repo), engine, storage, Limits())
    engine.close()
    storage.close()


def test_a_failed_load_keeps_its_reason_in_the_models_description(service):
    assert service.get("bad")["error"] is None
    with pytest.raises(Invalid) as refused:
        service.load("bad")
    shown = service.get("bad")
    assert shown["error"] == str(refused.value) and "does not match the architecture" in shown["error"]
    assert str(service.repository.root) not in shown["error"]  # the server's folders stay its own
    assert shown["loaded"] == []
    torch.save(tiny_state(), service.repository.folder("bad", 1) / "model.pt")
    assert service.load("bad")["error"] is None


def test_each_model_states_its_licence(service):
    assert service.get("good")["license"] == {"spdx": "MIT", "authors": "us", "url": "https://example.org"}
    assert service.get("bad")["license"] is None
