"""`vigil serve` settings: one object, read once at start-up from YAML, flags and the
environment (only here: `VIGIL_API_KEYS`), then passed down; and the CLI's client
settings (`VIGIL_URL`, `VIGIL_API_KEY`), which name the server it talks to."""

from __future__ import annotations

import hmac
import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from apps.documents import DocumentError, load_yaml
from apps.spec import format_errors
from core.events import EVENT_TYPES
from engine.lanes import AUTO_MAX_LANES, MAX_LANES
from engine.scheduler import POLICIES
from engine.share import MAX_SHARE
from models.repository import MODELS_DIR
from streams.urls import ALL_SCHEMES, DEFAULT_SCHEMES, SourcePolicy

ROOT = Path(__file__).resolve().parents[1]  # the checkout: its configs and sample videos
ANSWERER = "smollm2-135m-instruct:scene"  # the LLM that writes captions and answers offline (`vigil ask --source`)
DEFAULT_CONFIG = ROOT / "configs" / "vigil.yaml"
SAMPLES_DIR = ROOT / "sample_videos"


class Limits(BaseModel):
    """What one client, camera or file can cost the server; every limit is finite."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    max_streams: int = Field(32, ge=1, le=10_000, description="streams registered at once")
    max_apps: int = Field(64, ge=1, le=10_000, description="apps registered at once, over all streams")
    max_page_size: int = Field(1000, ge=1, le=100_000, description="most items one listing returns "
                               "(`limit` of /v1/events)")
    max_body_bytes: int = Field(1 << 20, ge=1024, le=1 << 30, description="request bodies, counted as they "
                                                                          "arrive (chunked or not)")
    max_json_depth: int = Field(32, ge=4, le=256, description="nesting of JSON and YAML bodies")
    max_model_upload_bytes: int = Field(256 << 20, ge=1 << 20, le=16 << 30, description="a model version "
                                        "uploaded as an archive (POST /v1/models/{name}/versions), and what it "
                                        "unpacks to; only with a key when keys are set")
    max_model_files: int = Field(1000, ge=1, le=100_000, description="files in an uploaded model archive")
    max_prompt_chars: int = Field(32_000, ge=16, le=10_000_000, description="an LLM prompt (or all chat "
                                                                           "messages), before tokenizing")
    max_waiting_llm_requests: int = Field(64, ge=1, le=100_000, description="LLM requests queued or running; "
                                                                           "past it: 503 with Retry-After")
    max_connections: int = Field(256, ge=1, le=100_000, description="open HTTP connections; past it a new one "
                                                                   "gets 503 and is closed")
    header_timeout_s: float = Field(10.0, gt=0, le=600, description="a connection must send its request "
                                                                    "headers within this")
    idle_timeout_s: float = Field(5.0, gt=0, le=3600, description="an idle keep-alive connection is closed "
                                                                  "after this")
    max_image_pixels: int = Field(4096 * 4096, ge=64 * 64, le=1 << 30, description="gRPC images: width x "
                                                                                  "height, checked before "
                                                                                  "decoding")
    media_dirs: tuple[Path, ...] = Field((Path("media"), Path("sample_videos")), max_length=64,
                                         description="file streams only from under these folders")
    url_schemes: tuple[str, ...] = Field(DEFAULT_SCHEMES, description=f"of {', '.join(ALL_SCHEMES)}")
    url_hosts: tuple[str, ...] = Field((), max_length=1024, description="network streams only to these hosts "
                                                                        "(names, *.domain, addresses, networks); "
                                                                        "empty: any")
    allow_listen: bool = Field(False, description="allow URLs that make the server listen (udp://, "
                                                  "tcp://...?listen=1)")

    def source_policy(self) -> SourcePolicy:
        return SourcePolicy(self.media_dirs, self.url_schemes, self.url_hosts, self.allow_listen)

    @model_validator(mode="after")
    def _policy_is_valid(self) -> "Limits":
        self.source_policy()  # ValueError naming the bad scheme or host
        return self


class Camera(BaseModel):
    """A camera declared in the config: a stream and the apps that watch it. Only the
    shape is checked here; the stream and each app go through the same services as the
    API's, with the same messages (vigil/services/cameras.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(max_length=64, description="the stream's name")
    url: str = Field(max_length=4096, description="the camera or file, as a stream's url over the API")
    options: dict[str, Any] = Field(default_factory=dict, max_length=32, description="stream options, as the API's")
    apps: tuple[str | dict[str, Any], ...] = Field(
        (), max_length=64, description="a built-in app's name (the app is named CAMERA-NAME) or an app spec "
                                       "(its source is this camera)")


