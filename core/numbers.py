"""Integers in options parsed from JSON or YAML, for models that are strict (no `true`
for 1, no `"5"` for 5): JSON Schema's `integer` is any number with no fraction, so
`5.0` is the integer 5, as a client that writes every number as a float sends it."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field


def _whole(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def json_int(**bounds: int) -> Any:
    """`int` with `bounds` (ge, le, ...). The bounds go before the validator: that way
    pydantic writes them into the JSON schema as minimum and maximum."""
    return Annotated[int, Field(strict=True, **bounds), BeforeValidator(_whole)]
