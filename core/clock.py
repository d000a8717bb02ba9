"""The one clock of the pipeline: monotonic milliseconds. Frames are stamped with it at
capture, and the engine's deadlines and latencies are read against it."""

from __future__ import annotations

import time
from typing import Callable

Clock = Callable[[], float]


def monotonic_ms() -> float:
    return time.monotonic() * 1000.0
