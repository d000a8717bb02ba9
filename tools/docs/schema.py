"""A reference page for a pydantic model and the models inside it: a section per model,
named by where it sits in the document (`sinks.webhooks[]`), with a row per field: its
type, default, bounds and description."""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from tools.docs.markdown import GENERATED_NOTE, anchor, code, shown, table

BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"), ("min_length", "at least"),
          ("max_length", "at most"), ("pattern", "matches"))


@dataclass(frozen=True)
class Section:
    path: str  # where the model sits: "" for the root, "sinks.webhooks[]"
    model: type[BaseModel]


def _args(tp) -> tuple:
    return typing.get_args(tp)


def _is_union(tp) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def models_in(tp) -> list[tuple[type[BaseModel], bool]]:
    """The models an annotation holds, each with whether it is inside a collection."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [(tp, False)]
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return models_in(_args(tp)[0])
    inner = [m for a in _args(tp) for m in models_in(a)]
    many = origin in (list, tuple, dict, set, frozenset)
    return [(m, many or nested) for m, nested in inner]


def sections(root: type[BaseModel]) -> list[Section]:
    """The root and every model reachable from its fields, depth first, each once."""
    out: list[Section] = []
    seen: set[type] = set()

    def visit(path: str, model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.add(model)
        out.append(Section(path, model))
        for name, field in model.model_fields.items():
            for child, many in models_in(field.annotation):
                visit(f"{path}.{name}".lstrip(".") + ("[]" if many else ""), child)

    visit("", root)
    return out


def type_name(tp, links: dict[type, str]) -> str:
    if tp is type(None):
        return "null"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"[{links[tp]}](#{anchor(links[tp])})" if tp in links else tp.__name__
    origin, args = typing.get_origin(tp), _args(tp)
    if origin is typing.Annotated:
        return type_name(args[0], links)
    if _is_union(tp):
        return " | ".join(type_name(a, links) for a in args)
    if origin is typing.Literal:
        return " | ".join(code(json.dumps(a)) for a in args)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return f"list of {type_name(args[0], links)}"
    if origin is tuple:
        return "[" + ", ".join(type_name(a, links) for a in args) + "]"
    if origin in (list, set, frozenset):
        return f"list of {type_name(args[0], links)}" if args else "list"
    if origin is dict:
        return f"map of {type_name(args[0], links)} to {type_name(args[1], links)}" if args else "map"
    if tp is typing.Any:
        return "any"
    if isinstance(tp, type) and issubclass(tp, Path):
        return "path"
    return getattr(tp, "__name__", str(tp))


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()
        if isinstance(value, BaseModel):
            return "see below"
    else:
        value = field.default
    return code(json.dumps(shown(value), default=str))


def bounds_text(field: FieldInfo) -> str:
    found = []
    for meta in field.metadata:
        for attr, word in BOUNDS:
            value = getattr(meta, attr, None)
            if value is not None:
                found.append(f"{word} {code(value) if attr == 'pattern' else value}")
    return ", ".join(found)


def model_page(root: type[BaseModel], title: str, intro: str, source: str | None = None, level: int = 1) -> str:
    """The reference of `root` and the models in it: a page of its own (with the note that
    it is generated from `source`), or at `level` 2 a part of another page."""
    parts = sections(root)
    links = {s.model: s.path or title for s in parts}
    out = [f"{'#' * level} {title}" + (f" {{#{anchor(title)}}}" if level > 1 else "") + "\n"]
    if source is not None:
        out.append(GENERATED_NOTE.format(source=source))
    out.append(intro.strip() + "\n")
    for section in parts:
        if section.path:
            out.append(f"{'#' * (level + 1)} {code(section.path)} {{#{anchor(section.path)}}}\n")
        doc = (section.model.__doc__ or "").strip()
        if doc:
            out.append(" ".join(doc.split()) + "\n")
        rows = [[code(name), type_name(f.annotation, links), default_text(f), bounds_text(f), f.description or ""]
                for name, f in section.model.model_fields.items()]
        out.append(table(["field", "type", "default", "bounds", "description"], rows))
    return "\n".join(out)


__all__ = ["Section", "model_page", "sections"]
