"""`vigil run`: apps over a video offline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from apps.spec import SpecError, builtin_names, load_spec
from engine.lanes import AUTO_MAX_LANES, MAX_LANES
from runtime.offline import RANGE_APPS, REAL_APPS, default_apps
from runtime.run_inputs import check_inputs
from vigil.settings import MODELS_DIR


def add_parser(sub) -> None:
    """`vigil run SOURCE [--app SPEC ...]`."""
    run = sub.add_parser("run", help="run apps over a video offline",
                         description="Run camera apps over a video file (or synthetic:// clip) and write "
                                     "summary.json, events.jsonl and annotated.mp4.")
    run.add_argument("source", help="video file path, file:// URL or synthetic://street?seed=N")
    run.add_argument("--app", action="append", metavar="SPEC_OR_NAME",
                     help=f"app spec file or built-in name (repeatable; default: {', '.join(REAL_APPS)}, or on "
                          f"the synthetic range's clips {', '.join(RANGE_APPS)}; built-ins: {', '.join(builtin_names())})")
    run.add_argument("--out", type=Path, default=Path("vigil-out"), help="output directory (default: vigil-out)")
    run.add_argument("--no-video", action="store_true", help="skip writing annotated.mp4 (faster)")
    run.add_argument("--max-frames", type=int, metavar="N", help="stop after N frames")
    run.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    run.add_argument("--block-frames", type=int, default=8, metavar="N", help="frames per block (default: 8)")
    run.add_argument("--models", type=Path, default=MODELS_DIR, metavar="DIR",
                     help="model repository (default: configs/models)")
    run.add_argument("--policy", default="nexus", choices=["nexus", "tfs", "clipper", "nobatch"],
                     help="engine scheduling policy (default: nexus)")
    run.add_argument("--lanes", type=int, metavar="N",
                     help=f"batches the device runs at once (1..{MAX_LANES}; default: one on a GPU, one per core "
                          f"up to {AUTO_MAX_LANES} on a CPU)")
    run.add_argument("--realtime", action="store_true",
                     help="pace the file like a live camera and drop frames that miss their deadline (default: "
                          "analyse every sampled frame, so results never depend on the machine's speed)")
    run.add_argument("--detections", action="store_true",
                     help="also write each analysed frame's detections (and a classifier's best classes) to "
                          "detections.jsonl")
    run.add_argument("--snapshots", action="store_true",
                     help="also write each event's frame with the object's box, and a crop of it, under "
                          "OUT/snapshots (events.jsonl names them)")
    run.add_argument("--clips", action="store_true",
                     help="also cut each event's stretch of the file, remuxed (not re-encoded), under OUT/clips "
                          "(events.jsonl names them; a video file only)")
    run.add_argument("--clip-pre-s", type=float, default=5.0, metavar="S",
                     help="a clip starts this long before its event (0..300; default: 5)")
    run.add_argument("--clip-post-s", type=float, default=5.0, metavar="S",
                     help="and ends this long after it (0..300; default: 5)")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bar or table")
    run.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    refs = args.app or list(default_apps(args.source))
    try:
        specs = [load_spec(ref) for ref in refs]
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        check_inputs(args.source, specs, args.out, args.models, clips=args.clips)
    except ValueError as exc:  # as the run itself would say it, without loading a model first
        print(f"error: {exc}", file=sys.stderr)
        return 1
    # only now the heavy part: torch, the device, and the apps' models
    from runtime.offline import RunError, RunOptions, run_offline
    from vigil.report import format_table

    try:
        options = RunOptions(out_dir=args.out, video=not args.no_video, max_frames=args.max_frames,
                             device=args.device, block_frames=args.block_frames,
                             progress=sys.stderr.isatty() and not args.quiet, repository=args.models,
                             policy=args.policy, lanes=args.lanes, realtime=args.realtime, detections=args.detections,
                             snapshots=args.snapshots, clips=args.clips, clip_pre_s=args.clip_pre_s,
                             clip_post_s=args.clip_post_s)
        summary = run_offline(args.source, specs, options)
    except (RunError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(format_table(summary))
        outputs = summary["outputs"]
        written = ", ".join(str(outputs[k]) for k in ("summary", "events", "video", "detections", "snapshots", "clips")
                            if outputs[k])
        print(f"wrote {written}")
    if summary["error"]:
        print(f"error: {summary['error']}", file=sys.stderr)
        return 1
    return 0
