"""The model repository on disk, TF Serving style.

    configs/models/<name>/model_config.yaml      version policy and labels (optional)
    configs/models/<name>/<version>/model.yaml   how to build and run that version
    configs/models/<name>/<version>/<weights>    weight files it names

`model_config.yaml`:

    version_policy: {latest: 2}        # or {specific: [1, 3]} or all
    labels: {stable: 1, canary: 2}
    license: {spdx: MIT, authors: ..., url: https://...}

`model.yaml` is validated into a `ModelSpec`; every error names the file and the field.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

Adapter = Literal["python", "torchvision", "torchscript", "torch_export", "onnx", "tfjs", "opencv_hog", "opencv_haar",
                  "transformers"]
YoloKind = Literal["yolo", "yolov5", "yolo_end2end"]  # decoded by models/yolo.py
DenseKind = Literal["centernet_ltrb", "gfl"]  # decoded by models/anchor_free.py, then suppressed as YOLO's
OutputKind = Literal["centernet", "classification", "tensor", "detections", YoloKind, DenseKind]
ADAPTERS, YOLO_KINDS, OUTPUT_KINDS = get_args(Adapter), get_args(YoloKind), get_args(OutputKind)
DENSE_KINDS = get_args(DenseKind)
DETECTION_ROLES = ("boxes", "scores", "labels")  # an onnx detector's named outputs
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
MODELS_DIR = Path(__file__).resolve().parents[1] / "configs" / "models"  # the checkout's built-in models


class RepositoryError(ValueError):
    """A model file or field is wrong; the message names the file, the field and the fix."""


class InputSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["image", "tensor"] = Field("image", description="image: a frame, resized and normalized as "
                                             "below; tensor: an array the caller has prepared")
    scale: float | None = Field(None, gt=0, le=4, description="resize the frame by this factor")
    size: tuple[int, int] | None = Field(None, description="resize the frame to [height, width]")
    letterbox: tuple[int, int] | None = Field(None, description="fit the frame into [height, width], keeping its "
                                              "aspect ratio, centred and padded with grey 114 (Ultralytics' LetterBox)")
    color: Literal["rgb", "bgr"] = Field("rgb", description="channel order the model expects")
    pad_to: int = Field(32, ge=1, le=1024, description="pad height and width up to a multiple of this (with scale or "
                        "the frame's own size; a fixed size or letterbox is never padded)")
    profile_frame: tuple[int, int] = Field((360, 640), description="[height, width] of the frames used to profile")
    mean: tuple[float, float, float] | None = Field(None, description="subtract per channel after scaling to [0, 1]")
    std: tuple[float, float, float] | None = Field(None, description="then divide per channel")

    @model_validator(mode="after")
    def _one_of(self) -> "InputSpec":
        if sum(v is not None for v in (self.scale, self.size, self.letterbox)) > 1:
            raise ValueError("give one of scale, size and letterbox")
        for name in ("size", "letterbox"):
            hw = getattr(self, name)
            if hw is not None and not all(1 <= v <= 8192 for v in hw):
                raise ValueError(f"{name}: [height, width] between 1 and 8192; was {list(hw)}")
        if (self.mean is None) != (self.std is None):
            raise ValueError("give mean and std together")
        return self


class PostprocessSpec(BaseModel):
    """How detections are kept (YOLO outputs); the defaults are Ultralytics' predict defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_score: float = Field(0.25, ge=0, le=1, description="candidates at or under this score are dropped")
    nms_iou: float = Field(0.7, gt=0, le=1, description="overlap above which NMS keeps only the better box")
    max_detections: int = Field(300, ge=1, le=10000, description="most detections kept per image")
    class_agnostic: bool = Field(False, description="NMS across classes instead of within each")


class FragmentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="a child module of the model; its output feeds the fragments after it")
    after: str | None = Field(None, description="the fragment whose output this one takes; the previous one when "
                                                "omitted (two fragments after one: a shared backbone)")


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="the model's name; the folder above the version names it in the repository")
    version: int | None = Field(None, description="informative: the version folder's name is the version")
    description: str = Field("", description="one line for listings")
    adapter: Adapter = Field(description="the loader: how the weights become fragments")
    factory: str | None = Field(None, description="python adapter: module:function")
    arch: str | None = Field(None, description="torchvision adapter: architecture name, e.g. resnet18")
    config: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for the builder")
    weights: str | None = Field(None, description="weights file beside model.yaml, or 'random' (benchmarks only)")
    seed: int = Field(0, description="seed of random weights")
    split: list[str | FragmentSpec] = Field(default_factory=list, description="fragments: named child modules")
    input: InputSpec = Field(default_factory=InputSpec, description="how a frame becomes the model's input")
    output: OutputKind = Field("tensor", description="how the last fragment's output is decoded into detections "
                               "or classes; tensor: returned as it is")
    postprocess: PostprocessSpec = Field(default_factory=PostprocessSpec, description="score threshold and NMS of "
                                         "decoded detections")
    outputs: dict[str, str] = Field(default_factory=dict, description="onnx detections: which named output holds "
                                    "the boxes (x1, y1, x2, y2 in input pixels), scores and labels")
    labels: list[str] = Field(default_factory=list, description="class names, in the order of the model's outputs")
    domain: Literal["real", "synthetic"] | None = Field(None, description="what the model was trained on: an app "
                                                         "running a synthetic-domain model on any other source warns")
    heads: dict[str, list[str]] = Field(default_factory=dict, description="leaf fragment -> the labels it detects")
    batch_sizes: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16], description="sizes to profile and run")
    quality: float | None = Field(None, description="accuracy measure (e.g. held-out mAP) used by adaptive selection")
    cpu_runtime: Literal["torch", "onnxruntime"] = Field(
        "torch", description="tfjs: on a CPU, run the graph's torch module as exported to ONNX by onnxruntime "
                             "(checked against the module at load; `vigil bench runtime` says which is faster)")

    @field_validator("batch_sizes")
    @classmethod
    def _batches(cls, v: list[int]) -> list[int]:
        if not v or v != sorted(set(v)) or v[0] < 1:
            raise ValueError("must be increasing positive sizes, e.g. [1, 2, 4, 8]")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "ModelSpec":
        if self.adapter == "python" and not (self.factory and ":" in self.factory):
            raise ValueError("factory: the python adapter needs factory: 'module:function'")
        if self.adapter == "torchvision" and not self.arch:
            raise ValueError("arch: the torchvision adapter needs arch, e.g. resnet18")
        if self.adapter in ("python", "torchvision", "torchscript", "torch_export", "onnx", "tfjs") and not self.weights:
            raise ValueError(f"weights: the {self.adapter} adapter needs a weights file (or 'random' for benchmarks)")
        if self.weights == "random" and self.adapter not in ("python", "torchvision"):
            raise ValueError("weights: 'random' only makes sense for python and torchvision models")
        if self.output in (*YOLO_KINDS, *DENSE_KINDS) and not self.labels:
            raise ValueError(f"labels: a {self.output} model needs its class names, in the order of its outputs")
        if self.outputs:
            if self.adapter != "onnx" or self.output != "detections":
                raise ValueError("outputs: named outputs are for onnx models with output: detections")
            if set(self.outputs) != set(DETECTION_ROLES):
                raise ValueError(f"outputs: name the outputs {list(DETECTION_ROLES)}; were {sorted(self.outputs)}")
        if self.cpu_runtime != "torch" and self.adapter != "tfjs":
            raise ValueError("cpu_runtime: onnxruntime is for tfjs models (an onnx model runs on it already)")
        names = [f if isinstance(f, str) else f.name for f in self.split]
        if len(set(names)) != len(names):
            raise ValueError(f"split: fragment names repeat: {names}")
        for f in self.split:
            if isinstance(f, FragmentSpec) and f.after is not None and f.after not in names:
                raise ValueError(f"split: {f.name} comes after {f.after!r}, which is not a fragment")
        for head, labels in self.heads.items():
            if head not in names:
                raise ValueError(f"heads: {head!r} is not a fragment in split")
            unknown = [label for label in labels if label not in self.labels]
            if unknown:
                raise ValueError(f"heads: {head} names labels {unknown} that are not in labels")
        return self

    def fragments(self) -> list[FragmentSpec]:
        """The split as a tree: each fragment with its parent (None for the root)."""
        out: list[FragmentSpec] = []
        previous = None
        for f in self.split:
            spec = FragmentSpec(name=f) if isinstance(f, str) else f
            parent = spec.after if spec.after is not None else previous
            out.append(FragmentSpec(name=spec.name, after=parent))
            previous = spec.name
        return out


class VersionPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    latest: int | None = Field(None, ge=1, description="serve the newest N versions")
    specific: list[int] | None = Field(None, description="serve these versions")
    all: bool = Field(False, description="serve every version on disk")

    @model_validator(mode="after")
    def _exactly_one(self) -> "VersionPolicy":
        given = sum(x is not None and x is not False for x in (self.latest, self.specific, self.all or None))
        if given > 1:
            raise ValueError("give one of latest, specific or all")
        return self

    def select(self, available: list[int]) -> list[int]:
        available = sorted(available)
        if self.all:
            return available
        if self.specific is not None:
            return [v for v in available if v in self.specific]
        return available[-(self.latest or 1):]


