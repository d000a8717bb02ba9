"""Where a result came from: the machine, the code and the command, written into every
benchmark and evaluation report so that a committed result can be read without its run.

A figure means little without the machine it ran on (a 2-core VM whose hypervisor steals
a third of the CPU serves a third less) and the code that made it, so both travel with it.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from core.host import usable_cores
from engine.machine_load import FIELDS, cpu_times
from vigil.allocator import in_use

ROOT = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit() -> dict:
    """The checkout's commit and whether its tracked files (results aside) differ from it;
    nulls outside git."""
    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    # a result written over its committed predecessor (bench/results/) is not a change of the code
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench/results") if sha else None
    return {"commit": sha, "dirty": bool(status) if status is not None else None}


def steal_share(before: dict[str, int] | None, after: dict[str, int] | None) -> float | None:
    """Of the CPU time that passed between two readings, the share the hypervisor took."""
    if before is None or after is None:
        return None
    spent = {k: after[k] - before[k] for k in FIELDS}
    total = sum(spent.values())
    return round(spent["steal"] / total, 3) if total > 0 else None


def gpu_name(device: str | None) -> str | None:
    if not device or not device.startswith("cuda"):
        return None
    import torch

    return torch.cuda.get_device_name(torch.device(device))


class Provenance:
    """Started before a run and finished after it: the run's machine, code and steal."""

    def __init__(self, argv: list[str] | None = None) -> None:
        self.argv = list(sys.argv[1:] if argv is None else argv)
        self.started = time.time()
        self.cpu_before = cpu_times()

    def finish(self, device: str | None = None) -> dict:
        import torch

        return {
            "machine": {"cpu": cpu_model(), "cores": usable_cores(), "logical_cpus": os.cpu_count(),
                        "gpu": gpu_name(device), "allocator": in_use(),
                        "steal": steal_share(self.cpu_before, cpu_times()),
                        "python": platform.python_version(), "torch": torch.__version__},
            **commit(),
            "command": "vigil " + " ".join(self.argv),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "wall_s": round(time.time() - self.started, 1),
        }
