"""A bench's server ends with the bench: killed outright, it leaves nothing running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

BENCH = textwrap.dedent("""
    import sys, tempfile, time
    from pathlib import Path
    from bench.launch import Launched, free_ports
    port = free_ports(1)[0]
    tmp = Path(tempfile.mkdtemp())
    server = Launched("http", [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], tmp,
                      tmp / "server.log", f"http://127.0.0.1:{port}/", 30)
    print(server.proc.pid, flush=True)
    time.sleep(600)
""")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie has ended; only its parent's wait is missing
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_killed_bench_takes_its_server_with_it():
    bench = subprocess.Popen([sys.executable, "-c", BENCH], stdout=subprocess.PIPE, text=True)
    try:
        server = int(bench.stdout.readline())
        assert alive(server)
        bench.send_signal(signal.SIGKILL)  # no cleanup of its own runs
        bench.wait(10)
        deadline = time.monotonic() + 10
        while alive(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(server)
    finally:
        if bench.poll() is None:
            bench.kill()


@pytest.mark.slow
def test_stopping_a_server_of_its_own_session_ends_what_it_started(tmp_path):
    from bench.launch import Launched, free_ports

    port = free_ports(1)[0]
    script = f"sleep 600 & echo $! > child; exec {sys.executable} -m http.server {port} --bind 127.0.0.1"
    server = Launched("http", ["sh", "-c", script], tmp_path, tmp_path / "server.log", f"http://127.0.0.1:{port}/",
                      30, new_session=True, stop_timeout_s=5)
    child = int((tmp_path / "child").read_text())
    try:
        assert alive(child)
        server.stop()
        deadline = time.monotonic() + 10
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(child) and server.proc.poll() is not None
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
