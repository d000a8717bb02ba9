"""CPU hogs beside a bench (bench/hogs.py): they spin at nice 10 while the bench runs,
and are gone after."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.hogs import NICE, Hogs
from engine.machine_load import process_ticks


def test_bounds_are_checked():
    for n, nice in ((-1, 10), (65, 10), (1, 20), (1, -1)):
        with pytest.raises(ValueError, match="hogs must be 0 to 64 and nice 0 to 19"):
            Hogs(n, nice)


@pytest.mark.slow
def test_hogs_spin_at_nice_ten_and_end_with_the_block():
    with Hogs(2) as hogs:
        pids = [p.pid for p in hogs.procs]
        time.sleep(1.0)
        for pid in pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            assert int(fields[16]) == NICE  # stat's 19th field, counted after the name
            assert process_ticks(pid) > 0  # it has spent CPU time
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
