"""The `vigil` command line: one module per command (run, eval, serve, ask, and the
REST API's groups in remote), each adding its parser and the function it calls."""

from __future__ import annotations

import argparse
import os
import sys

from cli import ask, evaluate, remote, run, serve
from cli.connection import add_global_flags


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vigil", description="Vigil: serving platform for video analytics.")
    parser.add_argument("--version", action="version", version=f"vigil {_version()}")
    add_global_flags(parser)  # the remote commands' server and key, before the command or after it
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run.add_parser(sub)
    evaluate.add_parser(sub)
    serve.add_parser(sub)
    remote.add_parsers(sub)
    _add_plugins(sub)
    ask.add_parser(sub)
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
    except BrokenPipeError:  # the reader went away (`vigil apps list | head`): nothing is left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush does not raise again
        return 141


if __name__ == "__main__":
    sys.exit(main())
