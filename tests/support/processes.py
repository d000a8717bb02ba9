"""Real processes for tests: GStreamer's RTSP server and `vigil serve`, on free
loopback ports, stopped (SIGTERM, then SIGKILL) when done."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with python3-gi and gst-rtsp-server
TEST_TIMEOUT_S = 600  # pytest's own limit on a test (pyproject.toml's `timeout`; tests/test_suite.py checks)


def run_command(args: list[str], timeout_s: float, **kwargs) -> subprocess.CompletedProcess:
    """`subprocess.run` with its output kept as text. A command still running after
    `timeout_s` (under pytest's own limit, so that this fires first) fails the test
    with the command and the last of what it printed."""
    if not 0 < timeout_s < TEST_TIMEOUT_S:
        raise ValueError(f"timeout_s must be in (0, {TEST_TIMEOUT_S}) (pytest's own limit); was {timeout_s}")
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, **kwargs)
    except subprocess.TimeoutExpired as exc:
        def tail(out) -> str:
            text = out.decode(errors="replace") if isinstance(out, bytes) else (out or "")
            return text[-3000:] or "(nothing)"

        pytest.fail(f"{' '.join(map(str, args))} still running after {timeout_s} s\nstdout: {tail(exc.stdout)}\n"
                    f"stderr: {tail(exc.stderr)}", pytrace=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout_s: float, what: str, poll_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as exc:  # the thing is not up yet
            last = exc
        time.sleep(poll_s)
    raise TimeoutError(f"{what} not true within {timeout_s} s (last: {last!r})")


class RtspServer:
    def __init__(self, clip: Path, port: int | None = None, mount: str = "cam") -> None:
        self.clip, self.port, self.mount = clip, port or free_port(), mount
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"rtsp://127.0.0.1:{self.port}/{self.mount}"

    def start(self) -> "RtspServer":
        self.proc = subprocess.Popen([SYSTEM_PYTHON, str(ROOT / "scripts/rtsp_server.py"), str(self.clip),
                                      str(self.port), self.mount], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("READY"):
            self.stop()
            raise RuntimeError(f"RTSP server did not start: {line!r}")
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def settled(api, quiet_s: float = 1.5, timeout_s: float = 90.0) -> None:
    """Every sink has delivered every event, and no event came for `quiet_s`: an ended
    stream's apps still store their last events (open tracks end) after it says so."""
    def quiet() -> bool:
        before = [s["last_id"] for s in api.get("/v1/sinks").json()]
        time.sleep(quiet_s)
        after = api.get("/v1/sinks").json()
        return all(s["backlog"] == 0 for s in after) and [s["last_id"] for s in after] == before

    wait_for(quiet, timeout_s, "every sink delivered, and no new event")


class VigilServer:
    """`vigil serve` as a user starts it, in its own process. `config` (settings, as
    in configs/vigil.yaml) and `media_dirs` (folders file streams may come from, beside
    sample_videos/) are written to a config file it is started with."""

    def __init__(self, data_dir: Path, api_keys: str | None = None, extra: list[str] | None = None,
                 config: dict | None = None, media_dirs: list[Path] = (), preexec_fn=None) -> None:
        self.data_dir = data_dir
        self.port, self.grpc_port = free_port(), free_port()
        self.api_keys = api_keys
        self.extra = extra or []
        self.preexec_fn = preexec_fn
        self.proc: subprocess.Popen | None = None
        self.log = data_dir.parent / f"{data_dir.name}-serve.log"
        if config is not None or media_dirs:
            config = dict(config or {})
            limits = config.setdefault("limits", {})
            limits.setdefault("media_dirs", [str(ROOT / "sample_videos"), *map(str, media_dirs)])
            self.config_path = data_dir.parent / f"{data_dir.name}-vigil.yaml"
            self.config_path.parent.mkdir(parents=True, exist_ok=True)
            self.config_path.write_text(yaml.safe_dump(config))
            self.extra = ["--config", str(self.config_path), *self.extra]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 90.0) -> "VigilServer":
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("VIGIL_API_KEYS", None)
        if self.api_keys is not None:
            env["VIGIL_API_KEYS"] = self.api_keys
        self._log = open(self.log, "a")
        self.proc = subprocess.Popen([sys.executable, "-m", "cli", "serve", "--port", str(self.port),
                                      "--grpc-port", str(self.grpc_port), "--data-dir", str(self.data_dir),
                                      "--device", "cpu", *self.extra],
                                     cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     preexec_fn=self.preexec_fn)
        wait_for(lambda: self.proc.poll() is None and httpx.get(f"{self.url}/healthz").status_code == 200,
                 timeout_s, f"vigil serve on {self.url} (log {self.log})")
        return self

    def stop(self, timeout_s: float = 60.0) -> bool:
        """SIGTERM, as a service manager stops it; True when it shut down gracefully."""
        if self.proc is None:
            return True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()
        return "stopped; events and metrics flushed" in self.logs()

    def logs(self) -> str:
        return self.log.read_text()
