"""The service's lifecycle: `close()` joins every thread that `start()` began."""

from __future__ import annotations

import threading

from vigil.service import Vigil
from vigil.settings import Settings


def test_close_joins_the_caption_and_rollup_threads(tmp_path):
    service = Vigil(Settings(data_dir=tmp_path, device="cpu", grpc_port=0, rollup_interval_s=0.2))
    service.start()
    try:
        assert service.llm.engine is not None, "scene-lm should load from configs/models"
        names = {t.name for t in threading.enumerate()}
        assert {"captions", "rollups"} <= names
    finally:
        service.close()
    alive = {t.name for t in threading.enumerate() if t.is_alive()}
    assert not alive & {"captions", "rollups"}
