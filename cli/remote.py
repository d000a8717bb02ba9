"""`vigil streams|apps|models|events ...`: the REST API from the command line, one request
per action (`vigil models check` and `fetch` run here, with no server). Lists and an
app's metrics print for a person (cli/tables.py), with `--json` for scripts; the other
actions print the API's JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from apps.spec import LIVE_FIELDS, SpecError, builtin_names, load_spec
from cli import model_files
from cli.connection import connection, connection_flags
from cli.tables import VIEWS
from streams.urls import scheme_of

JSON_HELP = "print the API's whole answer as JSON (for scripts)"


def add_parsers(sub) -> None:
    common = connection_flags()
    s = _group(sub, common, "streams", "list, add and delete streams")
    _listing(s.add_parser("list", help="all streams: a table (--json: every field)"))
    s.add_parser("get", help="one stream").add_argument("name")
    add = s.add_parser("add", help="add a stream")
    add.add_argument("name")
    add.add_argument("url", help="rtsp://, http(s)://, /dev/videoN, synthetic://... or a file")
    add.add_argument("--options", help='JSON, e.g. \'{"transport": "udp", "loop": true}\'')
    s.add_parser("delete", help="delete a stream").add_argument("name")

    a = _group(sub, common, "apps", "list, add, change and delete camera apps")
    _listing(a.add_parser("list", help="all apps: a table (--json: every field)"))
    a.add_parser("get", help="one app").add_argument("name")
    add = a.add_parser("add", help="add an app from a spec file or a built-in name", epilog=builtin_apps_text(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add.add_argument("spec", help="YAML/JSON spec file or built-in app name (below)")
    add.add_argument("--source", help="stream the app watches (overrides the spec's source)")
    add.add_argument("--name", help="app name (overrides the spec's name)")
    patch = a.add_parser("patch", help=f"change live fields ({', '.join(LIVE_FIELDS)})")
    patch.add_argument("name")
    patch.add_argument("changes", help='JSON, e.g. \'{"slo_ms": 500}\'')
    a.add_parser("delete", help="delete an app").add_argument("name")
    _listing(a.add_parser("metrics", help="an app's SLO metrics and counts, in words (--json: the API's)"))\
        .add_argument("name")

    m = _group(sub, common, "models", "list, load, unload, reload and label models")
    _listing(m.add_parser("list", help="all models: versions, labels, licence and the last failed load's reason "
                                       "(--json: every field, profiles included)"))
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
    ad = m.add_parser("add", help="upload a version folder (or a .tar/.tar.gz/.zip of one), or an LLM's .gguf "
                      "file, as the model's next version; the server checks that it builds and runs")
    ad.add_argument("name")
    ad.add_argument("path", type=Path)
    model_files.add_parsers(m.parent)

    e = _group(sub, common, "events", "query stored events")
    ls = _listing(e.add_parser("list", help="stored events, oldest first: a table (--json: every field)"))
    ls.add_argument("--app")
    ls.add_argument("--stream")
    ls.add_argument("--type")
    ls.add_argument("--limit", type=int, default=100)
    ls.add_argument("--after-id", type=int, default=0, metavar="ID", help="events after this id (the next page)")


def builtin_apps_text() -> str:
    """`vigil apps add --help`'s list of the built-in apps, each with its detector and classes."""
    rows = []
    for name in builtin_names():
        try:
            spec = load_spec(name)
            rows.append((name, f"{spec.detector}: {', '.join(spec.classes) if spec.classes else 'all its classes'}"))
        except SpecError:  # a broken built-in is reported when it is used, not here
            rows.append((name, "?"))
    width = max((len(n) for n, _ in rows), default=0)
    return ("built-in apps (detector: classes):\n" + "\n".join(f"  {n.ljust(width)}  {what}" for n, what in rows)
            + "\n\nor a spec file, e.g. configs/apps/entrance.yaml (docs: App spec reference)")


class _WithCommon:
    """A group's actions, each taking --url and --api-key."""

    def __init__(self, parent, common: argparse.ArgumentParser) -> None:
        self.parent = parent
        self.common = common

    def add_parser(self, *args, **kwargs):
        return self.parent.add_parser(*args, parents=[self.common], **kwargs)


def _group(sub, common, name: str, help: str) -> _WithCommon:
    p = sub.add_parser(name, help=help, description=f"{help} (talks to a running `vigil serve`).", parents=[common])
    p.set_defaults(func=_remote)
    return _WithCommon(p.add_subparsers(dest="action", required=True, metavar="ACTION"), common)


def _listing(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    return parser


def _remote(args: argparse.Namespace) -> int:
    """`vigil streams|apps|models|events ...`: the REST API from the command line."""
    from vigil.client import ApiError, RestClient
    from vigil.settings import SettingsError

    try:
        server = connection(args)
        out = REMOTE[(args.command, args.action)](RestClient(server.url, server.api_key), args)
    except (ApiError, SettingsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    view = VIEWS.get((args.command, args.action))
    if view is not None and not args.json:
        print(view(out))
    elif out is not None:
        print(json.dumps(out, indent=2))
    return 0


def _archive(path: Path) -> bytes:
    """A version folder as a .tar.gz in memory, an LLM's GGUF file as a .tar of it, or an
    archive file's bytes."""
    import io
    import tarfile

    if path.suffix == ".gguf" and path.is_file():
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:  # quantized weights: gzip would gain little
            tar.add(path, arcname=path.name)
        return buf.getvalue()
    if path.is_dir():
        if not (path / "model.yaml").is_file() and len(list(path.glob("*.gguf"))) != 1:
            raise ValueError(f"{path}: a version folder holds model.yaml, or an LLM's one .gguf file")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for f in sorted(p for p in path.rglob("*") if p.is_file() and "profiles" not in p.relative_to(path).parts):
                tar.add(f, arcname=str(f.relative_to(path)))
        return buf.getvalue()
    if not path.is_file():
        raise ValueError(f"{path}: no such folder or archive")
    return path.read_bytes()


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
                                                                         "type": a.type, "limit": a.limit,
                                                                         "after_id": a.after_id}),
}
