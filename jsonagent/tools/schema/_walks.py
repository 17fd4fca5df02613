"""The walks over a schema that the rest of the package shares: Python type names mapped,
local $refs inlined, schemas cut short for the prompt; and how a JSON value, or a place in
one, is named in a message."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from ...errors import MissingRef

PYTHON_TYPES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "dict": "object",
    "list": "array",
    "tuple": "array",
    "any": None,
}

# Keywords whose value is a subschema, a list of them, or a map of them: the walk
# must not mistake a property *called* "type" for the keyword.
_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains",
        "propertyNames", "unevaluatedItems", "unevaluatedProperties")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def normalise(schema: Any) -> Any:
    """Map Python-flavoured type names to JSON Schema ones, everywhere a schema may nest."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if "type" in out:
        out.update(_map_type(out["type"]))
        if out.get("type") is None:
            del out["type"]
    for key in _ONE:
        if key in out:
            out[key] = normalise(out[key])
    for key in _MANY:
        if isinstance(out.get(key), list):
            out[key] = [normalise(s) for s in out[key]]
    for key in _MAP:
        if isinstance(out.get(key), dict):
            out[key] = {k: normalise(s) for k, s in out[key].items()}
    return out


def _map_type(t: Any) -> dict[str, Any]:
    if isinstance(t, list):
        mapped = [PYTHON_TYPES.get(x, x) if isinstance(x, str) else x for x in t]
        return {"type": None} if None in mapped else {"type": mapped}
    if not isinstance(t, str) or t not in PYTHON_TYPES:
        return {"type": t}
    return {"type": PYTHON_TYPES[t]}


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace local $refs by what they point to, so the schema can nest inside another one.
    A $ref is followed only where a schema is expected, as check_bounds follows it: a
    `default`, an `enum`, `examples` or an unknown keyword is data and is copied as it is (a
    ref bomb there was sized as data, and expanding it would write out what was never
    counted). Recursive models keep their $refs and $defs (nothing finite can replace them)."""

    def walk(node: Any, seen: tuple[str, ...], path: str) -> Any:
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
            try:
                pointer, target = resolve_ref(schema, ref)
            except LookupError:
                raise MissingRef(f"{path}/$ref") from None
            if pointer in seen:
                raise _Recursive
            rest = walk({k: v for k, v in node.items() if k != "$ref"}, seen, path)
            if target is True or target is False:
                target = {} if target else {"not": {}}
            elif not isinstance(target, dict):
                raise _Recursive  # not a schema: keep the ref for the validator to refuse
            return {**walk(target, (*seen, pointer), pointer), **rest}
        out: dict[str, Any] = {}
        for key, value in node.items():
            here = f"{path}/{_escape(key)}"
            if key == "$defs":
                continue
            if key in _ONE or key == "additionalItems":
                out[key] = walk(value, seen, here)
            elif key in _MANY and isinstance(value, list):
                out[key] = [walk(s, seen, f"{here}/{i}") for i, s in enumerate(value)]
            elif key in _MAP and isinstance(value, dict):
                out[key] = {n: walk(s, seen, f"{here}/{_escape(n)}") for n, s in value.items()}
            else:  # type, required, default, enum, const, examples, unknown keywords: data
                out[key] = value
        return out

    try:
        return walk(schema, ("",), "")
    except _Recursive:
        return schema


def resolve_ref(root: Any, ref: str) -> tuple[str, Any]:
    """A local $ref ("#" or "#/..."), read as a JSON pointer into `root`: its normal
    spelling and what it points to. LookupError when it points to nothing."""
    parts = [p.replace("~1", "/").replace("~0", "~") for p in unquote(ref[2:]).split("/")
             ] if ref != "#" else []
    target = root
    for part in parts:
        if isinstance(target, dict) and part in target:
            target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            raise LookupError(ref)
    return json_pointer(parts), target


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


class _Recursive(Exception):
    pass


def brief_parameters(params: dict[str, Any]) -> dict[str, Any]:
    """The parameters as the model reads them. Arguments are always an object, and the
    prompt's rules already say "every required argument, no others": so the object type, a
    closed object and an empty required list go unsaid (about 90 characters a tool)."""
    return {k: v for k, v in params.items()
            if not (k == "type" and v == "object" or k == "additionalProperties" and v is False
                    or k == "required" and not v)}


def brief_schema(schema: Any) -> Any:
    """A return schema cut to what helps the model: types, descriptions and field names."""
    if not isinstance(schema, dict):
        return schema
    out = {k: schema[k] for k in ("type", "description", "enum") if k in schema}
    props = schema.get("properties")
    if isinstance(props, dict) and props:
        out["properties"] = {n: (p.get("type", "any") if isinstance(p, dict) else "any")
                             for n, p in props.items()}
    if isinstance(schema.get("items"), dict):
        out["items"] = brief_schema(schema["items"])
    return out or schema


def got(value: Any) -> str:
    """'string "5"', 'boolean true', 'null': what came, as the model would say it."""
    kind = json_type(value)
    return kind if value is None else f"{kind} {short_json(value)}"


def json_type(value: Any) -> str:
    """The JSON name of a Python value's type, as the model would think of it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def short_json(value: Any, limit: int = 40) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_pointer(path) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)
