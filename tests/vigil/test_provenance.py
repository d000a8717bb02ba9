"""What a bench or eval report says of where it ran: the steal share from /proc/stat's
counters, the machine and the commit."""

from __future__ import annotations

import re

import pytest

from engine.machine_load import cpu_times
from vigil.provenance import Provenance, steal_share

BEFORE = "cpu  1000 0 200 700 0 0 0 100 0 0\ncpu0 500 0 100 350 0 0 0 50 0 0\nintr 1 2 3\n"
AFTER = "cpu  1500 0 250 850 0 0 0 400 0 0\ncpu0 750 0 125 425 0 0 0 200 0 0\nintr 1 2 3\n"


def test_steal_is_its_share_of_the_time_that_passed():
    # 500 user + 50 system + 150 idle + 300 steal passed: 0.3 of it stolen
    assert steal_share(cpu_times(BEFORE), cpu_times(AFTER)) == 0.3


def test_an_old_kernel_without_a_steal_column_reads_none_stolen():
    old = "cpu  1000 0 200 700 0 0 0\n"
    later = "cpu  1100 0 200 800 0 0 0\n"
    assert steal_share(cpu_times(old), cpu_times(later)) == 0.0


def test_no_reading_or_no_time_passed_is_unknown():
    assert cpu_times("intr 1 2 3\n") is None
    assert steal_share(None, cpu_times(AFTER)) is None
    assert steal_share(cpu_times(AFTER), cpu_times(AFTER)) is None


def test_this_machine_can_be_read_where_linux_runs():
    now = cpu_times()
    assert now is None or (set(now) >= {"user", "idle", "steal"} and all(v >= 0 for v in now.values()))


@pytest.mark.slow  # runs git
def test_a_report_names_the_machine_the_code_and_the_command():
    run = Provenance(["bench", "engine", "--quick"])
    report = run.finish("cpu")
    machine = report["machine"]
    assert machine["cpu"] and machine["cores"] >= 1 and machine["logical_cpus"] >= machine["cores"]
    assert machine["allocator"] in ("jemalloc", "mimalloc", "system") and machine["gpu"] is None
    assert machine["steal"] is None or 0.0 <= machine["steal"] <= 1.0
    assert re.fullmatch(r"[0-9a-f]{40}", report["commit"]) and isinstance(report["dirty"], bool)  # tests run in git
    assert report["command"] == "vigil bench engine --quick" and report["wall_s"] >= 0
