"""`jsonagent tools scaffold` and `tools export`: from a spec to a typed Python stub, and
from a @tool function back to its spec."""

from __future__ import annotations

import json
import keyword
import re
from typing import Any

from ..errors import SpecError
from .specs import ToolSpec

_SIMPLE = {"string": "str", "integer": "int", "number": "float", "boolean": "bool",
           "null": "None"}


def python_type(schema: Any) -> str:
    """The annotation a schema reads as: Literal for enums, X | None for nullable types."""
    if not isinstance(schema, dict) or not schema:
        return "Any"
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return f"Literal[{', '.join(repr(v) for v in schema['enum'])}]"
    if "const" in schema:
        return f"Literal[{schema['const']!r}]"
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " | ".join(dict.fromkeys(python_type(s) for s in schema[key]))
    t = schema.get("type")
    if isinstance(t, list):
        return " | ".join(dict.fromkeys(python_type({**schema, "type": x}) for x in t))
    if t == "array":
        return f"list[{python_type(schema.get('items'))}]"
    if t == "object":
        return "dict[str, Any]"
    return _SIMPLE.get(t, "Any")


def identifier(name: str) -> str:
    """A spec name as a Python function name: "weather.get-now" -> "weather_get_now"."""
    ident = re.sub(r"\W+", "_", re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)).strip("_").lower()
    if not ident or ident[0].isdigit() or keyword.iskeyword(ident):
        ident = "tool_" + ident
    return ident


def stub(specs: list[ToolSpec], module: str) -> str:
    """A module with one typed function per spec, whose signature matches the schema."""
    lines = [f'"""Tool handlers for {", ".join(s.name for s in specs)}.',
             "",
             "Point each spec at its function:",
             *[f'    "handler": "{module}:{identifier(s.name)}"' for s in specs],
             '"""', "", "from __future__ import annotations", "",
             "from typing import Any, Literal  # noqa: F401", ""]
    for spec in specs:
        props = spec.parameters.get("properties", {})
        required = set(spec.parameters.get("required", []))
        params, docs = [], []
        order = [n for n in props if n in required] + [n for n in props if n not in required]
        for name in order:
            schema = props[name]
            arg = name if name.isidentifier() and not keyword.iskeyword(name) else None
            if arg is None:
                raise SpecError(f"{spec.origin} ({spec.name}): parameter {name!r} is not a "
                                "Python identifier, so no function can take it as a keyword")
            ann = python_type(schema)
            if name in required:
                params.append(f"{arg}: {ann}")
            else:
                default = schema.get("default") if isinstance(schema, dict) else None
                if default is None and "None" not in ann:
                    ann += " | None"
                params.append(f"{arg}: {ann} = {default!r}")
            if isinstance(schema, dict) and schema.get("description"):
                docs.append(f"        {arg}: {schema['description']}")
        returns = python_type(spec.returns) if spec.returns else "Any"
        lines += ["", f"def {identifier(spec.name)}({', '.join(params)}) -> {returns}:",
                  f'    """{spec.description or spec.name}']
        if docs:
            lines += ["", "    Args:", *docs]
        lines += ['    """', f"    raise NotImplementedError({spec.name!r})", ""]
    return "\n".join(lines).rstrip() + "\n"


def export(ref: str) -> dict[str, Any]:
    """The spec of the @tool function (or plain typed function) at 'module:function'."""
    import importlib

    from .tool import Tool, tool

    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise SpecError(f"{ref!r}: give module:function, as in mytools:weather")
    try:
        obj = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        raise SpecError(f"cannot load {ref!r}: {type(exc).__name__}: {exc}") from None
    if not isinstance(obj, Tool):
        if not callable(obj):
            raise SpecError(f"{ref!r} is not a function")
        obj = tool(obj)
    out = obj.spec.describe()
    out["parameters"] = obj.spec.parameters
    out["handler"] = ref
    return json.loads(json.dumps(out))
