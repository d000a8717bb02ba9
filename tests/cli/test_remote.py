"""The remote commands' help: `vigil apps add --help` names the built-in apps."""

from __future__ import annotations

import argparse

from apps.spec import builtin_names, load_spec
from cli.main import build_parser


def subparser(parser: argparse.ArgumentParser, *names: str) -> argparse.ArgumentParser:
    for name in names:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def test_apps_add_help_lists_every_built_in_app_with_its_detector():
    text = subparser(build_parser(), "apps", "add").format_help()
    assert "built-in apps" in text
    for name in builtin_names():
        spec = load_spec(name)
        line = next((line for line in text.splitlines() if line.split()[:1] == [name]), None)
        assert line is not None, f"{name} is not in vigil apps add --help"
        assert f"{spec.detector}:" in line