class ModelLicense(BaseModel):
    """Whose weights these are and on what terms: `vigil models list`, GET /v1/models and
    THIRD_PARTY_NOTICES.md show it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spdx: str = Field(max_length=200, pattern=r"^[A-Za-z0-9.+-]+( (AND|OR|WITH) [A-Za-z0-9.+-]+)*$",
                      description="the licence as an SPDX expression, e.g. MIT or Apache-2.0")
    authors: str = Field(max_length=500, description="who made the weights, and from what")
    url: str | None = Field(None, max_length=500, pattern=r"^https://\S+$",
                            description="where they are published; none for weights trained in this project")


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version_policy: VersionPolicy = Field(default_factory=lambda: VersionPolicy(latest=1),
                                          description="which versions are loaded (TF Serving's); `all` as a "
                                                      "string is short for {all: true}")
    labels: dict[str, int] = Field(default_factory=dict, description="label -> version, e.g. {stable: 1, canary: 2}; "
                                   "apps may name a label as model_version")
    adapters: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")],
                   Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,100}$")]] = Field(
        default_factory=dict, max_length=8,
        description="an LLM's LoRA adapters, name -> a folder beside model_config.yaml in peft's format "
                    "(adapter_config.json, adapter_model.safetensors); each is served unmerged as `<model>:<name>`, "
                    "chosen per request")
    license: ModelLicense | None = Field(None, description="the weights' licence (every bundled model states one)")

    @field_validator("version_policy", mode="before")
    @classmethod
    def _policy(cls, v: Any) -> Any:
        return {"all": True} if v == "all" else v


def _format(path: Path, exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(file)"
        msg = err["msg"].removeprefix("Value error, ")
        given = err.get("input")
        shown = "" if err["type"] in ("missing", "extra_forbidden") or isinstance(given, dict) else f"; was {given!r}"
        if err["type"] == "extra_forbidden":
            msg = "unknown field; check the spelling"
        lines.append(f"{path}: {field}: {msg}{shown}")
    return "\n".join(lines)


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise RepositoryError(f"{path}: not valid YAML: {exc}") from None
    except OSError as exc:
        raise RepositoryError(f"{path}: cannot read: {exc.strerror}") from None


class ModelRepository:
    """Reads the repository; loading and serving live in the engine."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def model_names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and any(self._version_dirs(p.name)))

    def _version_dirs(self, name: str):
        folder = self.root / name
        if not folder.is_dir():
            return
        for p in folder.iterdir():
            if p.is_dir() and p.name.isdigit() and (p / "model.yaml").exists():
                yield p

    def versions(self, name: str) -> list[int]:
        return sorted(int(p.name) for p in self._version_dirs(name))

    def folder(self, name: str, version: int) -> Path:
        return self.root / name / str(version)

    def config(self, name: str) -> ModelConfig:
        path = self.root / name / "model_config.yaml"
        if not path.exists():
            return ModelConfig()
        data = _read_yaml(path) or {}
        try:
            cfg = ModelConfig.model_validate(data)
        except ValidationError as exc:
            raise RepositoryError(_format(path, exc)) from None
        available = self.versions(name)
        for label, version in cfg.labels.items():
            if version not in available:
                raise RepositoryError(f"{path}: labels.{label}: version {version} is not in the repository "
                                      f"(have {available})")
        return cfg

    def spec(self, name: str, version: int) -> ModelSpec:
        path = self.folder(name, version) / "model.yaml"
        if not path.exists():
            raise RepositoryError(f"{path}: no such model version ({name} version {version})")
        return read_spec(path, name)


def read_spec(path: Path, name: str) -> ModelSpec:
    """A model.yaml validated, for the model `name` (its folder's name)."""
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise RepositoryError(f"{path}: a model.yaml is a mapping of fields (name, adapter, ...)")
    try:
        spec = ModelSpec.model_validate(data)
    except ValidationError as exc:
        raise RepositoryError(_format(path, exc)) from None
    if spec.name != name:
        raise RepositoryError(f"{path}: name: {spec.name!r} does not match its directory {name!r}")
    if spec.weights and spec.weights != "random" and not (path.parent / spec.weights).exists():
        raise RepositoryError(f"{path}: weights: file {spec.weights!r} is missing beside model.yaml")
    return spec
