"""The `vigil` command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from apps.spec import SpecError, builtin_names, load_spec
from vigil.offline import DEFAULT_REPOSITORY

DEFAULT_APPS = ("people-counter", "vehicle-counter", "motion")


def _run(args: argparse.Namespace) -> int:
    from vigil.offline import RunError, RunOptions, run_offline
    from vigil.report import format_table

    refs = args.app or list(DEFAULT_APPS)
    try:
        specs = [load_spec(ref) for ref in refs]
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        options = RunOptions(out_dir=args.out, video=not args.no_video, max_frames=args.max_frames,
                             device=args.device, block_frames=args.block_frames,
                             progress=sys.stderr.isatty() and not args.quiet, repository=args.models,
                             policy=args.policy)
        summary = run_offline(args.source, specs, options)
    except (RunError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(format_table(summary))
        outputs = summary["outputs"]
        written = ", ".join(str(p) for p in (outputs["summary"], outputs["events"], outputs["video"]) if p)
        print(f"wrote {written}")
    if summary["error"]:
        print(f"error: {summary['error']}", file=sys.stderr)
        return 1
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.target == "ingest":
        from bench.ingest import IngestBenchOptions, run_ingest_bench

        try:
            result = run_ingest_bench(IngestBenchOptions(source=args.source, detector=args.detector,
                                                         repeats=args.repeats, max_frames=args.max_frames,
                                                         device=args.device))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    elif args.target == "engine":
        from bench.engine import EngineBenchOptions, format_report, run_engine_bench
        from engine.device import resolve_device

        try:
            scenarios = tuple(args.scenario) if args.scenario else EngineBenchOptions.scenarios
            options = EngineBenchOptions(quick=args.quick, device=resolve_device(args.device), scenarios=scenarios,
                                         ray=not args.no_ray)
            result = run_engine_bench(options, log=lambda m: print(m, file=sys.stderr, flush=True))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(format_report(result), file=sys.stderr)
    else:  # argparse restricts the choices
        raise AssertionError(args.target)
    text = json.dumps(result, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    return 0


def _eval(args: argparse.Namespace) -> int:
    from engine.device import resolve_device
    from vigil.evaluate import eval_detector

    try:
        result = eval_detector(args.models, resolve_device(args.device), [args.version] if args.version else None,
                               clips=args.clips, log=lambda m: print(m, file=sys.stderr, flush=True))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(result, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vigil", description="Vigil: serving platform for video analytics.")
    parser.add_argument("--version", action="version", version=f"vigil {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run apps over a video offline",
                         description="Run camera apps over a video file (or synthetic:// clip) and write "
                                     "summary.json, events.jsonl and annotated.mp4.")
    run.add_argument("source", help="video file path, file:// URL or synthetic://street?seed=N")
    run.add_argument("--app", action="append", metavar="SPEC_OR_NAME",
                     help=f"app spec file or built-in name (repeatable; default: {', '.join(DEFAULT_APPS)}; "
                          f"built-ins: {', '.join(builtin_names())})")
    run.add_argument("--out", type=Path, default=Path("vigil-out"), help="output directory (default: vigil-out)")
    run.add_argument("--no-video", action="store_true", help="skip writing annotated.mp4 (faster)")
    run.add_argument("--max-frames", type=int, metavar="N", help="stop after N frames")
    run.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    run.add_argument("--block-frames", type=int, default=8, metavar="N", help="frames per block (default: 8)")
    run.add_argument("--models", type=Path, default=DEFAULT_REPOSITORY, metavar="DIR",
                     help="model repository (default: configs/models)")
    run.add_argument("--policy", default="nexus", choices=["nexus", "tfs", "clipper", "nobatch"],
                     help="engine scheduling policy (default: nexus)")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bar or table")
    run.set_defaults(func=_run)

    bench = sub.add_parser("bench", help="side-by-side benchmarks, reported as ratios",
                           description="Benchmarks that time Vigil against baselines in one run.")
    bench.add_argument("target", choices=["ingest", "engine"],
                       help="ingest: vigil run vs a plain decode+detect loop; engine: scheduling policies and peers")
    bench.add_argument("--json", type=Path, metavar="FILE", help="also write the result here")
    bench.add_argument("--source", default="sample_videos/street_a.mp4", help="clip to use")
    bench.add_argument("--detector", default="scenedet", help="detector for both sides")
    bench.add_argument("--repeats", type=int, default=3, help="alternating repeats; medians are reported")
    bench.add_argument("--max-frames", type=int, default=None, metavar="N", help="frames per repeat")
    bench.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    bench.add_argument("--quick", action="store_true", help="engine: shorter trials (under 5 minutes on 2 cores)")
    bench.add_argument("--scenario", action="append", metavar="NAME",
                       help="engine: run only these (single, shared_backbone, overload, swap)")
    bench.add_argument("--no-ray", action="store_true", help="engine: skip the Ray Serve peer")
    bench.set_defaults(func=_bench)
    ev = sub.add_parser("eval", help="evaluate a detector on held-out synthetic clips",
                        description="mAP@0.5 and recall per class on clips rendered from seeds the training "
                                    "never used, and latency per frame through the engine.")
    ev.add_argument("target", choices=["detector"])
    ev.add_argument("--version", type=int, help="one version (default: every version in the repository)")
    ev.add_argument("--json", type=Path, metavar="FILE", help="also write the result here")
    ev.add_argument("--clips", type=int, default=6, help="held-out clips to render (default: 6)")
    ev.add_argument("--models", type=Path, default=DEFAULT_REPOSITORY, metavar="DIR", help="model repository")
    ev.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    ev.set_defaults(func=_eval)
    return parser


def _version() -> str:
    from vigil import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
