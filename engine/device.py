"""Choosing the compute device: `auto` takes CUDA when present, else the CPU."""

from __future__ import annotations

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def resolve_device(name: str) -> str:
    if name not in DEVICE_CHOICES and not name.startswith("cuda:"):
        raise ValueError(f"device must be one of {DEVICE_CHOICES} or cuda:N; was {name!r}")
    import torch  # imported here: resolving a device is the first thing that needs it

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available on this machine; use --device cpu")
    return name
