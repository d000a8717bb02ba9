"""jemalloc for the commands that run models.

With glibc's allocator, every activation tensor and decoded frame above its mmap
threshold is a fresh mapping: `vigil serve` with four cameras took about 100,000
page faults a second, and half a core went to the kernel zeroing pages. jemalloc
keeps freed pages for reuse (PyTorch's CPU tuning guide recommends it or TCMalloc
for the same reason): 8,000 faults a second. Its default still hands allocations
over 8 MB (a batch of 16 frames' activations) to an arena that returns them to the
kernel at once, which made the engine alone 0.56x as fast as with glibc;
`oversize_threshold:0` keeps them in the ordinary arenas, which give unused pages
back after ten seconds. Measured on two cores: the engine alone 1.24x glibc's frames
per second, and `vigil serve` with sixteen cameras 3.3x glibc's in-SLO frames per
second (31.4 against 9.5).

The allocator cannot be swapped once the process runs, so `vigil serve`, `run`,
`bench`, `ask` and `eval` re-execute themselves once with `LD_PRELOAD` set, before
anything heavy is imported. `VIGIL_ALLOCATOR`: `auto` (jemalloc when installed, the
default), `jemalloc` (fail when it is not) or `system`. A `MALLOC_CONF` of the user's
is kept, after (so over) Vigil's.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from pathlib import Path

ENV = "VIGIL_ALLOCATOR"
CHOICES = ("auto", "jemalloc", "system")
COMMANDS = frozenset({"serve", "run", "bench", "ask", "eval"})  # the ones that run models
MALLOC_CONF = "oversize_threshold:0"
KNOWN_PATHS = ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
               "/usr/lib64/libjemalloc.so.2", "/usr/lib/libjemalloc.so.2")


class AllocatorError(Exception):
    pass


def find_jemalloc() -> str | None:
    for path in KNOWN_PATHS:
        if Path(path).is_file():
            return path
    name = ctypes.util.find_library("jemalloc")
    return name if name and "/" in name else None


def preload(choice: str, current: str) -> str | None:
    """The `LD_PRELOAD` to re-execute with, or None to go on as this process is."""
    if choice not in CHOICES:
        raise AllocatorError(f"{ENV} must be one of {', '.join(CHOICES)}; was {choice!r}")
    if choice == "system" or "libjemalloc" in current:
        return None
    lib = find_jemalloc()
    if lib is None:
        if choice == "jemalloc":
            raise AllocatorError(f"{ENV}=jemalloc, but libjemalloc.so.2 is not installed "
                                 "(Debian: apt-get install libjemalloc2)")
        return None
    return f"{lib}:{current}" if current else lib


def in_use(pid: int | str = "self") -> str:
    """The allocator a process (this one by default) runs with: "jemalloc" or "system",
    read from its memory maps ("unknown" where they cannot be read)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return "unknown"
    return "jemalloc" if "libjemalloc" in maps else "system"


def advice() -> str | None:
    """A warning for a process that runs models without jemalloc although the user did
    not ask for the system allocator (it is not installed), else None."""
    if in_use() != "system" or os.environ.get(ENV, "auto").strip().lower() == "system":
        return None
    return ("jemalloc is not installed, so models run with the system allocator: with four cameras the "
            "server analysed about half as many frames in time (Debian: apt-get install libjemalloc2; "
            f"{ENV}=system silences this)")


def reexec_for(argv: list[str]) -> None:
    """Re-execute this interpreter under jemalloc when `argv` (without the program) runs
    models and it is wanted and installed; return otherwise."""
    if not argv or argv[0] not in COMMANDS:
        return
    try:
        value = preload(os.environ.get(ENV, "auto").strip().lower(), os.environ.get("LD_PRELOAD", ""))
    except AllocatorError as exc:
        raise SystemExit(f"error: {exc}") from None
    if value is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environment(value, os.environ))


def environment(preload_value: str, current: dict) -> dict:
    """The environment to re-execute with: jemalloc preloaded, Vigil's settings first."""
    user = current.get("MALLOC_CONF", "")
    return {**current, "LD_PRELOAD": preload_value, "MALLOC_CONF": f"{MALLOC_CONF},{user}" if user else MALLOC_CONF}
