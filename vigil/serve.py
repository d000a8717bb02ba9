"""`vigil serve`: the engine, streams, apps, storage, REST (uvicorn) and gRPC in one
process. Stored streams and apps are brought back in the background while the API is
already up (`/readyz` is 503 until they are, and while models load). SIGINT/SIGTERM
shut down gracefully: stop accepting, finish blocks in flight, flush events, close.

Start-up and shutdown run in the app's lifespan: uvicorn re-raises the signal that
stopped it once `run()` returns, so nothing after `run()` is sure to execute.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import threading
from contextlib import asynccontextmanager

import uvicorn
from starlette.concurrency import run_in_threadpool

from vigil.api import build_app
from vigil.grpc_api import start_grpc
from vigil.service import Vigil
from vigil.settings import Settings

log = logging.getLogger("vigil.serve")


def _return_frames_to_the_os() -> None:
    """glibc raises its mmap threshold after large blocks are freed, so decoded frames
    (about 0.7 MB each) end up in per-thread heaps that fragment and keep growing; a
    fixed threshold maps every large block on its own and unmaps it when freed."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 256 * 1024)  # M_MMAP_THRESHOLD
    except OSError:  # not glibc
        pass


def serve(settings: Settings) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _return_frames_to_the_os()
    service = Vigil(settings)

    @asynccontextmanager
    async def lifespan(_app):
        grpc_server = None
        if settings.grpc_port:
            grpc_server, port = start_grpc(service, settings.host, settings.grpc_port)
            log.info("gRPC on %s:%d", settings.host, port)
        threading.Thread(target=service.start, name="restore", daemon=True).start()
        # Long-lived objects made at start-up need not be scanned by every collection
        # (the engine benchmark showed collector pauses in the tail latency).
        gc.freeze()
        log.info("REST on http://%s:%d (dashboard /dashboard, docs /docs); api keys: %s", settings.host,
                 settings.port, "on" if settings.api_keys else "off")
        try:
            yield
        finally:
            log.info("shutting down: draining streams and the engine")
            if grpc_server is not None:
                grpc_server.stop(grace=5).wait()
            await run_in_threadpool(service.close)
            log.info("stopped; events and metrics flushed")

    app = build_app(service, lifespan=lifespan)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="info", access_log=False,
                            timeout_graceful_shutdown=10)
    uvicorn.Server(config).run()
