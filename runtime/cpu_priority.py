"""CPU priority of a stream's own threads (its decoder and its block loop) in `vigil serve`.

The engine's lanes serve every app's deadlines, and the device scheduler already puts
a higher-priority app's frames first; but on a CPU the lanes share the cores with
every stream's decoder and block loop, and the kernel shares the cores per thread: with
many cameras on one model and little CPU, the streams' threads take most of it and the
priority camera misses its SLO. So a stream none of whose apps has the highest priority
in use runs its threads at `BACKGROUND_NICE`: its decode-side work uses the CPU the
engine and the higher-priority streams leave, and what it then cannot deliver in time
is shed at admission as before (deadline). Streams at the top priority, the engine and
the HTTP server stay at the process's own level. This orders the kernel's scheduling
only: the GIL and the engine's lock, which a background thread may hold, are not
ordered by nice values.

Background threads also run as SCHED_BATCH, which the kernel reads as "CPU-bound, do not
preempt on wakeup". A nice value alone lowers a thread's share, not its wakeups: a
sleeping thread that wakes gets a sleeper's credit whatever its weight, and the
streams' decoders and block loops wake many times a second, each wake-up preempting a
lane. Batched, they wait for the lanes' time slices to end.

Raising a thread's nice value needs no privilege; lowering it back (a stream whose
app is raised to the top priority) needs CAP_SYS_NICE or RLIMIT_NICE, as root in a
container has. Without it the stream stays in the background, and says so once.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("vigil.cpu")

BACKGROUND_NICE = 10  # a tenth of a nice-0 thread's CPU weight (CFS: 1024 -> 110)
BATCH_POLICY = getattr(os, "SCHED_BATCH", None)  # Linux only


def policy_of(native_id: int) -> int | None:
    try:
        return os.sched_getscheduler(native_id)
    except (OSError, AttributeError):
        return None


def _set_batch(native_id: int, on: bool) -> None:
    """SCHED_BATCH on, SCHED_OTHER off; where there is no such policy, nice alone."""
    if BATCH_POLICY is None:
        return
    try:
        os.sched_setscheduler(native_id, BATCH_POLICY if on else os.SCHED_OTHER, os.sched_param(0))
    except (ProcessLookupError, PermissionError):  # gone, or a sandbox that forbids it: nice still applies
        pass


def nice_of(native_id: int) -> int | None:
    try:
        return os.getpriority(os.PRIO_PROCESS, native_id)
    except (OSError, AttributeError):  # the thread is gone, or not a POSIX system
        return None


class ThreadLevel:
    """The nice value of a set of threads, relative to the process's own when made:
    `background(True)` moves them `BACKGROUND_NICE` below it, `background(False)`
    back. Threads are given by native id (`threading.Thread.native_id`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.base = nice_of(0)
        self.is_background = False
        self._refused = False

    def background(self, on: bool, native_ids: list[int | None]) -> None:
        if on == self.is_background or self.base is None or self._refused:
            return
        low = min(19, self.base + BACKGROUND_NICE)
        target = low if on else self.base
        for tid in native_ids:
            if tid is None:
                continue
            try:
                os.setpriority(os.PRIO_PROCESS, tid, target)
                _set_batch(tid, on)
            except ProcessLookupError:  # that thread has ended (its stream stopped)
                continue
            except PermissionError:
                self._refused = True
                log.warning("stream %s: cannot raise its threads' CPU priority back to the process's "
                            "(nice %d needs CAP_SYS_NICE); they stay at nice %d until the stream restarts",
                            self.name, self.base, low)
                return
        self.is_background = on
        log.info("stream %s: threads at nice %d%s (%s)", self.name, target, " as SCHED_BATCH" if on else "",
                 "below the top priority in use" if on else "at the top priority in use")
