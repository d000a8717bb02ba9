"""`vigil serve`: the server, its config file and flags."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub) -> None:
    """`vigil serve [--config FILE] ...`."""
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
