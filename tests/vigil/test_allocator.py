"""The allocator choice (vigil.allocator): pure logic here; the served process itself in
tests/vigil/test_server.py."""

from __future__ import annotations

import pytest

from vigil import allocator
from vigil.allocator import AllocatorError, preload, reexec_for

LIB = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
MI = "/venv/lib/python3.11/site-packages/cmeel.prefix/lib/libmimalloc.so.3"


def _installed(monkeypatch, jemalloc: str | None, mimalloc: str | None) -> None:
    monkeypatch.setitem(allocator.FINDERS, "jemalloc", lambda: jemalloc)
    monkeypatch.setitem(allocator.FINDERS, "mimalloc", lambda: mimalloc)


@pytest.fixture
def installed(monkeypatch):
    _installed(monkeypatch, LIB, MI)


@pytest.fixture
def missing(monkeypatch):
    _installed(monkeypatch, None, None)


def test_auto_preloads_jemalloc_and_keeps_what_was_preloaded(installed):
    assert preload("auto", "") == ("jemalloc", LIB)
    assert preload("auto", "/opt/libfoo.so") == ("jemalloc", f"{LIB}:/opt/libfoo.so")
    assert preload("mimalloc", "") == ("mimalloc", MI)


def test_a_pip_only_install_gets_mimalloc_from_its_wheel(monkeypatch):
    _installed(monkeypatch, None, MI)
    assert preload("auto", "") == ("mimalloc", MI)


def test_the_wheels_mimalloc_is_found_where_pip_put_it():
    import sysconfig
    from pathlib import Path

    found = allocator.find_mimalloc()
    wheel = Path(sysconfig.get_paths()["purelib"]) / allocator.MIMALLOC_IN_WHEEL
    assert found == (str(wheel) if wheel.is_file() else None)


def test_nothing_is_re_executed_twice_or_against_the_users_choice(installed):
    assert preload("auto", LIB) is None  # already running under one
    assert preload("auto", f"/opt/libfoo.so:{MI}") is None
    assert preload("system", "") is None


def test_an_allocator_asked_for_but_missing_is_one_clear_error(missing):
    assert preload("auto", "") is None
    with pytest.raises(AllocatorError, match="apt-get install libjemalloc2"):
        preload("jemalloc", "")
    with pytest.raises(AllocatorError, match="pip install cmeel-mimalloc"):
        preload("mimalloc", "")
    with pytest.raises(AllocatorError, match="auto, jemalloc, mimalloc, system; was 'tcmalloc'"):
        preload("tcmalloc", "")


def test_only_the_commands_that_run_models_re_execute(installed, monkeypatch):
    calls = []
    monkeypatch.setattr(allocator.os, "execve", lambda *a: calls.append(a))
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv("VIGIL_ALLOCATOR", raising=False)
    for argv in ([], ["streams", "list"], ["--help"], ["--url", "http://a:1", "streams", "list"], ["--url", "run"]):
        reexec_for(argv)
    assert calls == []
    reexec_for(["--url", "http://a:1", "--api-key=k", "run", "clip.mp4"])
    assert len(calls) == 1
    calls.clear()
    reexec_for(["serve", "--port", "9000"])
    assert len(calls) == 1 and calls[0][2]["LD_PRELOAD"] == LIB and calls[0][2]["MALLOC_CONF"]
    monkeypatch.setenv("VIGIL_ALLOCATOR", "nonsense")
    with pytest.raises(SystemExit, match="VIGIL_ALLOCATOR must be one of"):
        reexec_for(["run", "clip.mp4"])


def test_large_allocations_stay_in_the_arenas_and_a_users_settings_win():
    from vigil.allocator import environment

    assert environment("jemalloc", LIB, {"PATH": "/bin"}) == {"PATH": "/bin", "LD_PRELOAD": LIB,
                                                              "MALLOC_CONF": "oversize_threshold:0"}
    assert environment("jemalloc", LIB, {"MALLOC_CONF": "narenas:2"})["MALLOC_CONF"] == \
        "oversize_threshold:0,narenas:2"
    assert environment("mimalloc", MI, {}) == {"LD_PRELOAD": MI, "MIMALLOC_PURGE_DELAY": "10000"}
    assert environment("mimalloc", MI, {"MIMALLOC_PURGE_DELAY": "50"})["MIMALLOC_PURGE_DELAY"] == "50"


def test_the_server_warns_when_it_runs_models_without_jemalloc(monkeypatch):
    monkeypatch.setattr(allocator, "in_use", lambda: "system")
    monkeypatch.delenv(allocator.ENV, raising=False)
    assert "pip install cmeel-mimalloc" in allocator.advice()
    monkeypatch.setenv(allocator.ENV, "system")  # asked for: nothing to say
    assert allocator.advice() is None
    monkeypatch.setattr(allocator, "in_use", lambda: "jemalloc")
    monkeypatch.delenv(allocator.ENV)
    assert allocator.advice() is None


def test_the_allocator_in_use_is_read_from_the_process_itself():
    import os
    from pathlib import Path

    maps = Path("/proc/self/maps").read_text()
    mapped = "jemalloc" if "libjemalloc" in maps else "mimalloc" if "libmimalloc" in maps else "system"
    assert allocator.in_use() == mapped
    assert allocator.in_use(os.getpid()) == allocator.in_use()  # another process's, by pid (the serve bench)
    assert allocator.in_use(2**22 + 1) == "unknown"  # past Linux's pid limit: no such process
