"""The CLI reference: every command and sub-command of `vigil`, from the argparse parser
the command itself builds (entry-point commands such as `vigil bench` included)."""

from __future__ import annotations

import argparse
import os
from unittest import mock

from tools.docs.markdown import GENERATED_NOTE, anchor, code, shown, table


def commands(parser: argparse.ArgumentParser, prog: str = "vigil") -> list[tuple[str, argparse.ArgumentParser]]:
    """(`vigil streams add`, its parser) for the root and every sub-command, depth first."""
    out = [(prog, parser)]
    for action in parser._actions:  # argparse keeps its sub-parsers nowhere public
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += commands(sub, f"{prog} {name}")
    return out


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions
            if not isinstance(a, (argparse._SubParsersAction, argparse._HelpAction))]


def help_text(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    if text == argparse.SUPPRESS:
        return ""
    try:
        return text % {**vars(action), "prog": prog}
    except (KeyError, TypeError, ValueError):
        return text


def default_text(action: argparse.Action) -> str:
    if action.option_strings and action.default not in (None, False, argparse.SUPPRESS) \
            and not isinstance(action, (argparse._StoreTrueAction, argparse._VersionAction)):
        return code(shown(action.default))
    return ""


def name_text(action: argparse.Action) -> str:
    if not action.option_strings:
        return code(action.metavar or action.dest)
    metavar = ""
    if action.nargs != 0:
        metavar = " " + (action.metavar if isinstance(action.metavar, str) else action.dest.upper())
    return ", ".join(code(f"{s}{metavar}") for s in action.option_strings)


def choices_text(action: argparse.Action) -> str:
    return " | ".join(code(c) for c in action.choices) if action.choices and \
        not isinstance(action, argparse._SubParsersAction) else ""


def command_section(prog: str, parser: argparse.ArgumentParser) -> str:
    depth = prog.count(" ")
    out = [f"{'#' * min(depth + 2, 4)} {prog} {{#{anchor(prog)}}}\n"]
    if parser.description:
        out.append(" ".join(parser.description.split()) + "\n")
    out.append("```text\n" + parser.format_usage().strip() + "\n```\n")
    rows = [[name_text(a), choices_text(a), default_text(a), help_text(a, prog)] for a in options(parser)]
    if rows:
        out.append(table(["argument", "choices", "default", "description"], rows))
    if parser.epilog:  # what --help adds below the options (`vigil apps add`: the built-in apps)
        out.append("```text\n" + parser.epilog.strip() + "\n```\n")
    return "\n".join(out)


def cli_page(parser: argparse.ArgumentParser) -> str:
    found = commands(parser)
    out = ["# CLI\n", GENERATED_NOTE.format(source="the parser `vigil` builds (cli/)"),
           "Every command takes `--help`. Commands that talk to a server find it through "
           "`--url` (before the command or after it), else `$VIGIL_URL`, else http://127.0.0.1:8080; "
           "their `list` commands print tables, and `--json` the API's answer.\n",
           "\n".join(f"- [{code(prog)}](#{anchor(prog)})" for prog, _ in found[1:]) + "\n"]
    with mock.patch.dict(os.environ, {"COLUMNS": "100"}):  # argparse wraps usage to the terminal's width
        out += [command_section(prog, p) for prog, p in found]
    return "\n".join(out)
