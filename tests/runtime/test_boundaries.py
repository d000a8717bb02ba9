"""Both sides of each boundary the cluster swaps (runtime/boundaries.py) implement its
protocol: every method with parameters a caller of the protocol can pass, and every
attribute, on the class or set by its constructor."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest

from apps.app import App
from cluster.app_host import ActorApp
from cluster.front import ClusterEngine
from cluster.ingest import RemoteStream
from engine.engine import Engine
from runtime import boundaries
from runtime.boundaries import EngineBoundary, EngineVerbs, RunningApp, Stream
from streams.live import ManagedStream

ABSENT = object()
SIDES = {Stream: (ManagedStream, RemoteStream), RunningApp: (App, ActorApp), EngineVerbs: (Engine, ClusterEngine),
         EngineBoundary: (Engine, ClusterEngine)}


def members(protocol) -> tuple[dict, set]:
    """(method name -> function, attribute names) the protocol declares."""
    methods = {name: value for name, value in vars(protocol).items()
               if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))}
    attributes = set(typing.get_type_hints(protocol, vars(boundaries))) - set(methods)
    return methods, attributes


def assigned(cls) -> set[str]:
    """Attributes the class's constructors (its own and its bases') set on `self`, or its
    dataclass fields."""
    names = set()
    for klass in cls.__mro__:
        if dataclasses.is_dataclass(klass):
            names |= {f.name for f in dataclasses.fields(klass)}
            continue  # its __init__ is generated from them
        init = vars(klass).get("__init__")
        if init is not None and inspect.isfunction(init):
            source = inspect.getsource(init)
            names |= {line.split("self.", 1)[1].split("=")[0].split(":")[0].strip()
                      for line in source.splitlines() if line.strip().startswith("self.") and "=" in line}
    return names


def accepts(implementation, declared) -> str | None:
    """Why `implementation` cannot be called as `declared` is (None: it can)."""
    want = list(inspect.signature(declared).parameters.values())[1:]
    have = list(inspect.signature(implementation).parameters.values())[1:]
    by_name = {p.name: p for p in have}
    if any(p.kind is p.VAR_KEYWORD for p in have):
        return None
    for i, p in enumerate(want):
        mine = by_name.get(p.name)
        if mine is None:
            return f"no parameter {p.name!r}"
        if i < len(have) and have[i].name != p.name and p.kind is p.POSITIONAL_OR_KEYWORD:
            return f"parameter {p.name!r} is not in position {i}"
        if p.default is not p.empty and mine.default is p.empty:
            return f"parameter {p.name!r} has no default"
    extra = [p.name for p in have if p.name not in {w.name for w in want} and p.default is p.empty
             and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return f"required parameters {extra} the protocol does not pass" if extra else None


@pytest.mark.parametrize("protocol,cls", [(p, c) for p, sides in SIDES.items() for c in sides],
                         ids=lambda x: x.__name__)
def test_each_side_implements_its_boundary(protocol, cls):
    methods, attributes = members(protocol)
    assert methods and attributes, f"{protocol.__name__} declares nothing"
    for name, declared in methods.items():
        mine = inspect.getattr_static(cls, name, ABSENT)
        if isinstance(declared, property):  # read as an attribute: any kind of one will do
            assert mine is not ABSENT or name in assigned(cls), f"{cls.__name__} has no {name}"
            continue
        assert mine is not ABSENT, f"{cls.__name__} has no {name}"
        problem = accepts(mine, declared)
        assert problem is None, f"{cls.__name__}.{name}: {problem}"
    missing = {a for a in attributes if inspect.getattr_static(cls, a, ABSENT) is ABSENT} - assigned(cls)
    assert not missing, f"{cls.__name__} never sets {sorted(missing)}"


def test_a_side_missing_a_verb_is_caught():
    class Broken:
        def __init__(self):
            self.name, self.url, self.paced, self.stats = "s", "u", False, None

        def frames(self, poll_s: float):  # no default: the worker calls frames()
            return iter(())

    methods, _ = members(Stream)
    assert accepts(Broken.frames, methods["frames"]) == "required parameters ['poll_s'] the protocol does not pass"
    assert inspect.getattr_static(Broken, "set_demand", ABSENT) is ABSENT
