"""Markdown pieces the generated pages share."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

GENERATED_NOTE = ("!!! info \"Generated\"\n    This page is generated from {source} when the site is built; "
                  "edit that, not the page.\n")


def cell(text: object) -> str:
    """Text for a table cell: one line, pipes escaped."""
    return re.sub(r"\s+", " ", str(text)).replace("|", "\\|").strip()


def code(text: object) -> str:
    """Inline code that survives any backticks inside it."""
    text = str(text)
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def anchor(text: str) -> str:
    """An explicit heading id (attr_list), stable whatever the heading says."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def shown(value):
    """A default as a user sees it: a path inside the checkout relative to it, not this
    machine's absolute path."""
    if isinstance(value, Path):
        return str(value.relative_to(ROOT)) if value.is_relative_to(ROOT) else str(value)
    if isinstance(value, (tuple, list)):
        return [shown(v) for v in value]
    return value
