"""Others' load on the machine while a profile is measured (engine/machine_load.py)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from engine.machine_load import OthersLoad, cpu_times, others_cores

BEFORE = "cpu  1000 0 200 700 0 0 0 100 0 0\n"
AFTER = "cpu  1300 0 260 900 40 0 0 160 0 0\n"  # 300 user, 60 system, 240 idle+iowait, 60 steal


def test_others_are_the_busy_ticks_less_this_process_s_own(monkeypatch):
    monkeypatch.setattr("os.sysconf", lambda name: 100)  # ticks a second
    # 420 busy ticks (steal counts: the hypervisor's other guests) less 120 of ours, over 2 s
    cores = others_cores((cpu_times(BEFORE), 50, 10.0), (cpu_times(AFTER), 170, 12.0))
    assert cores == pytest.approx(1.5)
    assert others_cores((None, 50, 10.0), (cpu_times(AFTER), 170, 12.0)) is None
    assert others_cores((cpu_times(BEFORE), 50, 10.0), (cpu_times(AFTER), 170, 10.1)) is None  # too short to tell


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_process_spinning_beside_is_seen_and_this_process_s_own_work_is_not():
    spin = "import time\nend = time.time() + 30\nwhile time.time() < end: pass"
    spinner = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.3)  # started
        with OthersLoad() as beside:
            time.sleep(1.0)
    finally:
        spinner.kill()
        spinner.wait()
    assert beside.cores is not None and beside.cores > 0.6
    # This process spinning adds nothing to others' load: measured against windows in
    # which it sleeps, taken in turn, so that other work on the machine (the suite's
    # other workers) falls on both alike.
    added = []
    for _ in range(3):
        with OthersLoad() as sleeping:
            time.sleep(0.6)
        with OthersLoad() as alone:
            end = time.monotonic() + 0.6
            while time.monotonic() < end:
                pass
        assert sleeping.cores is not None and alone.cores is not None
        added.append(alone.cores - sleeping.cores)
    assert sorted(added)[1] < 0.4, added
