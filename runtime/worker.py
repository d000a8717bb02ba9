"""One stream in `vigil serve`: its managed source, its apps and the thread that drives
them, behind the few verbs the server's services call.

A `StreamWorker` composes two parts with one owner each:
- `AppSupervisor` (runtime/app_supervisor.py): which apps the API wants, and each app's
  status, warnings, counts and latest frame, published under its lock as snapshots
  that never change once read;
- `BlockLoop` (runtime/block_loop.py): the stream's one thread (`blocks-<stream>`),
  which cuts frames into blocks, sends them through the engine, and alone touches the
  `App` objects, between blocks (to add, change or remove them) and after each.
"""

from __future__ import annotations

from typing import Callable

from apps.app import App
from apps.spec import AppSpec
from runtime.app_supervisor import AppStatus, AppSupervisor
from runtime.block_loop import BlockEvents, BlockLoop, OnBlock
from runtime.boundaries import EngineVerbs, EventSink, Stream
from runtime.live_frames import LiveFrames
from runtime.load import LoadGovernor
from runtime.pipeline import MakeApp
from streams.blocks import BlockCutter

__all__ = ["AppStatus", "StreamWorker"]


class StreamWorker:
    def __init__(self, stream: Stream, engine: EngineVerbs, emit: EventSink,
                 block_frames: int, block_ms: float, clock: Callable[[], float],
                 on_block: OnBlock | None = None,
                 governor: LoadGovernor | None = None, quiet_after_s: float = 300.0,
                 make_app: MakeApp = App, on_stop: Callable[[], None] | None = None) -> None:
        """`on_block` takes each block's scene facts, for captions: (stream, t_ms, its
        events, app -> class -> in view). `make_app` builds each app (the apps' state may
        live elsewhere: cluster/app_host.py); `on_stop` runs once the worker has finished
        its apps."""
        self.stream = stream
        self.governor = governor or LoadGovernor()
        events = BlockEvents(stream.name, emit)
        self.apps = AppSupervisor(stream, engine, events.emit, make_app, quiet_after_s)
        self.loop = BlockLoop(stream, engine, self.apps, events, BlockCutter(block_frames, block_ms), clock,
                              self.governor, on_block, on_stop)

    @property
    def name(self) -> str:
        return self.stream.name

    def start(self) -> "StreamWorker":
        self.loop.start()
        return self

    @property
    def running(self) -> bool:
        """Still taking frames or finishing them (its thread has not ended)."""
        return self.loop.thread.is_alive()

    @property
    def native_id(self) -> int | None:
        """The OS id of the stream's block loop thread (None: not started)."""
        return self.loop.thread.native_id

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop decoding, finish the blocks in flight and end every open track."""
        self.loop.stop(timeout_s)

    # -- the stream's apps, from any thread ------------------------------------------------------------
    @property
    def app_status(self) -> dict[str, AppStatus]:
        return self.apps.app_status

    @property
    def live(self) -> LiveFrames:
        return self.apps.live

    def set_app(self, spec: AppSpec) -> None:
        self.apps.set_app(spec)

    def remove_app(self, name: str) -> None:
        self.apps.remove_app(name)

    def app_names(self) -> list[str]:
        return self.apps.app_names()

    def app_counts(self, name: str) -> dict | None:
        """The app's counts as of its last block (None: not running)."""
        return self.apps.app_counts(name)

    def app_warning(self, name: str) -> str | None:
        """The app's warnings, most lasting first, as one line (None: none)."""
        return self.apps.app_warning(name)
