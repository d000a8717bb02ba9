"""A stream's apps: the ones the API wants, and the running ones its block loop drives.

Two sides share one lock. The API's threads say what they want (`set_app`,
`remove_app`) and read what the block loop's thread published: each app's status,
warnings, counts and latest frame. The block loop's thread alone builds, reconfigures,
observes and finishes the `App` objects (`sync` between blocks, `observed` after each);
an app's counts are published as a new dict each block, so what a reader holds never
changes, and an `App` is never read off that thread.

Changes take effect at the next block. An app that cannot start (its model fails to
load), or that raises while it runs, gets status `failed` with the error, and the
stream's other apps go on. An app whose every frame of a block was dropped because its
model is not there (unloaded) is `degraded` with the reason until frames come back.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np

from apps.annotate import Overlay
from apps.app import App
from apps.spec import AppSpec
from core.events import Event
from core.frames import FrameBlock
from runtime.boundaries import EngineVerbs, Stream
from runtime.live_frames import LiveFrames
from runtime.pipeline import AppRunner, MakeApp, RunError, build_runners, crowd_warning
from streams.blocks import FrameSampler

WARNING_KINDS = ("domain", "crowd", "quiet")  # an app's warnings, in the order they are shown
log = logging.getLogger("vigil.worker")


@dataclass(frozen=True)
class AppStatus:
    status: str = "waiting"  # waiting (no frames yet) | loading | running | degraded | failed
    error: str | None = None


class AppSupervisor:
    """`emit` stores an app's events (the block loop's, which also hands them to the
    block's listeners); `make_app` builds each app (its state may live elsewhere:
    cluster/app_host.py)."""

    def __init__(self, stream: Stream, engine: EngineVerbs, emit: Callable[[list[Event]], None],
                 make_app: MakeApp = App, quiet_after_s: float = 300.0) -> None:
        self.stream = stream
        self.engine = engine
        self.make_app = make_app
        self._emit = emit
        # an app whose model has found none of its classes for quiet_after_s of analysed
        # stream time: most often a model whose output does not fit its labels or kind
        self.quiet_after_ms = quiet_after_s * 1000.0
        self._lock = threading.Lock()  # guards every field below but `_runners`
        self._wanted: dict[str, AppSpec] = {}  # what the API asked for
        self._changed = True
        self.app_status: dict[str, AppStatus] = {}  # an entry is replaced, never changed
        self.app_warnings: dict[str, dict[str, str]] = {}  # app -> kind (domain, quiet, crowd) -> warning
        self.live = LiveFrames()  # each app's latest analysed frame, for frame.jpg
        # each app's counts as of its last block, published by the block loop's thread
        self._counts: dict[str, dict] = {}
        self._runners: dict[str, AppRunner] = {}  # the block loop thread's own, as are their apps
        self._has_app = threading.Event()  # an app was ever attached

    @property
    def name(self) -> str:
        return self.stream.name

    # -- the API's threads --------------------------------------------------------------------------
    def set_app(self, spec: AppSpec) -> None:
        with self._lock:
            self._wanted[spec.name] = spec
            self.app_status.setdefault(spec.name, AppStatus())
            self._changed = True
        self._has_app.set()

    def remove_app(self, name: str) -> None:
        with self._lock:
            self._wanted.pop(name, None)
            self.app_status.pop(name, None)
            self._counts.pop(name, None)
            self.live.forget(name)
            self.app_warnings.pop(name, None)
            self._changed = True

    def app_names(self) -> list[str]:
        with self._lock:
            return list(self._wanted)

    def app_counts(self, name: str) -> dict | None:
        """The app's counts as of its last block (None: not running)."""
        with self._lock:
            return self._counts.get(name)

    def app_warning(self, name: str) -> str | None:
        """The app's warnings, most lasting first, as one line (None: none)."""
        with self._lock:
            said = self.app_warnings.get(name) or {}
            return "; ".join(said[k] for k in WARNING_KINDS if k in said) or None

    def wait_for_app(self, timeout_s: float) -> bool:
        """Whether an app was ever attached, waiting up to timeout_s for one."""
        return self._has_app.wait(timeout_s)

    # -- the block loop's thread --------------------------------------------------------------------
    def sync(self, block: FrameBlock) -> list[AppRunner]:
        """Bring the running apps in line with the wanted ones (only between blocks)."""
        with self._lock:
            if not self._changed:
                return list(self._runners.values())
            wanted = dict(self._wanted)
            self._changed = False
        for name in [n for n in self._runners if n not in wanted]:
            self._finish(self._runners.pop(name))
        for name, spec in wanted.items():
            runner = self._runners.get(name)
            if runner is None:
                self._start(spec, block)
            elif runner.app.spec != spec:
                self._reconfigure(runner, spec)
        return list(self._runners.values())

    def _start(self, spec: AppSpec, block: FrameBlock) -> None:
        name = spec.name
        self._set_status(name, "loading")
        try:
            runner = self._runners[name] = build_runners([spec], self.engine, self.name, block.size,
                                                         self.stream.stats.fps or 15.0, self.make_app,
                                                         source=self.stream.url)[0]
            self._set_status(name, "running")
            self._publish_counts(runner)
            if runner.domain_warning and self._warn(name, "domain", runner.domain_warning):
                log.warning("app %s on stream %s: %s", name, self.name, runner.domain_warning)
        except Exception as exc:  # a RunError (its model does not load), or anything else: this app only
            reason = str(exc) if isinstance(exc, (RunError, ValueError)) else f"{type(exc).__name__}: {exc}"
            log.warning("app %s on stream %s cannot start: %s", name, self.name, reason)
            self._set_status(name, "failed", reason[:500])
            with self._lock:
                self._wanted.pop(name, None)  # do not retry on every block

    def _reconfigure(self, runner: AppRunner, spec: AppSpec) -> None:
        try:
            runner.app.reconfigure(spec)
            runner.sampler, runner.rate_shed = FrameSampler(spec.fps), 0.0
            self._publish_counts(runner)
        except Exception as exc:  # this app only
            self.failed(runner, exc)

    def failed(self, runner: AppRunner, exc: Exception) -> None:
        """The app raised: it stops, with status `failed`; the stream's other apps go on."""
        name = runner.app.name
        if self._runners.pop(name, None) is None:
            return  # failed already, in an earlier block still in flight
        log.error("app %s on stream %s failed: %s: %s (the stream's other apps go on)", name, self.name,
                  type(exc).__name__, exc, exc_info=exc)
        self._set_status(name, "failed", f"{type(exc).__name__}: {exc}"[:500])
        with self._lock:
            self._wanted.pop(name, None)  # not restarted at every block; PATCH or re-add it
            self._counts.pop(name, None)

    def current(self, runners: list[AppRunner]) -> list[AppRunner]:
        """Those of a block's runners still running (not failed or removed since it was sent)."""
        return [r for r in runners if self._runners.get(r.app.name) is r]

    def observed(self, runner: AppRunner, span_s: float) -> None:
        """After the app observed a block covering span_s of stream time: publish its
        counts, its health and its warnings."""
        self._publish_counts(runner)
        self._health(runner)
        self._watch_quiet(runner, span_s)
        self._watch_crowd(runner)

    def keep_live(self, name: str, pixels: np.ndarray, drawn: Overlay, color_index: int) -> None:
        """Keep the app's latest analysed frame (`pixels`: [H, W, 3] RGB) unless it was removed."""
        with self._lock:
            if name in self.app_status:
                self.live.keep(name, pixels, drawn, color_index)

    def finish_all(self) -> None:
        for runner in self._runners.values():
            self._finish(runner)

    def _finish(self, runner: AppRunner) -> None:
        """End the app's open tracks (its last events); a failure there is the app's alone."""
        try:
            self._emit(runner.app.finish())
        except Exception:
            log.exception("stream %s: app %s could not finish", self.name, runner.app.name)

    def _publish_counts(self, runner: AppRunner) -> None:
        if self._runners.get(runner.app.name) is not runner:
            return  # failed while it observed the block
        counts = runner.app.counts()  # a new dict each time: what readers hold never changes
        with self._lock:
            if runner.app.name in self.app_status:  # not removed meanwhile
                self._counts[runner.app.name] = counts

    def _set_status(self, name: str, status: str, error: str | None = None) -> None:
        with self._lock:
            if name in self.app_status:
                self.app_status[name] = AppStatus(status, error)

    def _warn(self, name: str, kind: str, warning: str | None) -> bool:
        """Set (or with None clear) one kind of the app's warnings; whether it changed."""
        with self._lock:
            said = self.app_warnings.setdefault(name, {})
            if said.get(kind) == warning:
                return False
            if warning is None:
                said.pop(kind, None)
            else:
                said[kind] = warning
            return True

    def _health(self, runner: AppRunner) -> None:
        """running <-> degraded, from the block just observed: degraded when no frame
        got a result because the model is not there."""
        name = runner.app.name
        with self._lock:
            current = self.app_status.get(name)
        if current is None or current.status not in ("running", "degraded"):
            return
        missing = runner.block_results == 0 and runner.block_drops.get("unavailable")
        if missing and current.status == "running":
            log.warning("app %s on stream %s is degraded: every frame is dropped: %s", name, self.name, missing)
            self._set_status(name, "degraded", f"every frame dropped: {missing}")
        elif runner.block_results and current.status == "degraded":
            log.info("app %s on stream %s gets results again", name, self.name)
            self._set_status(name, "running")

    def _watch_quiet(self, runner: AppRunner, span_s: float) -> None:
        name, found = runner.app.name, runner.app.num_found
        if found > runner.seen_found:
            runner.seen_found, runner.quiet_ms = found, 0.0
            if self._warn(name, "quiet", None):
                log.info("app %s on stream %s detects its classes again", name, self.name)
        elif runner.block_results:
            runner.quiet_ms += span_s * 1000.0
            if runner.quiet_ms >= self.quiet_after_ms:
                classes = runner.app.spec.classes or "any class"
                warning = (f"no detections of {classes} in the last {self.quiet_after_ms / 1000.0:.0f} s of "
                           f"analysed frames (does the model's output fit its kind and labels?)")
                if self._warn(name, "quiet", warning):
                    log.warning("app %s on stream %s: %s", name, self.name, warning)

    def _watch_crowd(self, runner: AppRunner) -> None:
        """Warn while the app's model reports more of its classes a frame, over a window of
        analysed frames, than footage is likely to hold: a model that does not fit the
        footage (SceneDet on real grass and paving) finds objects everywhere."""
        closed, warning = crowd_warning(runner)
        if closed and self._warn(runner.app.name, "crowd", warning) and warning:
            log.warning("app %s on stream %s: %s", runner.app.name, self.name, warning)
