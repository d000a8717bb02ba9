"""CPU hogs: busy processes beside what a bench measures, as a neighbour on the same
machine would be (a decoder, a backup, a package install).

Each hog is a Python process that spins at `nice` 10 on the cores this process may
use. It ends with the bench (`with Hogs(n):`), and with this process if it dies.
"""

from __future__ import annotations

import os
import subprocess
import sys
from types import TracebackType

from bench.launch import end_with_parent

NICE = 10
SPIN = "import os, sys\nos.nice(int(sys.argv[1]))\nwhile True:\n    pass\n"
MAX_HOGS = 64


class Hogs:
    def __init__(self, n: int, nice: int = NICE) -> None:
        if not (0 <= n <= MAX_HOGS and 0 <= nice <= 19):
            raise ValueError(f"hogs must be 0 to {MAX_HOGS} and nice 0 to 19; were {n} and {nice}")
        self.n, self.nice = n, nice
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "Hogs":
        self.procs = [subprocess.Popen([sys.executable, "-c", SPIN, str(self.nice)], stdin=subprocess.DEVNULL,
                                       preexec_fn=end_with_parent) for _ in range(self.n)]
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait(10)
        self.procs = []


def default_hogs() -> int:
    """One per core this process may run on."""
    return len(os.sched_getaffinity(0))
