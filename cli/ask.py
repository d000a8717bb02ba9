"""`vigil ask`: a question to a running server, or offline about a clip."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cli.connection import connection, connection_flags
from vigil.settings import ANSWERER, MODELS_DIR


def add_parser(sub) -> None:
    """`vigil ask QUESTION [--source CLIP | --url URL]`."""
    ask = sub.add_parser("ask", help="ask what the cameras saw", parents=[connection_flags()],
                         description="Answer a question about a stream (from a running server) or a clip "
                                     "(offline: the clip is run through the default apps first, once).")
    ask.add_argument("question", help='e.g. "how many cars crossed midblock between 0:05 and 0:20?"')
    ask.add_argument("--source", help="a clip to ask about offline (instead of a server)")
    ask.add_argument("--out", type=Path, default=Path("vigil-out"), help="where offline runs are kept")
    ask.add_argument("--stream", help="server: only this stream")
    ask.add_argument("--llm", default=ANSWERER, metavar="NAME",
                     help=f"offline: the LLM of the model repository that answers (default: {ANSWERER})")
    ask.add_argument("--models", type=Path, default=MODELS_DIR, metavar="DIR", help="model repository")
    ask.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    ask.add_argument("--json", action="store_true", help="print the whole answer object")
    ask.set_defaults(func=_ask)


def _ask(args: argparse.Namespace) -> int:
    """`vigil ask`: a question to a running server, or offline about a clip."""
    if args.source is None:
        from vigil.client import ApiError, RestClient
        from vigil.settings import SettingsError

        try:
            server = connection(args)
            client = RestClient(server.url, server.api_key)
            out = client.call("POST", "/v1/ask", {"question": args.question, "stream": args.stream})
        except (ApiError, SettingsError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    else:
        from vigil.ask import AskError, ask_offline

        try:
            out = ask_offline(args.question, args.source, args.out, models=args.models, device=args.device,
                              log=lambda m: print(m, file=sys.stderr, flush=True), llm=args.llm)
        except AskError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(out["answer"])
        for c in out["citations"]:
            ids = c.get("event_ids") or []
            print(f"  [{c.get('stream')} {_span(c['t_start_ms'], c['t_end_ms'])}"
                  f"{', events ' + ','.join(map(str, ids[:10])) if ids else ''}{' ...' if len(ids) > 10 else ''}]")
    return 0


def _span(start_ms: float, end_ms: float | None) -> str:
    """A citation's window as the answer states times: m:ss into a clip, or the UTC clock
    time of a camera's wall-clock stamps."""
    from llm.facts import clock

    end_ms = start_ms if end_ms is None else end_ms
    return f"{clock(start_ms)}-{clock(end_ms)}" + (" UTC" if start_ms >= 86_400_000 else "")
