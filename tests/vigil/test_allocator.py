"""The allocator choice (vigil.allocator): pure logic here; the served process itself in
tests/vigil/test_server.py."""

from __future__ import annotations

import pytest

from vigil import allocator
from vigil.allocator import AllocatorError, preload, reexec_for

LIB = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


@pytest.fixture
def installed(monkeypatch):
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: LIB)


@pytest.fixture
def missing(monkeypatch):
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: None)


def test_auto_preloads_jemalloc_and_keeps_what_was_preloaded(installed):
    assert preload("auto", "") == LIB
    assert preload("auto", "/opt/libfoo.so") == f"{LIB}:/opt/libfoo.so"


def test_nothing_is_re_executed_twice_or_against_the_users_choice(installed):
    assert preload("auto", LIB) is None  # already running under it
    assert preload("system", "") is None


def test_jemalloc_asked_for_but_missing_is_one_clear_error(missing):
    assert preload("auto", "") is None
    with pytest.raises(AllocatorError, match="apt-get install libjemalloc2"):
        preload("jemalloc", "")
    with pytest.raises(AllocatorError, match="auto, jemalloc, system; was 'tcmalloc'"):
        preload("tcmalloc", "")


def test_only_the_commands_that_run_models_re_execute(installed, monkeypatch):
    calls = []
    monkeypatch.setattr(allocator.os, "execve", lambda *a: calls.append(a))
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv("VIGIL_ALLOCATOR", raising=False)
    for argv in ([], ["streams", "list"], ["--help"]):
        reexec_for(argv)
    assert calls == []
    reexec_for(["serve", "--port", "9000"])
    assert len(calls) == 1 and calls[0][2]["LD_PRELOAD"] == LIB
    monkeypatch.setenv("VIGIL_ALLOCATOR", "nonsense")
    with pytest.raises(SystemExit, match="VIGIL_ALLOCATOR must be one of"):
        reexec_for(["run", "clip.mp4"])


def test_large_allocations_stay_in_the_arenas_and_a_users_malloc_conf_wins():
    from vigil.allocator import environment

    assert environment(LIB, {"PATH": "/bin"}) == {"PATH": "/bin", "LD_PRELOAD": LIB,
                                                  "MALLOC_CONF": "oversize_threshold:0"}
    assert environment(LIB, {"MALLOC_CONF": "narenas:2"})["MALLOC_CONF"] == "oversize_threshold:0,narenas:2"


def test_the_server_warns_when_it_runs_models_without_jemalloc(monkeypatch):
    monkeypatch.setattr(allocator, "in_use", lambda: "system")
    monkeypatch.delenv(allocator.ENV, raising=False)
    assert "apt-get install libjemalloc2" in allocator.advice()
    monkeypatch.setenv(allocator.ENV, "system")  # asked for: nothing to say
    assert allocator.advice() is None
    monkeypatch.setattr(allocator, "in_use", lambda: "jemalloc")
    monkeypatch.delenv(allocator.ENV)
    assert allocator.advice() is None


def test_the_allocator_in_use_is_read_from_the_process_itself():
    import os
    from pathlib import Path

    mapped = "libjemalloc" in Path("/proc/self/maps").read_text()
    assert allocator.in_use() == ("jemalloc" if mapped else "system")
    assert allocator.in_use(os.getpid()) == allocator.in_use()  # another process's, by pid (the serve bench)
    assert allocator.in_use(2**22 + 1) == "unknown"  # past Linux's pid limit: no such process
