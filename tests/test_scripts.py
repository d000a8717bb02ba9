"""The scripts a user runs from the checkout (scripts/): without what they need, they say
what to install in one line, never a traceback."""

from __future__ import annotations

import os
import sys

import pytest

from support.processes import ROOT, run_command

pytestmark = pytest.mark.slow  # each runs a script


def test_the_tours_camera_without_gstreamer_names_the_packages_in_one_line():
    # the venv's python has no GStreamer bindings, as a machine without Debian's has none
    out = run_command([str(ROOT / "scripts" / "rtsp-camera.sh")], 60,
                      env={**os.environ, "SYSTEM_PYTHON": sys.executable})
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    needed = run_command([str(ROOT / "scripts" / "rtsp-camera.sh"), "--packages"], 60).stdout.split()
    assert "gir1.2-gst-rtsp-server-1.0" in needed and all(p in out.stderr for p in needed)
    assert "make camera-deps" in out.stderr


def test_the_tours_camera_finds_gstreamer_where_make_test_installed_it():
    assert run_command([str(ROOT / "scripts" / "rtsp-camera.sh"), "--check"], 60).returncode == 0
