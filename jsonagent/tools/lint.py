"""`jsonagent tools lint`: what a spec gets wrong even when it loads.

Each finding is one line, `file[i] (name): /pointer: what and how to fix it`. Checks:
missing descriptions; names OpenAI rejects; schemas OpenAI's strict mode cannot use (for
specs that say `"strict": true`, or every spec with strict=True); enum values that do not
match their type; defaults that do not validate against their own schema.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

from ..errors import SpecError, Unreadable, read_text
from .schema import json_pointer, json_type, validator
from .specs import ToolSpec

OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# Keywords OpenAI's strict mode refuses (its "supported schemas" list leaves them out).
_STRICT_UNSUPPORTED = ("allOf", "not", "if", "then", "else", "dependentRequired",
                       "dependentSchemas", "patternProperties", "unevaluatedProperties",
                       "unevaluatedItems", "propertyNames", "contains", "minLength",
                       "maxLength", "minProperties", "maxProperties", "uniqueItems")
_TYPE_OK = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def spec_paths(paths: list[Path]) -> list[Path]:
    """Files as given; directories searched recursively for *.json, skipping JSON Schema
    documents such as meta_schema.json."""
    out: list[Path] = []
    for path in paths:
        if not path.is_dir():
            out.append(path)
            continue
        for f in sorted(path.rglob("*.json")):
            try:
                data = json.loads(read_text(f, Unreadable))
            except (Unreadable, ValueError):
                data = None
            if not (isinstance(data, dict) and "$schema" in data):
                out.append(f)
    return out


def lint_file(path: Path, strict: bool = False) -> list[str]:
    try:
        data = json.loads(read_text(path, Unreadable))
    except json.JSONDecodeError as exc:
        raise Unreadable(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    if isinstance(data, dict) and "tools" in data:
        data = data["tools"]
    items = data if isinstance(data, list) else [data]
    findings: list[str] = []
    for i, item in enumerate(items):
        origin = f"{path}[{i}]"
        try:
            spec = ToolSpec.from_dict(item, origin=origin)
        except SpecError as exc:
            findings.append(str(exc))
            continue
        raw = item.get("function", item) if isinstance(item, dict) else {}
        findings += [f"{origin} ({spec.name}): {f}" for f in lint_spec(
            spec, strict=strict or raw.get("strict") is True)]
    return findings


def lint_spec(spec: ToolSpec, strict: bool = False) -> list[str]:
    out: list[str] = []
    if not OPENAI_NAME.match(spec.name):
        fixed = re.sub(r"[^a-zA-Z0-9_-]", "_", spec.name)[:64]
        out.append(f"/name: OpenAI rejects {spec.name!r} (it allows ^[a-zA-Z0-9_-]{{1,64}}$); "
                   f"try {fixed!r}")
    if not spec.description.strip():
        out.append("/description: missing; the model picks tools by their description")
    params = spec.parameters
    root = validator(params)  # a default beside a $ref (a recursive model's) needs the root
    for pointer, schema, name in _properties(params, "/parameters"):
        if isinstance(schema, dict) and not schema.get("description") and "$ref" not in schema:
            out.append(f"{pointer}: parameter {name!r} has no description")
    for pointer, schema in _schemas(params, "/parameters"):
        out += [f"{pointer}: {m}" for m in _enum_and_default(schema, root)]
        if strict:
            out += [f"{pointer}: strict mode: {m}" for m in _strict(schema, pointer == "/parameters")]
    return out


def _schemas(node: Any, pointer: str) -> Iterator[tuple[str, dict]]:
    """Every subschema with its JSON pointer."""
    if not isinstance(node, dict):
        return
    yield pointer, node
    for key in ("items", "additionalProperties", "not", "if", "then", "else", "contains"):
        if isinstance(node.get(key), dict):
            yield from _schemas(node[key], f"{pointer}/{key}")
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for i, sub in enumerate(node.get(key) or []):
            yield from _schemas(sub, f"{pointer}/{key}/{i}")
    for key in ("properties", "$defs", "patternProperties"):
        for name, sub in (node.get(key) or {}).items():
            yield from _schemas(sub, f"{pointer}/{key}{json_pointer([name])}")


def _properties(node: Any, pointer: str) -> Iterator[tuple[str, Any, str]]:
    for p, schema in _schemas(node, pointer):
        for name, sub in (schema.get("properties") or {}).items():
            yield f"{p}/properties{json_pointer([name])}", sub, name


def _enum_and_default(schema: dict, root) -> list[str]:
    out = []
    types = schema.get("type")
    types = [types] if isinstance(types, str) else types if isinstance(types, list) else None
    if types and isinstance(schema.get("enum"), list):
        for value in schema["enum"]:
            if not any(_TYPE_OK.get(t, lambda v: True)(value) for t in types):
                out.append(f"enum value {json.dumps(value)} is {json_type(value)}, not "
                           f"{' or '.join(types)}")
    if "default" in schema:
        rest = {k: v for k, v in schema.items() if k not in ("default", "description", "title")}
        errors = list(root.evolve(schema=rest).iter_errors(schema["default"]))
        if errors:
            out.append(f"default {json.dumps(schema['default'])} does not fit its own schema: "
                       f"{errors[0].message}")
    return out


def _strict(schema: dict, root: bool) -> list[str]:
    out = []
    if root and schema.get("type") != "object":
        out.append("the parameters must be an object schema")
    for key in _STRICT_UNSUPPORTED:
        if key in schema:
            out.append(f"{key!r} is not supported; drop it or describe the rule in words")
    is_object = schema.get("type") == "object" or "properties" in schema
    if is_object:
        if schema.get("additionalProperties") is not False:
            out.append('every object needs "additionalProperties": false')
        props = list(schema.get("properties") or {})
        missing = [p for p in props if p not in (schema.get("required") or [])]
        if missing:
            out.append(f"every property must be required; {', '.join(missing)} "
                       "is optional (make it required and nullable: \"type\": [..., \"null\"])")
    return out
