"""The suite's tiers, and how its tests share the workers (a pytest plugin that
tests/conftest.py registers).

- `slow`: a test that starts a process (a server, a browser, a broker, a cluster, a
  CLI) or runs whole clips. A test that uses a fixture named in `SLOW_FIXTURES` is
  marked here; a test that starts a process itself carries the mark. An unmarked test
  that starts a process fails, naming the command, so `make test-fast` stays free of
  them.
- `exclusive` (also slow): a test that needs the machine to itself, because it measures
  the cores or loads them all; `make test` runs these after the rest, one at a time.
- `xdist_group`: a test that uses a process-starting fixture of module or session
  scope is grouped by that fixture, so that under `--dist loadgroup` the tests sharing
  one server run on one worker, which starts it once.
- A session fixture that starts a process is finished after the last test (in a row)
  that uses it, not at the end of the session, so its server stops loading the cores.
- Order: groups and lone tests run longest first, by `tests/durations.json` (each
  test's seconds in a recorded run), so a run does not end waiting on one long chain.
  `pytest --store-durations` rewrites that file from the run it ends.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
from pathlib import Path

import pytest

# Fixtures that start a process (or a cluster of them): whatever uses one is slow.
SLOW_FIXTURES = frozenset({
    "server", "guarded", "api", "browser", "broker", "measured", "yolo_server", "served", "served_families", "routed",
    "cluster", "triton", "small_disk", "recorded", "npm",
})
DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"


def add_options(parser) -> None:
    parser.addoption("--store-durations", action="store_true",
                     help=f"write each test's duration in this run to {DURATIONS.name} (the order of later runs)")


class Tiers:
    def __init__(self, config) -> None:
        self.config = config
        self.started: list[str] = []  # commands started by the test now running
        self.durations: dict[str, float] = {}

    # -- collection: marks and order --------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
    def pytest_collection_modifyitems(self, items) -> None:
        for item in items:
            if set(item.fixturenames) & SLOW_FIXTURES or item.get_closest_marker("exclusive"):
                item.add_marker(pytest.mark.slow)
            group = shared_process_fixture(item)
            if group is not None and item.get_closest_marker("xdist_group") is None:
                item.add_marker(pytest.mark.xdist_group(group))
        longest_groups_first(items, recorded_durations())

    # -- a test that starts a process is slow ---------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.started.clear()
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if call.when == "call" and report.passed and self.started and item.get_closest_marker("slow") is None:
            report.outcome = "failed"
            report.longrepr = (f"started a process ({self.started[0]}) but is not marked slow: mark it "
                               "@pytest.mark.slow, or add the fixture that starts it to SLOW_FIXTURES "
                               "(tests/support/tiers.py)")
        return report

    # -- a shared server stops once the last test that uses it is done --------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item, nextitem):
        result = yield
        later = set(nextitem.fixturenames) if nextitem is not None else set()
        for name, fixturedef in process_fixtures(item):
            if fixturedef.scope == "session" and name not in later:  # pytest would keep it running to the end
                fixturedef.finish(item._request)
        return result

    # -- durations, for the order of the next run ---------------------------------------------------
    def pytest_runtest_logreport(self, report) -> None:
        nodeid = report.nodeid  # under --dist loadgroup, "...@group"
        at = nodeid.find("@", nodeid.rfind("]") + 1)
        nodeid = nodeid[:at] if at >= 0 else nodeid
        self.durations[nodeid] = self.durations.get(nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self, session) -> None:
        if self.config.getoption("store_durations") and not hasattr(self.config, "workerinput"):
            kept = recorded_durations()
            kept.update({k: round(v, 2) for k, v in self.durations.items()})
            DURATIONS.write_text(json.dumps(dict(sorted(kept.items())), indent=0) + "\n")


def process_fixtures(item):
    """(name, definition) of each fixture in SLOW_FIXTURES that `item` uses, directly
    or through another fixture: the definition in force where `item` is."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return
    for name in item.fixturenames:
        defs = info.name2fixturedefs.get(name) if name in SLOW_FIXTURES else None
        if defs:
            yield name, defs[-1]


def shared_process_fixture(item) -> str | None:
    """A group for the process-starting fixture of module or session scope that `item`
    uses: a session one by its name, a module one by the module."""
    group = None
    for name, fixturedef in process_fixtures(item):
        if fixturedef.scope == "session":
            return f"{name}:{fixturedef.baseid or '.'}"  # no "@": xdist splits the group off at the last
        if fixturedef.scope in ("package", "module", "class"):
            group = item.module.__name__
    return group


def recorded_durations() -> dict[str, float]:
    try:
        return json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}


def longest_groups_first(items: list, durations: dict[str, float]) -> None:
    """Sorts `items` in place: groups (and lone tests) by their summed recorded seconds,
    longest first; a test not recorded counts as the median, and the collection's own
    order is kept within a group and between equals."""
    if not durations:
        return
    median = sorted(durations.values())[len(durations) // 2]
    groups = {id(item): group_of(item) for item in items}
    totals: dict[str, float] = {}
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        g = groups[id(item)]
        totals[g] = totals.get(g, 0.0) + durations.get(item.nodeid, median)
        first.setdefault(g, i)
    # a stable sort: the collection's order stays within a group
    items.sort(key=lambda it: (-totals[groups[id(it)]], first[groups[id(it)]]))


def group_of(item) -> str:
    marker = item.get_closest_marker("xdist_group")
    return str(marker.args[0]) if marker and marker.args else item.nodeid


_original_execute_child = subprocess.Popen._execute_child


def register(config) -> None:
    # torch's first import of torch.cuda asks ldconfig where libdl is (cuda.pathfinder):
    # a process of the interpreter's, not of whichever test happens to import torch first
    importlib.import_module("torch.cuda")

    tiers = Tiers(config)
    config.pluginmanager.register(tiers, "vigil-tiers")

    def recording(popen, args, *rest, **kwargs):
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
        tiers.started.append(" ".join(map(str, argv))[:200])
        return _original_execute_child(popen, args, *rest, **kwargs)

    subprocess.Popen._execute_child = recording
    config.add_cleanup(lambda: setattr(subprocess.Popen, "_execute_child", _original_execute_child))
