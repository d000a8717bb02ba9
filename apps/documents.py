"""Documents a user sends (app specs, configs, request bodies) parsed with limits.

A few hundred bytes of YAML with nested aliases expand to millions of nodes (the
"billion laughs"), and `[[[[...` a hundred thousand deep exhausts Python's recursion.
So YAML aliases are refused outright (no spec needs them), and nesting is capped
before and after parsing: JSON's depth is measured on the raw bytes, which costs no
recursion, and both parsers' results are walked without recursion.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import yaml

MAX_DEPTH = 32  # no spec, config or request nests deeper than a dozen levels


class DocumentError(ValueError):
    """The document cannot be parsed, or breaks a limit; the message says which."""


class _NoAliasLoader(yaml.SafeLoader):
    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise DocumentError(f"YAML aliases (*name) are not accepted (line {mark.line + 1}); write the value out")
        return super().compose_node(parent, index)


def load_yaml(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """`yaml.safe_load` without aliases and with nesting at most `max_depth` deep."""
    try:
        data = yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise DocumentError(f"not valid YAML: {str(exc)[:300]}") from None
    except RecursionError:
        raise DocumentError(f"nested deeper than {max_depth} levels") from None
    check_depth(data, max_depth)
    return data


def json_depth(raw: bytes) -> int:
    """The deepest nesting of brackets in JSON text, strings skipped, in linear time and
    without parsing: a quote opens or closes a string unless an odd run of backslashes
    comes right before it. (A backslash outside a string is invalid JSON, and the parser
    stops there, before any bracket after it could count.)"""
    if not raw or (b"[" not in raw and b"{" not in raw):
        return 0
    a = np.frombuffer(raw, np.uint8)
    at = np.arange(len(a))
    last_plain = np.maximum.accumulate(np.where(a != 92, at, -1))  # the latest byte that is not a backslash
    backslashes_before = np.zeros(len(a), np.int64)
    backslashes_before[1:] = at[:-1] - last_plain[:-1]
    in_string = np.cumsum((a == 34) & (backslashes_before % 2 == 0)) % 2 == 1
    opens = ((a == 91) | (a == 123)) & ~in_string
    closes = ((a == 93) | (a == 125)) & ~in_string
    return int(np.cumsum(opens.astype(np.int32) - closes).max(initial=0))


def load_json(raw: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    raw = raw.encode() if isinstance(raw, str) else raw
    if json_depth(raw) > max_depth:
        raise DocumentError(f"nested deeper than {max_depth} levels")
    try:
        return json.loads(raw or b"null")
    except ValueError as exc:
        raise DocumentError(f"not valid JSON: {str(exc)[:300]}") from None
    except RecursionError:
        raise DocumentError(f"nested deeper than {max_depth} levels") from None


def check_depth(data: Any, max_depth: int = MAX_DEPTH) -> None:
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > max_depth:
                raise DocumentError(f"nested deeper than {max_depth} levels")
            stack += [(v, depth + 1) for v in (value.values() if isinstance(value, dict) else value)]
