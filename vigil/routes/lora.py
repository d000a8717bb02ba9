"""vLLM's run-time LoRA routes: POST /v1/load_lora_adapter and /v1/unload_lora_adapter.

An adapter is served as `<llm>:<name>` (a bare name adapts llm_model's LLM). Its folder
is in peft's format and within the model repository (a relative path is the LLM's own
folder's); one whose rank, projections or shapes do not fit the base is refused with
the reason (409), and so is a load past the engine's `max_loras`. Both routes always
need the API key: they change what the server serves.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from vigil.routes.deps import KEY, ServiceDep

router = APIRouter(prefix="/v1", tags=["llm"])

SERVED_ID = r"^([A-Za-z0-9_.-]{1,100}:)?[A-Za-z0-9_.-]{1,64}$"


class LoadAdapterIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    lora_name: str = Field(pattern=SERVED_ID, description="`<llm>:<adapter>`, or `<adapter>` for llm_model's LLM")
    lora_path: str = Field(min_length=1, max_length=1024, pattern=r"^[^\x00]+$",
                           description="the adapter's folder (peft's format), within the model repository; "
                                       "relative: to the LLM's folder")


class UnloadAdapterIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    lora_name: str = Field(pattern=SERVED_ID)


@router.post("/load_lora_adapter", dependencies=KEY)
async def load_lora_adapter(body: LoadAdapterIn, service: ServiceDep) -> dict:
    """Serve a LoRA adapter under its own id, from now on."""
    served = await run_in_threadpool(service.llm.load_adapter, body.lora_name, Path(body.lora_path))
    return {"id": served, "loaded": True}


@router.post("/unload_lora_adapter", dependencies=KEY)
def unload_lora_adapter(body: UnloadAdapterIn, service: ServiceDep) -> dict:
    """Stop serving a LoRA adapter (409 while requests use it)."""
    return {"id": service.llm.unload_adapter(body.lora_name), "loaded": False}
