"""What an offline run needs before any model loads, each mistake named: the source, the
apps' detectors and the output folder. `vigil run` checks them before it imports torch,
and `run_offline` before it opens the source, with one set of messages."""

from __future__ import annotations

import os
from pathlib import Path

from apps.detectors import HOST_DETECTORS
from apps.spec import AppSpec
from models.repository import ModelRepository
from streams.urls import ALL_SCHEMES, file_path, scheme_of


def check_inputs(source: str, specs: list[AppSpec], out: Path, models: Path, clips: bool = False) -> None:
    """What a run needs before any model loads, each mistake named (ValueError): the
    source is a file that exists or a synthetic:// clip, each app's detector is a host
    detector or a model of the repository, and the output folder can be written."""
    scheme = scheme_of(source)
    if scheme == "file":
        path = file_path(source)
        if not path.exists():
            raise ValueError(f"{source}: no such file")
        if not path.is_file():
            raise ValueError(f"{source}: not a file (a video file, or synthetic://street?seed=N)")
        if not os.access(path, os.R_OK):
            raise ValueError(f"{source}: cannot read it (permission denied)")
    elif clips:
        raise ValueError(f"--clips cuts events' clips from a video file; {source} is not one")
    elif scheme not in ALL_SCHEMES:
        raise ValueError(f"{source}: unknown URL scheme {scheme!r}; vigil run takes a video file or synthetic://")
    elif scheme != "synthetic":
        raise ValueError(f"{source}: a live source ({scheme}) runs under `vigil serve` (vigil streams add); "
                         "vigil run takes a video file or synthetic://")
    known = ModelRepository(models).model_names()
    for spec in specs:
        if spec.detector not in HOST_DETECTORS and spec.detector not in known:
            raise ValueError(f"app {spec.name!r}: detector {spec.detector!r} is neither a host detector "
                             f"({', '.join(HOST_DETECTORS)}) nor a model in {models} ({', '.join(known) or 'none'})")
    _check_writable(out)


def _check_writable(out: Path) -> None:
    """`out` is a folder this user can write in (made now when missing)."""
    import tempfile

    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise ValueError(f"--out {out}: cannot write there ({exc.strerror}); choose another folder") from None
