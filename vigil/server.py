"""`vigil serve`: the engine, streams, apps, storage, REST (uvicorn) and gRPC in one
process. Stored streams and apps are brought back in the background while the API is
already up (`/readyz` is 503 until they are, and while models load). SIGINT/SIGTERM
shut down gracefully: stop accepting, finish blocks in flight, flush events, close.

Both ports are bound before anything starts, each exclusively: a port in use is one
clear error and exit status 1, never a second server sharing it. Start-up of the rest
and shutdown run in the app's lifespan: uvicorn re-raises the signal that stopped it
once `run()` returns, so nothing after `run()` is sure to execute.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import resource
import signal
import socket
import threading
from contextlib import asynccontextmanager
from typing import Callable

import uvicorn
from starlette.concurrency import run_in_threadpool

from vigil import allocator
from vigil.api import build_app
from vigil.grpc_api import start_grpc
from vigil.http_guard import RepeatFilter, guarded_protocol
from vigil.service import Vigil
from vigil.services.errors import ServiceError
from vigil.settings import Settings

log = logging.getLogger("vigil.server")
# connections accepted in one turn of the event loop (and the listen queue): those past
# the cap are closed a turn or two later, so a burst needs a few times this many spare
BACKLOG = 64
# uvicorn's limit_concurrency answers 503 to a request on a connection already open
# while the process's connections, counted with those a burst just brought in that
# the guard is about to close, reach it: it sits a few bursts over the guard's cap, so
# that a monitor's /healthz is still answered during a flood of connections
SPARE = 4 * BACKLOG


def _return_frames_to_the_os() -> None:
    """glibc raises its mmap threshold after large blocks are freed, so decoded frames
    (about 0.7 MB each) end up in per-thread heaps that fragment and keep growing; a
    fixed threshold maps every large block on its own and unmaps it when freed."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 256 * 1024)  # M_MMAP_THRESHOLD
    except OSError:  # not glibc
        pass


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(RepeatFilter())


def connection_cap(wanted: int) -> int:
    """limits.max_connections, or half the process's descriptors if that is fewer (the
    soft limit raised to the hard one first): the other half is for streams, the
    database, gRPC, model files and the bursts of connections that are closed a turn of
    the event loop after they are accepted. Past the descriptors accept() fails, every
    stream that opens a file fails with it, and asyncio logs each failed accept."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    cap = min(wanted, soft // 2)
    if cap < wanted:
        log.warning("limits.max_connections is %d, but this process may open %d files: at most %d connections",
                    wanted, soft, cap)
    return cap


def _reload(service: Vigil) -> None:
    """SIGHUP: as POST /v1/config/reload, with the outcome in the log."""
    try:
        service.reload_config()
    except ServiceError as exc:
        log.error("SIGHUP: config not reloaded: %s", exc)


def bind_rest(host: str, port: int) -> socket.socket:
    """The REST listening socket (not shared: no SO_REUSEPORT); OSError naming it."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait out TIME_WAIT
        sock.bind(address)
    except OSError as exc:
        raise OSError(f"cannot listen for REST on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def serve(settings: Settings, reread: Callable[[], Settings] | None = None) -> None:
    """`reread`: the config file read again, for POST /v1/config/reload and SIGHUP."""
    _logging()
    _return_frames_to_the_os()
    slower = allocator.advice()
    if slower:
        log.warning(slower)
    rest = bind_rest(settings.host, settings.port)
    service = Vigil(settings, reread=reread)
    signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=_reload, args=(service,), name="reload",
                                                             daemon=True).start())
    grpc_server = None
    try:
        if settings.grpc_port:
            grpc_server, port = start_grpc(service, settings.host, settings.grpc_port)
            log.info("gRPC on %s:%d", settings.host, port)
    except OSError:
        rest.close()
        service.close()
        raise

    @asynccontextmanager
    async def lifespan(_app):
        threading.Thread(target=service.start, name="restore", daemon=True).start()
        # Long-lived objects made at start-up need not be scanned by every collection
        # (the engine benchmark showed collector pauses in the tail latency).
        gc.freeze()
        log.info("REST on http://%s:%d (dashboard /dashboard, docs /docs); api keys: %s", settings.host,
                 rest.getsockname()[1], "on" if settings.api_keys else "off")
        try:
            yield
        finally:
            log.info("shutting down: draining streams and the engine")
            if grpc_server is not None:
                grpc_server.stop(grace=5).wait()
            await run_in_threadpool(service.close)
            log.info("stopped; events and metrics flushed")

    limits = settings.limits
    cap = connection_cap(limits.max_connections)
    app = build_app(service, lifespan=lifespan)
    config = uvicorn.Config(app, log_level="info", access_log=False, timeout_graceful_shutdown=10,
                            http=guarded_protocol(cap, limits.header_timeout_s),
                            timeout_keep_alive=int(max(1, limits.idle_timeout_s)), limit_concurrency=cap + SPARE,
                            backlog=BACKLOG)
    uvicorn.Server(config).run(sockets=[rest])
