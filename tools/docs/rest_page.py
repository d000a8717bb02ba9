"""The REST reference, from the OpenAPI schema the server serves at /openapi.json: every
route with its parameters, body and answers, then every schema with its fields."""

from __future__ import annotations

import json

from tools.docs.markdown import GENERATED_NOTE, anchor, code, table

METHODS = ("get", "post", "put", "patch", "delete")
BOUND_KEYS = (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<"),
              ("minLength", "at least"), ("maxLength", "at most"), ("minItems", "at least"),
              ("maxItems", "at most"), ("pattern", "matches"))


def schema_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def type_text(schema: dict) -> str:
    if "$ref" in schema:
        name = schema_name(schema["$ref"])
        return f"[{name}](#{anchor('schema-' + name)})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema and schema.get("type") is None:
            return " | ".join(type_text(s) for s in schema[key])
    if "enum" in schema:
        return " | ".join(code(json.dumps(v)) for v in schema["enum"])
    if "const" in schema:
        return code(json.dumps(schema["const"]))
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items") or schema.get("prefixItems")
        if isinstance(items, list):
            return "[" + ", ".join(type_text(s) for s in items) + "]"
        return f"list of {type_text(items)}" if items else "list"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of string to {type_text(schema['additionalProperties'])}"
    if isinstance(kind, list):
        return " | ".join(kind)
    return kind or "any"


def bounds_text(schema: dict) -> str:
    found = [f"{word} {code(schema[key]) if key == 'pattern' else schema[key]}"
             for key, word in BOUND_KEYS if key in schema]
    for key in ("anyOf", "oneOf"):
        found += [b for s in schema.get(key, ()) if (b := bounds_text(s))]
    return ", ".join(found)


def operation_section(path: str, method: str, op: dict) -> str:
    title = f"{method.upper()} {path}"
    out = [f"### {code(title)} {{#{anchor(title)}}}\n", op.get("summary", "") + "\n"]
    if op.get("description"):
        out.append(" ".join(op["description"].split()) + "\n")
    params = op.get("parameters", [])
    if params:
        rows = [[code(p["name"]), p["in"], type_text(p.get("schema", {})), "yes" if p.get("required") else "",
                 bounds_text(p.get("schema", {})), p.get("description", "")] for p in params]
        out.append(table(["parameter", "in", "type", "required", "bounds", "description"], rows))
    body = op.get("requestBody")
    if body:
        kinds = [f"{code(media)}: {type_text(spec.get('schema', {}))}" for media, spec in body.get("content", {}).items()]
        out.append("Body: " + "; ".join(kinds) + "\n")
    ok = sorted(code for code in op.get("responses", {}) if code.startswith("2"))
    if ok:
        out.append("Answers " + ", ".join(ok) + " on success.\n")
    return "\n".join(out)


def schema_section(name: str, schema: dict) -> str:
    out = [f"### {name} {{#{anchor('schema-' + name)}}}\n"]
    if schema.get("description"):
        out.append(" ".join(schema["description"].split()) + "\n")
    required = set(schema.get("required", ()))
    rows = [[code(prop), type_text(spec), "yes" if prop in required else "",
             code(json.dumps(spec["default"])) if "default" in spec else "", bounds_text(spec),
             spec.get("description", "")] for prop, spec in schema.get("properties", {}).items()]
    if rows:
        out.append(table(["field", "type", "required", "default", "bounds", "description"], rows))
    return "\n".join(out)


def operations(openapi: dict) -> list[tuple[str, str, dict]]:
    return [(path, method, item[method]) for path, item in openapi["paths"].items()
            for method in METHODS if method in item]


def rest_page(openapi: dict) -> str:
    out = ["# REST API\n", GENERATED_NOTE.format(source="the server's OpenAPI schema"),
           "A running server serves the same schema at `/openapi.json` and an interactive page at `/docs`. "
           "Errors are `{\"detail\": \"...\"}`, a line per problem; the codes a route may answer are listed "
           "under [Errors](#errors).\n"]
    by_tag: dict[str, list] = {}
    for path, method, op in operations(openapi):
        by_tag.setdefault((op.get("tags") or ["other"])[0], []).append((path, method, op))
    for tag, ops in by_tag.items():
        out.append(f"## {tag.capitalize()} {{#{anchor('tag-' + tag)}}}\n")
        out += [operation_section(*o) for o in ops]
    out.append("## Errors {#errors}\n")
    errors = {}
    for _, _, op in operations(openapi):
        for status, answer in op.get("responses", {}).items():
            if status[0] in "45" and status != "422":
                errors.setdefault(status, answer.get("description", ""))
    errors.setdefault("422", "invalid field: the message names it")
    out.append(table(["status", "meaning"], [[s, errors[s]] for s in sorted(errors)]))
    out.append("## Schemas {#schemas}\n")
    for name, schema in openapi.get("components", {}).get("schemas", {}).items():
        out.append(schema_section(name, schema))
    return "\n".join(out)
