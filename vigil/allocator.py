"""A faster allocator than glibc's for the commands that run models.

With glibc's allocator, every activation tensor and decoded frame above its mmap
threshold is a fresh mapping: under `vigil serve` that is a flood of page faults, and
a large share of a core goes to the kernel zeroing pages. jemalloc and
mimalloc keep freed pages for reuse (PyTorch's CPU tuning guide recommends such an
allocator for the same reason). jemalloc's default still hands allocations over 8 MB
(a batch of 16 frames' activations) to an arena that returns them to the kernel at
once, so `oversize_threshold:0` keeps them in the ordinary arenas, which give unused
pages back after ten seconds. mimalloc returns freed pages after 10 ms by default, so
the delay is raised to the same ten seconds.

jemalloc comes from the distribution (Debian: libjemalloc2), which `pip install`
cannot give; mimalloc comes inside a wheel that Vigil depends on (`cmeel-mimalloc`),
so a pip-only install has a fast allocator too.

The allocator cannot be swapped once the process runs, so `vigil serve`, `run`,
`bench`, `ask` and `eval` re-execute themselves once with `LD_PRELOAD` set, before
anything heavy is imported. `VIGIL_ALLOCATOR`: `auto` (jemalloc when installed, else
mimalloc, else the system's; the default), `jemalloc` or `mimalloc` (fail when it is
not installed) or `system`. The user's own `MALLOC_CONF` or `MIMALLOC_*` settings win
over Vigil's.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
import sysconfig
from pathlib import Path
from typing import Callable

ENV = "VIGIL_ALLOCATOR"
CHOICES = ("auto", "jemalloc", "mimalloc", "system")
COMMANDS = frozenset({"serve", "run", "bench", "ask", "eval"})  # the ones that run models
GLOBAL_FLAGS = frozenset({"--url", "--api-key"})  # the root parser's flags that take a value (cli/connection.py)
JEMALLOC_PATHS = ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
                  "/usr/lib64/libjemalloc.so.2", "/usr/lib/libjemalloc.so.2")
MIMALLOC_IN_WHEEL = "cmeel.prefix/lib/libmimalloc.so.3"  # where cmeel-mimalloc installs it
# each allocator's settings, under the user's own (which win)
SETTINGS = {"jemalloc": {"MALLOC_CONF": "oversize_threshold:0"},
            "mimalloc": {"MIMALLOC_PURGE_DELAY": "10000"}}
INSTALL = {"jemalloc": "Debian: apt-get install libjemalloc2", "mimalloc": "pip install cmeel-mimalloc"}


class AllocatorError(Exception):
    pass


def find_jemalloc() -> str | None:
    for path in JEMALLOC_PATHS:
        if Path(path).is_file():
            return path
    name = ctypes.util.find_library("jemalloc")
    return name if name and "/" in name else None


def find_mimalloc() -> str | None:
    for key in ("purelib", "platlib"):
        path = Path(sysconfig.get_paths()[key]) / MIMALLOC_IN_WHEEL
        if path.is_file():
            return str(path)
    return None


FINDERS: dict[str, Callable[[], str | None]] = {"jemalloc": find_jemalloc, "mimalloc": find_mimalloc}


def preload(choice: str, current: str) -> tuple[str, str] | None:
    """(allocator, the `LD_PRELOAD` to re-execute with), or None to go on as this
    process is."""
    if choice not in CHOICES:
        raise AllocatorError(f"{ENV} must be one of {', '.join(CHOICES)}; was {choice!r}")
    if choice == "system" or any(f"lib{name}" in current for name in FINDERS):
        return None
    for name in FINDERS if choice == "auto" else (choice,):
        lib = FINDERS[name]()
        if lib is not None:
            return name, f"{lib}:{current}" if current else lib
    if choice != "auto":
        raise AllocatorError(f"{ENV}={choice}, but lib{choice} is not installed ({INSTALL[choice]})")
    return None


def in_use(pid: int | str = "self") -> str:
    """The allocator a process (this one by default) runs with: "jemalloc", "mimalloc"
    or "system", read from its memory maps ("unknown" where they cannot be read)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return "unknown"
    return next((name for name in FINDERS if f"lib{name}" in maps), "system")


def advice() -> str | None:
    """A warning for a process that runs models with the system allocator although the
    user did not ask for it (neither faster one is installed), else None."""
    if in_use() != "system" or os.environ.get(ENV, "auto").strip().lower() == "system":
        return None
    return ("neither jemalloc nor mimalloc is installed, so models run with the system allocator: with four "
            "cameras the server analysed about half as many frames in time (pip install cmeel-mimalloc, or "
            f"Debian: apt-get install libjemalloc2; {ENV}=system silences this)")


def command_of(argv: list[str]) -> str | None:
    """The command `argv` (without the program) names, past the global flags before it."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in GLOBAL_FLAGS else 1
    return argv[i] if i < len(argv) else None


def reexec_for(argv: list[str]) -> None:
    """Re-execute this interpreter under a faster allocator when `argv` (without the
    program) runs models and one is wanted and installed; return otherwise."""
    if command_of(argv) not in COMMANDS:
        return
    try:
        chosen = preload(os.environ.get(ENV, "auto").strip().lower(), os.environ.get("LD_PRELOAD", ""))
    except AllocatorError as exc:
        raise SystemExit(f"error: {exc}") from None
    if chosen is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environment(*chosen, os.environ))


def environment(allocator: str, preload_value: str, current: dict) -> dict:
    """The environment to re-execute with: the allocator preloaded, with Vigil's
    settings for it under the user's."""
    env = {**current, "LD_PRELOAD": preload_value}
    for key, value in SETTINGS[allocator].items():
        if key == "MALLOC_CONF":  # jemalloc reads options left to right: the user's, after, win
            user = current.get(key, "")
            env[key] = f"{value},{user}" if user else value
        else:
            env.setdefault(key, value)
    return env
