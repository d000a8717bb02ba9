"""`vigil serve` settings: one object, read once at start-up from YAML, flags and the
environment (only here: `VIGIL_API_KEYS`), then passed down."""

from __future__ import annotations

import hmac
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from apps.spec import format_validation_error

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "configs" / "vigil.yaml"


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_streams: int = Field(32, ge=1)
    max_apps: int = Field(64, ge=1)
    max_page_size: int = Field(1000, ge=1)
    max_body_bytes: int = Field(1 << 20, ge=1024)


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    grpc_port: int = Field(8081, ge=0, le=65535, description="0 turns gRPC off")
    data_dir: Path = Path("vigil-data")
    model_repository: Path = ROOT / "configs" / "models"
    device: str = "auto"
    policy: str = "nexus"
    api_keys: tuple[str, ...] = ()
    block_ms: float = Field(300.0, gt=0)
    block_frames: int = Field(4, ge=1)
    rollup_interval_s: float = Field(5.0, gt=0)
    llm_model: str | None = Field("scene-lm", description="LLM in the model repository; null: no LLM")
    caption_every_s: float = Field(10.0, ge=0, description="caption each stream this often; 0: never")
    limits: Limits = Field(default_factory=Limits)

    def authorized(self, authorization: str | None) -> bool:
        """An `Authorization` header (or gRPC metadata) value is good when no keys are
        configured, or it is `Bearer KEY` for one of them (compared in constant time)."""
        if not self.api_keys:
            return True
        scheme, _, token = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and any(hmac.compare_digest(token.encode(), k.encode())
                                                   for k in self.api_keys)

    def __repr__(self) -> str:  # never print keys
        return f"Settings(host={self.host!r}, port={self.port}, keys={len(self.api_keys)})"

    __str__ = __repr__


class SettingsError(ValueError):
    pass


def load_settings(path: Path | None = None, overrides: dict[str, Any] | None = None,
                  environ: dict[str, str] | None = None) -> Settings:
    """YAML file (the default config when None) <- flags (`overrides`, None values ignored)
    <- VIGIL_API_KEYS. Relative paths in the file are relative to the file's folder."""
    path = path or DEFAULT_CONFIG
    environ = os.environ if environ is None else environ
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise SettingsError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: a config is a mapping of settings; got {type(data).__name__}")
    base = path.resolve().parent
    if path.resolve() == DEFAULT_CONFIG:
        base = ROOT  # the default config's paths are the project's
    for key in ("data_dir", "model_repository"):
        if key in data and not Path(data[key]).is_absolute():
            data[key] = str(base / data[key])
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    keys = environ.get("VIGIL_API_KEYS")
    if keys is not None:
        data["api_keys"] = [k.strip() for k in keys.split(",") if k.strip()]
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise SettingsError(format_validation_error(str(path), exc)) from None
