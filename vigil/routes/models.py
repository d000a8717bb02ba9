"""/v1/models: every model (the repository's vision models and the LLM), versions
loaded and unloaded, labels, and new versions uploaded as archives."""

from __future__ import annotations

import tempfile
from pathlib import Path

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from vigil.routes.deps import KEY, ServiceDep
from vigil.services.errors import TooLarge

router = APIRouter(prefix="/v1/models", tags=["models"])

UPLOAD_BODY = {"requestBody": {"required": True, "content": {"application/octet-stream": {"schema": {
    "type": "string", "format": "binary",
    "description": "a .tar, .tar.gz or .zip of a version folder (model.yaml and the files it names)"}}}}}


class LoadIn(BaseModel):
    versions: list[int] | None = Field(None, max_length=64)


class LabelIn(BaseModel):
    version: int = Field(ge=1, le=2**31)


@router.get("")
def list_models(service: ServiceDep) -> dict:
    """Every model: vision models of the repository and the LLMs served, as an
    OpenAI-style list (`id`, `object`, `owned_by`) with Vigil's fields (`kind`: vision |
    llm; `license`, the weights' licence from model_config.yaml; a vision model's `error`,
    what is wrong with its files or why its last load failed; an LLM's `lora`, the adapter
    and each of its LoRA adapters, `<llm>:<adapter>` with its `parent`; `answers`: whether
    it writes captions and answers /v1/ask)."""
    data = [{"id": m["name"], "object": "model", "created": 0, "owned_by": "vigil", "kind": "vision", **m}
            for m in service.models.list()]
    answering = service.llm.engine.id if service.llm.engine is not None else None
    for served in service.llm.served_ids():
        llm = service.llm.engine_for(served)
        data.append({"id": served, "object": "model", "created": 0, "owned_by": "vigil", "kind": "llm",
                     "root": llm.engine.name, "parent": llm.engine.name if llm.adapter else None,
                     "max_model_len": llm.engine.max_model_len, "answers": served == answering,
                     "license": service.models.license(llm.engine.name)})
    return {"object": "list", "data": data}


@router.get("/{name}")
def get_model(name: str, service: ServiceDep) -> dict:
    return service.models.get(name)


@router.post("/{name}/load", dependencies=KEY)
def load_model(name: str, service: ServiceDep, body: LoadIn | None = None) -> dict:
    return service.models.load(name, body.versions if body else None)


@router.post("/{name}/unload", dependencies=KEY)
def unload_model(name: str, service: ServiceDep, version: int | None = Query(None, ge=1)) -> dict:
    return service.models.unload(name, version)


@router.post("/{name}/reload", dependencies=KEY)
def reload_model(name: str, service: ServiceDep) -> dict:
    return service.models.reload(name)


@router.post("/{name}/versions", status_code=201, dependencies=KEY, openapi_extra=UPLOAD_BODY)
async def add_model_version(name: str, request: Request, service: ServiceDep) -> dict:
    """Upload a version folder as an archive: it becomes the model's next version once it
    builds and runs (a new model when the name is new); at most limits.max_model_upload_bytes."""
    limit = service.settings.limits.max_model_upload_bytes
    with tempfile.NamedTemporaryFile(dir=service.repository.root, prefix=".upload-", suffix=".archive") as f:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"body: over {limit} bytes (limits.max_model_upload_bytes)")
            await run_in_threadpool(f.write, chunk)
        await run_in_threadpool(f.flush)
        return await run_in_threadpool(service.models.add_version, name, Path(f.name))


@router.put("/{name}/labels/{label}", dependencies=KEY)
def set_label(name: str, label: str, body: LabelIn, service: ServiceDep) -> dict:
    return service.models.set_label(name, label, body.version)
