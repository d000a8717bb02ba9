"""`vigil eval detector|tracking`: detectors on held-out renders or hand-labelled footage,
and apps' tracking on the range's clips."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

from apps.spec import SpecError, load_spec
from runtime.offline import RunError
from vigil.provenance import Provenance
from vigil.report import print_json
from vigil.settings import MODELS_DIR


def add_parser(sub) -> None:
    """`vigil eval detector|tracking|llm`."""
    ev = sub.add_parser("eval", help="evaluate a detector, apps' tracking or an LLM's answers and captions",
                        description="detector: mAP@0.5 and recall per class on clips rendered from seeds the "
                                    "training never used, and latency per frame through the engine; with "
                                    "--footage, person AP50 and head-count error on real frames labelled by hand. "
                                    "tracking: the "
                                    "share of the truth's stays in the apps' zones that a track followed on the "
                                    "right object with its dwell within 0.5 s, with the apps' detectors and with "
                                    "the truth's own boxes side by side, on the bundled clips or held-out renders, "
                                    "and why each other stay was not (split, dwell_off, slid or missed). llm: the "
                                    "share of answers about the bundled clips that the model wrote (its figures "
                                    "checked against the exact aggregate) and of held-out windows whose captions "
                                    "name the right counts, with the LLM's adapter and without it.")
    ev.add_argument("target", choices=["detector", "tracking", "llm"])
    ev.add_argument("--llm", default="smollm2-135m-instruct", metavar="NAME",
                    help="llm: the LLM of the model repository (default: smollm2-135m-instruct)")
    ev.add_argument("--version", type=int, help="detector: one version (default: every version in the repository)")
    ev.add_argument("--app", action="append", metavar="APP",
                    help="tracking: a built-in app name or spec file, repeatable (default: people-counter-scenedet and "
                         "vehicle-counter-scenedet)")
    ev.add_argument("--footage", nargs="?", const="vtest", metavar="NAME",
                    help="detector: real footage labelled by hand instead (default vtest: OpenCV's vtest.avi, from "
                         "Debian's opencv-doc): person AP50 and head-count error for coco, HOG and SceneDet, and "
                         "their people counters' tracks")
    ev.add_argument("--frames", type=int, metavar="N", help="--footage: the first N labelled frames (default: all)")
    ev.add_argument("--model", action="append", metavar="NAME",
                    help="--footage: only this detector, repeatable (coco, hog-people, scenedet; default: all)")
    ev.add_argument("--json", type=Path, metavar="FILE", help="also write the result here")
    ev.add_argument("--clips", type=int, help="held-out clips to render (detector: default 6; tracking: default "
                                              "none, the bundled clips)")
    ev.add_argument("--models", type=Path, default=MODELS_DIR, metavar="DIR", help="model repository")
    ev.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    ev.set_defaults(func=_eval)


def _eval(args: argparse.Namespace) -> int:
    from engine.device import resolve_device

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    provenance = Provenance()
    try:
        if args.target == "llm":
            result = _eval_llm(args, resolve_device(args.device), log)
        elif args.target == "tracking" and not args.footage:
            result = _eval_tracking(args, resolve_device(args.device), log)
        elif args.footage:
            result = _eval_footage(args, resolve_device(args.device), log)
        else:
            from vigil.evaluate import eval_detector

            if args.app:
                raise ValueError("--app is for `vigil eval tracking`")
            if args.frames is not None or args.model:
                raise ValueError("--frames and --model are for `vigil eval detector --footage`")
            versions = [args.version] if args.version else None
            result = eval_detector(args.models, resolve_device(args.device), versions,
                                   clips=6 if args.clips is None else args.clips, log=log)
    except (ValueError, SpecError, RunError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    kind = "eval-footage" if args.footage else f"eval-{args.target}"
    print_json({"kind": kind, **result, "run": provenance.finish(resolve_device(args.device))}, args.json)
    return 0


def _eval_llm(args: argparse.Namespace, device: str, log: Callable[[str], None]) -> dict:
    from vigil.llm_eval import eval_llm
    from vigil.tracking_eval import bundled_clips

    if args.footage or args.app or args.clips is not None or args.version is not None or args.frames is not None \
            or args.model:
        raise ValueError("`vigil eval llm` takes --llm, --models, --device and --json")
    return eval_llm(args.models, args.llm, device, bundled_clips(), log)


def _eval_footage(args: argparse.Namespace, device: str, log: Callable[[str], None]) -> dict:
    from vigil.footage_eval import eval_footage, format_footage_table

    if args.target != "detector":
        raise ValueError("--footage is for `vigil eval detector`")
    if args.app or args.clips is not None or args.version is not None:
        raise ValueError("--footage takes --model and --frames, not --app, --clips or --version")
    result = eval_footage(args.footage, args.models, device, args.model, args.frames, log)
    log(format_footage_table(result))
    return result


def _eval_tracking(args: argparse.Namespace, device: str, log: Callable[[str], None]) -> dict:
    import tempfile

    from vigil.tracking_eval import TRACKED_APPS, bundled_clips, eval_tracking, render_clips

    if args.version is not None:
        raise ValueError("--version is for `vigil eval detector`; pin an app's model with its model_version")
    if args.frames is not None or args.model:
        raise ValueError("--frames and --model are for `vigil eval detector --footage`")
    specs = [load_spec(ref) for ref in args.app or TRACKED_APPS]
    if args.clips is None:
        return eval_tracking(specs, bundled_clips(), args.models, device, log)
    if not 1 <= args.clips <= 100:
        raise ValueError(f"--clips must be in 1..100; was {args.clips}")
    with tempfile.TemporaryDirectory(prefix="vigil-clips-") as folder:
        return eval_tracking(specs, render_clips(args.clips, Path(folder), log), args.models, device, log)
