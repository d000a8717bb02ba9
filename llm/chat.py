"""Chat prompts from the checkpoint's own `chat_template` (tokenizer_config.json),
rendered as transformers' `apply_chat_template` renders it: Jinja2 in an immutable
sandbox with `trim_blocks` and `lstrip_blocks`, the tokenizer's special tokens as
variables, `raise_exception` and `strftime_now`, and `add_generation_prompt` so the
prompt ends where the assistant's turn begins. The rendered text carries its own
special tokens (a BOS, turn markers), so it is encoded without adding more.

A checkpoint without a template (scene-lm is not a chat model) gets a plain
`role: content` join instead, and a single user message is its prompt as it is."""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache


class TemplateError(ValueError):
    """The checkpoint's chat template refused the conversation (its raise_exception)."""


def _raise(message: str):
    raise TemplateError(message)


def _tojson(value, indent=None, ensure_ascii=False, sort_keys=False):
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


@lru_cache(maxsize=8)
def _compiled(template: str):
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


def render(template: str, messages: list[dict], special_tokens: dict[str, str]) -> str:
    from jinja2.exceptions import TemplateError as JinjaError

    try:
        return _compiled(template).render(messages=messages, add_generation_prompt=True, **special_tokens)
    except TemplateError:
        raise
    except JinjaError as exc:
        raise TemplateError(f"the checkpoint's chat_template failed: {exc}") from None


def plain(messages: list[dict]) -> str:
    if len(messages) == 1 and messages[0]["role"] == "user":
        return messages[0]["content"]
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\nassistant:"