class Webhook(BaseModel):
    """An HTTP endpoint that gets each stored event as a JSON POST."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    url: str = Field(max_length=4096, pattern=r"^https?://[^\x00-\x20\x7f]+$", description="where events are POSTed")
    secret: str | None = Field(None, max_length=1024, description="signs each body (X-Vigil-Signature: sha256=HEX "
                                                                  "of HMAC-SHA256)")
    events: tuple[str, ...] | None = Field(None, max_length=32, description="only these event types; all when "
                                                                           "omitted")
    timeout_s: float = Field(5.0, gt=0, le=120, description="a POST not answered in this long is tried again")
    max_backoff_s: float = Field(30.0, gt=0, le=3600, description="the longest wait between tries")

    @model_validator(mode="after")
    def _known_types(self) -> "Webhook":
        unknown = sorted(set(self.events or ()) - set(EVENT_TYPES))
        if unknown:
            raise ValueError(f"events: {unknown} are not event types ({', '.join(EVENT_TYPES)})")
        return self


class Mqtt(BaseModel):
    """An MQTT broker that gets every stored event (Frigate's topics; docs/guides/events.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    host: str = Field(max_length=255, pattern=r"^[A-Za-z0-9._:-]+$", description="the broker's host name or address")
    port: int = Field(1883, ge=1, le=65535, description="the broker's port")
    topic_prefix: str = Field("vigil", max_length=64, pattern=r"^[A-Za-z0-9_-]+(/[A-Za-z0-9_-]+)*$",
                              description="every topic starts with it (Frigate's `frigate`)")
    username: str | None = Field(None, max_length=256, description="the broker's login; none when omitted")
    password: str | None = Field(None, max_length=1024, description="with username; never logged or returned")
    client_id: str = Field("vigil", max_length=64, pattern=r"^[A-Za-z0-9_-]+$",
                           description="the MQTT client id: one connection per id at the broker")
    discovery_prefix: str | None = Field("homeassistant", max_length=64, pattern=r"^[A-Za-z0-9_-]+$",
                                         description="Home Assistant discovery topics under it; null: none")
    publish_timeout_s: float = Field(5.0, gt=0, le=120, description="a message not acknowledged (QoS 1) "
                                                                    "in this long is sent again")
    max_backoff_s: float = Field(30.0, gt=0, le=3600, description="the longest wait between reconnects")


class Sinks(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    webhooks: tuple[Webhook, ...] = Field((), max_length=32, description="HTTP endpoints, each url once")
    mqtt: Mqtt | None = Field(None, description="an MQTT broker; none when omitted")

    @model_validator(mode="after")
    def _urls_unique(self) -> "Sinks":
        urls = [w.url for w in self.webhooks]
        if len(set(urls)) != len(urls):
            raise ValueError("webhooks: each url once (its place in the events is kept by url)")
        return self


class Snapshots(BaseModel):
    """Each event's frame with the object's box, and a crop of it (runtime/snapshots.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    enabled: bool = Field(False, description="store a snapshot and a crop for each event with a box")
    retain_days: float = Field(7.0, gt=0, le=3650, description="older snapshots are deleted")
    max_mb: float = Field(1024.0, gt=0, le=10_000_000, description="past this the oldest go first")


class Recording(BaseModel):
    """A rolling recording of each stream, its packets remuxed into segments without
    re-encoding, and clips cut from it (streams/recording.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    enabled: bool = Field(False, description="record every stream (not synthetic:// ones)")
    segment_s: float = Field(10.0, ge=1, le=600, description="a segment ends at the first keyframe past this")
    retain_days: float = Field(3.0, gt=0, le=3650, description="older segments are deleted")
    max_gb: float = Field(10.0, gt=0, le=100_000, description="past this the oldest segments go first")
    pre_s: float = Field(5.0, ge=0, le=300, description="an event's clip starts this long before it")
    post_s: float = Field(5.0, ge=0, le=300, description="and ends this long after it")
    max_clip_s: float = Field(600.0, gt=0, le=3600, description="the longest clip one request may cut")


class Cluster(BaseModel):
    """A Ray cluster that runs the engine (cluster/front.py); streams, apps, storage and
    the API stay in `vigil serve`'s process."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    address: str = Field(max_length=255, pattern=r"^(auto|[A-Za-z0-9._-]+:[0-9]{1,5})$",
                         description="`ray start --head`'s address, host:port, or auto")
    cpus_per_backend: float = Field(1.0, gt=0, le=1024, description="a backend's CPU slot on a cluster "
                                                                    "without GPUs (one backend per GPU otherwise)")
    beacon_s: float = Field(1.0, ge=0.05, le=60, description="heartbeats and the scheduler's checks")
    actors: bool = Field(True, description="decode each stream and run its apps in Ray actors on the backends' "
                                           "nodes, restarted when they die (false: in vigil serve's process)")


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    host: str = Field("127.0.0.1", max_length=255, description="address the REST and gRPC servers listen on; "
                      "0.0.0.0 for every interface (set api_keys first)")
    port: int = Field(8080, ge=0, le=65535, description="REST port; 0: any free port")
    grpc_port: int = Field(8081, ge=0, le=65535, description="0 turns gRPC off")
    data_dir: Path = Field(Path("vigil-data"), description="the database, snapshots and recordings")
    model_repository: Path = Field(MODELS_DIR, description="the model repository served")
    device: str = Field("auto", max_length=32, description="auto (CUDA when present), cpu, cuda or cuda:N")
    policy: str = Field("nexus", max_length=32, description=f"the engine's batching policy, of {', '.join(POLICIES)}: "
                        "nexus sizes batches to each app's SLO and drops early; the others are the baselines "
                        "`vigil bench engine` compares")
    lanes: int | None = Field(None, ge=1, le=MAX_LANES, description="batches the device runs at once, each on its "
                              "share of the cores; null: one on a GPU, one per core up to "
                              f"{AUTO_MAX_LANES} on a CPU")
    api_keys: tuple[str, ...] = Field((), max_length=1024, description="Bearer keys for mutating routes, the LLM's and "
                                      "gRPC; none: open. Also from $VIGIL_API_KEYS")
    open_llm_routes: bool = Field(False, description="true: /v1/completions, /v1/chat/completions and /v1/ask "
                                                     "need no key even when keys are set")
    block_ms: float = Field(300.0, gt=0, le=60_000, description="a frame block spans at most this much stream "
                            "time")
    quiet_after_s: float = Field(300.0, ge=1, le=86_400, description="an app whose model finds none of its "
                                 "classes in this much analysed stream time says so in its status (warning)")
    block_frames: int = Field(4, ge=1, le=1024, description="a frame block holds at most this many frames")
    rollup_interval_s: float = Field(5.0, gt=0, le=3600, description="how often per-app metric windows are "
                                     "stored")
    llm_model: str | None = Field("scene-lm", pattern=r"^[A-Za-z0-9_.-]{1,100}(:[A-Za-z0-9_.-]{1,64})?$",
                                  description="the served LLM that writes captions and answers /v1/ask: a model of "
                                  "the repository, or `<model>:<adapter>` for one of its LoRA adapters (all of them "
                                  "are served on the OpenAI routes too); null: no LLM")
    llm_models: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,100}$")]] = Field(
        default_factory=list, max_length=8, description="more LLMs of the model repository served beside llm_model "
        "on the OpenAI routes (a request names one as its `model`); they share the device's LLM time")
    caption_every_s: float = Field(10.0, ge=0, le=86_400, description="caption each stream this often; 0: never")
    llm_min_share: float = Field(0.1, ge=0, le=MAX_SHARE, description="of device time owed to LLM steps "
                                                                     "under full vision load; the rest of "
                                                                     "the time they run in vision's slack")
    limits: Limits = Field(default_factory=Limits, description="what one client, camera or file can cost")
    sinks: Sinks = Field(default_factory=Sinks, description="where events go besides storage")
    snapshots: Snapshots = Field(default_factory=Snapshots, description="an image of each event")
    recording: Recording = Field(default_factory=Recording, description="rolling recordings and event clips")
    cluster: Cluster | None = Field(None, description="run the engine on a Ray cluster; null: in this process")
    cameras: tuple[Camera, ...] = Field((), max_length=1024, description="created at start, and changed by "
                                        "POST /v1/config/reload or SIGHUP")

    @model_validator(mode="after")
    def _cameras_unique(self) -> "Settings":
        names = [c.name for c in self.cameras]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"cameras: each name once; {twice} appear more than once")
        return self

    @model_validator(mode="after")
    def _llms_unique(self) -> "Settings":
        names = self.served_llms()
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"llm_models: each LLM once, llm_model included; {twice} appear more than once")
        return self

    def served_llms(self) -> list[str]:
        """The LLMs loaded: llm_model's first, then llm_models."""
        return ([self.llm_model.partition(":")[0]] if self.llm_model else []) + list(self.llm_models)

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


def env_api_keys(environ: dict[str, str] | None = None) -> list[str] | None:
    """The keys `VIGIL_API_KEYS` sets (comma-separated); None when it is not set."""
    keys = (os.environ if environ is None else environ).get("VIGIL_API_KEYS")
    return None if keys is None else [k.strip() for k in keys.split(",") if k.strip()]


DEFAULT_URL = "http://127.0.0.1:8080"


class ClientSettings(BaseModel):
    """Where the CLI's remote commands (`vigil streams|apps|models|events`, `vigil ask`)
    find the server, and the key they send: flags, else the environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(DEFAULT_URL, max_length=4096, pattern=r"^https?://[^\x00-\x20\x7f]+$",
                     description="the server's REST address, http(s)://HOST:PORT")
    api_key: str | None = Field(None, max_length=1024, repr=False, description="sent as `Authorization: Bearer KEY`")


def client_settings(url: str | None = None, api_key: str | None = None,
                    environ: dict[str, str] | None = None) -> ClientSettings:
    """--url, else $VIGIL_URL, else http://127.0.0.1:8080; --api-key, else $VIGIL_API_KEY,
    else the first of the server's $VIGIL_API_KEYS (a shell that started the server)."""
    environ = os.environ if environ is None else environ
    keys = env_api_keys(environ) or []
    url = url or environ.get("VIGIL_URL") or DEFAULT_URL
    try:
        return ClientSettings(url=url, api_key=api_key or environ.get("VIGIL_API_KEY") or (keys[0] if keys else None))
    except ValidationError:
        raise SettingsError(f"--url (or $VIGIL_URL) must be http(s)://HOST:PORT, e.g. {DEFAULT_URL}; was {url!r}") \
            from None


def load_settings(path: Path | None = None, overrides: dict[str, Any] | None = None,
                  environ: dict[str, str] | None = None) -> Settings:
    """YAML file (the default config when None) <- flags (`overrides`, None values ignored)
    <- VIGIL_API_KEYS. Relative paths in the file are relative to the file's folder."""
    path = path or DEFAULT_CONFIG
    environ = os.environ if environ is None else environ
    try:
        data = load_yaml(path.read_text()) or {}
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read: {exc.strerror}") from None
    except DocumentError as exc:
        raise SettingsError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: a config is a mapping of settings; got {type(data).__name__}")
    base = path.resolve().parent
    bases = {"data_dir": base, "model_repository": base}
    if path.resolve() == DEFAULT_CONFIG:
        # the default config's models are the project's; its data is the user's, where they run it
        base = ROOT
        bases = {"data_dir": Path.cwd(), "model_repository": ROOT}
    for key, key_base in bases.items():
        if key in data and not Path(data[key]).is_absolute():
            data[key] = str(key_base / data[key])
    limits = data.get("limits")
    # media folders the file names are relative to its folder; the defaults, to the working directory
    if isinstance(limits, dict) and isinstance(limits.get("media_dirs"), list):
        limits["media_dirs"] = [str(base / d) if isinstance(d, str) and not Path(d).is_absolute() else d
                                for d in limits["media_dirs"]]
    for k, v in (overrides or {}).items():
        if v is None:
            continue
        # a flag's mapping (--cluster ADDRESS) sets its keys; the file's others stay
        data[k] = {**data[k], **v} if isinstance(v, dict) and isinstance(data.get(k), dict) else v
    keys = env_api_keys(environ)
    if keys is not None:
        data["api_keys"] = keys
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise SettingsError(format_errors(exc.errors(), str(path), Settings)) from None
