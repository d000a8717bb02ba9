"""Writing small model repositories for tests."""

from pathlib import Path

import torch
import yaml

from tiny_models import Tiny

TINY_INPUT = {"size": [32, 32], "pad_to": 1, "profile_frame": [32, 32]}


def tiny_state(backbone_seed: int = 0, head_seed: int = 0, classes: int = 2) -> dict:
    torch.manual_seed(backbone_seed)
    model = Tiny({"classes": classes})
    backbone = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("backbone")}
    torch.manual_seed(1000 + head_seed)
    other = Tiny({"classes": classes})
    state = other.state_dict()
    state.update(backbone)
    return state


def write_model(root: Path, name: str, version: int, spec: dict | None = None, state: dict | None = None,
                config: dict | None = None) -> Path:
    folder = root / name / str(version)
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"name": name, "adapter": "python", "factory": "tiny_models:build", "weights": "model.pt",
           "split": ["backbone", {"name": "a", "after": "backbone"}, {"name": "b", "after": "backbone"}],
           "input": TINY_INPUT, "output": "tensor", "batch_sizes": [1, 2, 4, 8]}
    doc.update(spec or {})
    (folder / "model.yaml").write_text(yaml.safe_dump(doc))
    if doc.get("weights") == "model.pt":
        torch.save(state if state is not None else tiny_state(), folder / "model.pt")
    if config is not None:
        (root / name / "model_config.yaml").write_text(yaml.safe_dump(config))
    return folder
