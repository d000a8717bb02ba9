"""Where the remote commands find the server, and with which key.

`--url` and `--api-key` are global: `vigil --url URL streams list` and `vigil streams
list --url URL` both work. The root parser stores them; each remote command takes them
too, with no default of its own, so a flag given after the command wins and one given
before it is not overwritten by the command's parser."""

from __future__ import annotations

import argparse

from vigil.settings import DEFAULT_URL, ClientSettings, client_settings

API_KEY_HELP = "API key (default: $VIGIL_API_KEY, else the first of the server's $VIGIL_API_KEYS)"
URL_HELP = f"server, before or after the command (default: $VIGIL_URL, else {DEFAULT_URL})"


def add_global_flags(parser: argparse.ArgumentParser) -> None:
    """The root parser's --url and --api-key (defaults None: the environment decides)."""
    parser.add_argument("--url", dest="server", metavar="URL", help=URL_HELP)
    parser.add_argument("--api-key", metavar="KEY", help=API_KEY_HELP)


def connection_flags() -> argparse.ArgumentParser:
    """A parent parser of --url and --api-key for a command that talks to the server;
    SUPPRESS keeps a value given before the command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", dest="server", metavar="URL", default=argparse.SUPPRESS, help=URL_HELP)
    common.add_argument("--api-key", metavar="KEY", default=argparse.SUPPRESS, help=API_KEY_HELP)
    return common


def connection(args: argparse.Namespace) -> ClientSettings:
    """The server and key a command talks with (SettingsError for a URL that is not one)."""
    return client_settings(getattr(args, "server", None), getattr(args, "api_key", None))
