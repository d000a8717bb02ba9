"""How busy the machine was with work other than this process's, from /proc.

A profile is a plan's unit of device time. Measured while another process had the
cores (a package install, a second server), every latency comes out slower, larger
batches most of all, and a stored profile stays wrong for every later start: a
SceneDet backbone profiled beside a `pip install` comes out several times too slow at
its largest batch, and `vigil serve`, planning on it, serves fewer frames within their
SLO. So the profiler asks how much of the machine others took while it measured
(`OthersLoad`), and keeps a profile measured beside them for this run only.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

STAT = Path("/proc/stat")
FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
IDLE_FIELDS = ("idle", "iowait")
# /proc counts in clock ticks (10 ms at 100 Hz): over a shorter window one tick more
# or less reads as a tenth of a core or more, so such a window reads unknown
MIN_WINDOW_S = 0.5


def cpu_times(text: str | None = None) -> dict[str, int] | None:
    """The machine's CPU time counters (clock ticks, all cores) from /proc/stat's
    `cpu` line; None where there is no such file (not Linux)."""
    if text is None:
        try:
            text = STAT.read_text()
        except OSError:
            return None
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = [int(v) for v in parts[1:1 + len(FIELDS)]]
            return dict(zip(FIELDS, values + [0] * (len(FIELDS) - len(values))))
    return None


def process_ticks(pid: int | str = "self") -> int | None:
    """A process's CPU time (all its threads, user and system) in clock ticks; this
    process's by default. None where /proc cannot tell (not Linux, or the process is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])


def others_cores(before: tuple[dict[str, int] | None, int | None, float],
                 after: tuple[dict[str, int] | None, int | None, float]) -> float | None:
    """Cores' worth of CPU that other processes (and the hypervisor, as steal) took
    between two `reading()`s; None where /proc cannot tell, or the window was too short
    to tell."""
    (m0, own0, t0), (m1, own1, t1) = before, after
    if m0 is None or m1 is None or own0 is None or own1 is None or t1 - t0 < MIN_WINDOW_S:
        return None
    busy = sum(m1[k] - m0[k] for k in FIELDS if k not in IDLE_FIELDS)
    return max(0.0, (busy - (own1 - own0)) / os.sysconf("SC_CLK_TCK") / (t1 - t0))


def reading() -> tuple[dict[str, int] | None, int | None, float]:
    return cpu_times(), process_ticks(), time.monotonic()


class OthersLoad:
    """`with OthersLoad() as load:` ... then `load.cores`: what others took meanwhile."""

    def __enter__(self) -> "OthersLoad":
        self._before = reading()
        self.cores: float | None = None
        return self

    def __exit__(self, *exc) -> None:
        self.cores = others_cores(self._before, reading())
