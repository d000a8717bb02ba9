"""The suite's own rules (tests/support/tiers.py, tests/support/processes.py): how tests
are grouped onto workers and ordered, and that a command's time limit stays under
pytest's."""

from __future__ import annotations

import sys
import tomllib
from types import SimpleNamespace

import pytest

from support.processes import ROOT, TEST_TIMEOUT_S, run_command
from support.tiers import longest_groups_first, shared_process_fixture


def item(nodeid: str, fixtures: dict[str, str], module: str = "tests.test_x", group: str | None = None):
    """A collected test as the tiers see it: `fixtures` maps a fixture's name to its scope."""
    defs = {name: [SimpleNamespace(scope=scope, baseid="tests/vigil")] for name, scope in fixtures.items()}
    marker = SimpleNamespace(args=(group,)) if group else None
    return SimpleNamespace(nodeid=nodeid, fixturenames=list(fixtures),
                           _fixtureinfo=SimpleNamespace(name2fixturedefs=defs), module=SimpleNamespace(__name__=module),
                           get_closest_marker=lambda name: marker)


@pytest.mark.parametrize("fixtures, group", [
    ({"tmp_path": "function"}, None),  # starts nothing
    ({"server": "session", "api": "function"}, "server:tests/vigil"),  # one server for the whole session
    ({"broker": "function"}, None),  # a process of its own: any worker
    ({"cluster": "module"}, "tests.test_x"),  # the module's cluster: its tests on one worker
    ({"cluster": "module", "guarded": "session"}, "guarded:tests/vigil"),  # the wider scope wins
])
def test_a_test_is_grouped_by_the_widest_shared_process_it_uses(fixtures, group):
    assert shared_process_fixture(item("t", fixtures)) == group


def test_groups_run_longest_first_and_keep_their_own_order():
    items = [item("a1", {}, group="a"), item("lone", {}), item("b1", {}, group="b"), item("a2", {}, group="a"),
             item("new", {})]
    durations = {"a1": 1.0, "a2": 2.0, "lone": 5.0, "b1": 4.0}  # "new": not timed yet, so the median (4.0)
    longest_groups_first(items, durations)
    assert [i.nodeid for i in items] == ["lone", "b1", "new", "a1", "a2"]  # 5, 4, 4 (after b1), 3
    longest_groups_first(items, {})  # nothing recorded: the order is left alone
    assert [i.nodeid for i in items] == ["lone", "b1", "new", "a1", "a2"]


def test_a_commands_limit_is_under_pytests_own():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["pytest"]["ini_options"]["timeout"] == TEST_TIMEOUT_S
    with pytest.raises(ValueError, match="timeout_s must be in"):
        run_command(["true"], TEST_TIMEOUT_S)


@pytest.mark.slow
def test_a_command_past_its_limit_fails_naming_itself_and_its_output():
    with pytest.raises(pytest.fail.Exception) as failed:
        run_command([sys.executable, "-c", "import time; print('halfway', flush=True); time.sleep(30)"], 1.0)
    assert "still running after 1.0 s" in str(failed.value) and "halfway" in str(failed.value)
    assert "time.sleep(30)" in str(failed.value)


@pytest.mark.slow
def test_an_unmarked_test_that_starts_a_process_fails_and_a_marked_one_passes(pytester):
    pytester.makeconftest(f"""
import sys
sys.path.insert(0, {str(ROOT / "tests")!r})
from support import tiers

def pytest_addoption(parser):
    tiers.add_options(parser)

def pytest_configure(config):
    tiers.register(config)
""")
    pytester.makepyfile(test_spawn="""
import subprocess, sys
import pytest

def test_unmarked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

@pytest.mark.slow
def test_marked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_in_process():
    assert sum(range(4)) == 6
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*_ test_unmarked _*", "started a process (*-c pass) but is not marked slow*"])
