"""Where the remote commands find the server, and with which key."""

from __future__ import annotations

import argparse
import os

from vigil.settings import env_api_keys

API_KEY_HELP = "API key (default: $VIGIL_API_KEY, else the first of the server's $VIGIL_API_KEYS)"
URL_HELP = "server (default: $VIGIL_URL, else http://127.0.0.1:8080)"


def server_url(args: argparse.Namespace) -> str:
    return args.server or os.environ.get("VIGIL_URL") or "http://127.0.0.1:8080"


def api_key(args: argparse.Namespace) -> str | None:
    keys = env_api_keys() or []
    return args.api_key or os.environ.get("VIGIL_API_KEY") or (keys[0] if keys else None)
