"""The process among others: a full disk, a port someone holds, a process out of file
descriptors. Each test starts servers of its own."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import time

import httpx
import pytest

from support.processes import ROOT, VigilServer, free_port, run_command, wait_for


def serve_once(*args: str, cwd=ROOT, timeout_s: float = 90, preexec_fn=None) -> subprocess.CompletedProcess:
    """`vigil serve` that is expected to stop by itself (it cannot start)."""
    env = {k: v for k, v in os.environ.items() if k != "VIGIL_API_KEYS"}
    return run_command([sys.executable, "-m", "cli", "serve", "--device", "cpu", *args], timeout_s, cwd=cwd,
                       env=env, preexec_fn=preexec_fn)


def test_a_port_in_use_is_one_clear_error_not_a_shared_port(guarded, tmp_path):
    t0 = time.monotonic()
    grpc_taken = serve_once("--port", str(free_port()), "--grpc-port", str(guarded.grpc_port),
                            "--data-dir", str(tmp_path / "a"))
    assert grpc_taken.returncode == 1, grpc_taken.stderr[-2000:]
    assert f"cannot listen for gRPC on 127.0.0.1:{guarded.grpc_port}" in grpc_taken.stderr
    rest_taken = serve_once("--port", str(guarded.port), "--grpc-port", str(free_port()),
                            "--data-dir", str(tmp_path / "b"))
    assert rest_taken.returncode == 1, rest_taken.stderr[-2000:]
    assert f"cannot listen for REST on 127.0.0.1:{guarded.port}: Address already in use" in rest_taken.stderr
    for out in (grpc_taken, rest_taken):
        assert "terminate called" not in out.stderr and "Traceback" not in out.stderr
        assert "REST on http" not in out.stderr  # it never claimed to serve
    assert time.monotonic() - t0 < 60


@pytest.fixture
def small_disk(tmp_path):
    """An 8 MB tmpfs (mounting needs root, as CI is)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (mounting needs root)")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(folder) -> None:
    """Writes a file until the disk under `folder` is full."""
    with open(folder / "filler", "wb", buffering=0) as f:  # unbuffered: closing has nothing left to write
        try:
            while True:
                f.write(b"\0" * (4 << 10))
        except OSError:
            pass


def test_starting_on_a_full_disk_says_so(small_disk):
    fill(small_disk)
    out = serve_once("--port", str(free_port()), "--grpc-port", "0", "--data-dir", str(small_disk / "data"))
    assert out.returncode == 1, out.stderr[-2000:]
    assert "full" in out.stderr and "cannot rollback" not in out.stderr and "Traceback" not in out.stderr


def test_a_disk_that_fills_up_is_507_said_once_and_healed_by_room(small_disk):
    # its own: its data folder is on a small disk
    srv = VigilServer(small_disk / "data", extra=["--grpc-port", "0"]).start()
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as api:
            assert api.post("/v1/streams", json={"name": "f", "url": str(ROOT / "sample_videos/street_a.mp4"),
                                                 "options": {"loop": True, "realtime": False}}).status_code == 201
            assert api.post("/v1/apps", json={"name": "m", "source": "f", "detector": "motion"}).status_code == 201
            fill(small_disk)

            def refused() -> bool:  # the WAL may hold room for a few writes first
                r = api.put("/v1/models/scenedet/labels/x", json={"version": 2})
                assert r.status_code in (200, 507), r.text
                return r.status_code == 507 and "full" in r.json()["detail"]

            wait_for(refused, 60, "a write refused with 507")
            for _ in range(5):
                assert api.put("/v1/models/scenedet/labels/x", json={"version": 2}).status_code == 507
            assert api.get("/v1/streams/f").status_code == 200  # reads go on
            assert api.get("/v1/apps/m").json()["status"] == "running"
            os.remove(small_disk / "filler")
            wait_for(lambda: api.put("/v1/models/scenedet/labels/x", json={"version": 2}).status_code == 200, 30,
                     "writes again once there is room")
    finally:
        srv.stop()
    logs = srv.logs()
    assert logs.count("the disk is full") == 1 and "writes work again" in logs
    assert "Traceback" not in logs


@pytest.mark.slow
def test_more_sockets_than_descriptors_leave_the_server_and_its_streams_alone(tmp_path):
    """RLIMIT_NOFILE 512 and limits.max_connections 5000: the server caps connections
    below its descriptors, so 1000 idle sockets cannot run it out (they once did: every
    failed accept() logged a traceback, 600 MB in 90 s, and a looping file stream
    ended `failed (Too many open files)`)."""
    def low_fd_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (512, 512))

    # its own: other limits, and a low descriptor limit
    srv = VigilServer(tmp_path / "data", config={"limits": {"max_connections": 5000, "header_timeout_s": 60}},
                      preexec_fn=low_fd_limit).start()
    socks = []
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as api:
            assert api.post("/v1/streams", json={"name": "f", "url": str(ROOT / "sample_videos/street_a.mp4"),
                                                 "options": {"loop": True, "realtime": False}}).status_code == 201
            assert api.post("/v1/apps", json={"name": "m", "source": "f", "detector": "motion"}).status_code == 201
            wait_for(lambda: api.get("/v1/streams/f").json()["status"] == "live", 60, "live")
            log_size = srv.log.stat().st_size
            for _ in range(1000):
                socks.append(socket.create_connection(("127.0.0.1", srv.port), timeout=5))
            time.sleep(8)  # a 20 s clip decoded as fast as it goes loops, and reopens, in a few seconds
            with httpx.Client(base_url=srv.url, timeout=5) as fresh:
                assert fresh.get("/healthz").status_code == 200  # an idle socket made room for it
            stream = api.get("/v1/streams/f").json()
            assert stream["status"] == "live" and stream["reconnects"] == 0, stream
            assert srv.log.stat().st_size - log_size < 20_000
    finally:
        for s in socks:
            s.close()
        srv.stop()
    assert "at most 256 connections" in srv.logs() and "Too many open files" not in srv.logs()  # half of 512

