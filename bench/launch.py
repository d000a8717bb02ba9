"""A benchmark's servers, each in a process of its own started the way a user starts
it, with its output in a log file: up when its readiness URL answers 200.

A server is told to end when its bench does (Linux's parent-death signal): a bench
stopped with Ctrl-C or killed would otherwise leave a `vigil serve` running, and its
two cores' worth of work would slow every bench after it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def end_with_parent() -> None:
    """In the child before exec: SIGTERM when the thread that started it ends (on
    Linux; a no-op elsewhere). Benches start servers from their main thread."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Launched:
    def __init__(self, what: str, command: list[str], cwd: Path, log_path: Path, ready_url: str,
                 timeout_s: float, new_session: bool = False, env: dict | None = None,
                 stop_timeout_s: float = 60.0) -> None:
        """`env`: set in the command's environment, over this process's. `new_session`: the
        server leads a process group of its own, and `stop` ends the whole group."""
        self.what, self.log_path = what, log_path
        self.new_session, self.stop_timeout_s = new_session, stop_timeout_s
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(command, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=new_session, preexec_fn=end_with_parent,
                                     env={**os.environ, **env} if env else None)
        try:
            self._wait_ready(ready_url, timeout_s)
        except BaseException:  # not ready, or Ctrl-C while waiting: no one else holds it to stop
            self.stop()
            raise

    def _wait_ready(self, ready_url: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.what} exited ({self.proc.returncode}); {self.log_path} ends: "
                                   f"{self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(ready_url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{self.what} did not become ready in {timeout_s:.0f} s; see {self.log_path}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after `stop_timeout_s` (to its process group, when it has one)."""
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()

    def _signal(self, sig: int) -> None:
        try:
            if self.new_session:
                os.killpg(self.proc.pid, sig)
            else:
                self.proc.send_signal(sig)
        except ProcessLookupError:
            pass
