"""Tool specs: three dialects in, one normalised JSON Schema 2020-12 out.

Accepted dialects:
- OpenAI function format: {"type": "function", "function": {name, description, parameters}}
- plain: {name, description, parameters: <JSON Schema>}
- legacy list: {name, description, parameters: [{name, type, description}], required?, return?}

Any of them may carry a return schema (`response`, as in the Berkeley Function-Calling
Leaderboard, `returns` or `return`) and a `handler` saying how the tool runs: a Python
function, a command or an HTTP request (see handlers.py, which runs them).
"""

from __future__ import annotations

import json
import re
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import bundled
from ..errors import SpecError, read_text

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


class ArgError(BaseModel):
    """One reason a set of arguments does not fit a tool's schema."""

    path: str
    """JSON pointer into the arguments, "" for the whole object."""
    message: str
    """What was expected and what came, fit to send to the model."""

    def __str__(self) -> str:
        return f"{self.path or '/'}: {self.message}"


class ToolSpec(BaseModel):
    """A tool's contract: its name, what it is for, and a JSON Schema for its arguments."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    """JSON Schema 2020-12 for args_list; always an object schema."""
    returns: dict[str, Any] | None = None
    """What the tool returns (`response`, `returns` or `return`): documentation for the model,
    never used to reject what the tool really returns."""
    handler: str | dict[str, Any] | None = None
    """'package.module:function', or {"python": ...}, {"command": [...]} or {"http": {...}}."""
    confirm: bool = False
    """A person must approve each call before it runs."""
    repeatable: bool = False
    """Calls repeat on purpose (a polling tool): stall detection leaves them alone."""
    origin: str = "<dict>"
    """Where the spec came from, e.g. 'tools.json[2]', for error messages."""

    @classmethod
    def from_dict(cls, data: Any, origin: str = "<dict>") -> ToolSpec:
        """Check `data` against the meta-schema and normalise it; raise SpecError if it is bad."""
        _check_meta(data, origin)
        outer = data
        if "function" in data:
            data = data["function"]
        handler = outer.get("handler") or data.get("handler")
        confirm = bool(outer.get("confirm") or data.get("confirm"))
        repeatable = bool(outer.get("repeatable") or data.get("repeatable"))
        where = _where(origin, data)
        params = data.get("parameters", {"type": "object", "properties": {}})
        if isinstance(params, list):
            params = _legacy_parameters(params, data.get("required"), where)
        try:
            params = inline_refs(_normalise(params))
        except _MissingRef as exc:
            raise _spec_error(where, f"/parameters{exc.args[0]}", "$ref points to a missing "
                              "definition") from None
        params.setdefault("properties", {})
        # An argument nobody declared is almost always a model's invention: reject it
        # unless the author opted in.
        params.setdefault("additionalProperties", False)
        try:
            _validator_class().check_schema(params)
        except Exception as exc:  # jsonschema.SchemaError
            raise _spec_error(where, f"/parameters{_pointer(exc.path)}",
                              f"not a valid JSON Schema: {exc.message}") from None
        if params["additionalProperties"] is False:
            for i, name in enumerate(params.get("required", [])):
                if name not in params["properties"]:
                    raise _spec_error(where, f"/parameters/required/{i}", f"{name!r} is required "
                                      "but not among the properties, so no call could pass")
        returns = _returns(outer, data, where)
        if handler is not None:
            _check_handler(handler, params, where)
        return cls(name=data["name"], description=data.get("description", ""),
                   parameters=params, returns=returns, handler=handler,
                   confirm=confirm, repeatable=repeatable, origin=origin)

    def validate_args(self, args: Any) -> list[ArgError]:
        """JSON Schema semantics, no coercion: "5" is not an integer, and neither is true."""
        if self._plain is not None and _plainly_valid(args, *self._plain):
            return []
        errors = sorted(self._validator.iter_errors(args), key=lambda e: list(e.absolute_path))
        return [_arg_error(_deepest(e)) for e in errors]

    @cached_property
    def _plain(self) -> tuple[dict[str, tuple[type, ...]], frozenset[str]] | None:
        """Most tools take a closed object of plain-typed arguments. Such a call is accepted
        with a few isinstance checks instead of a jsonschema walk (about 20 µs, the largest
        single cost of a scripted step); anything else, and every rejection with its message,
        goes to jsonschema."""
        p = self.parameters
        if (set(p) - _PLAIN_OBJECT or p.get("type") != "object"
                or p.get("additionalProperties") is not False):
            return None
        types = {}
        for name, sub in p.get("properties", {}).items():
            kind = sub.get("type") if isinstance(sub, dict) else None
            if not isinstance(kind, str) or kind not in _PLAIN or set(sub) - _INERT:
                return None
            types[name] = _PLAIN[kind]
        return types, frozenset(p.get("required", ()))

    @cached_property
    def _validator(self):
        return _validator_class()(self.parameters)

    @cached_property
    def shown(self) -> str:
        """`describe()` as the system prompt lists it (a spec is frozen: built once)."""
        return json.dumps(self.describe(), ensure_ascii=False)

    @cached_property
    def canonical(self) -> str:
        """`describe()` with sorted keys, for fingerprints."""
        return json.dumps(self.describe(), sort_keys=True)

    def describe(self) -> dict[str, Any]:
        """What the model is shown about this tool."""
        out: dict[str, Any] = {"name": self.name, "description": self.description,
                               "parameters": _brief_parameters(self.parameters)}
        if self.returns:
            out["returns"] = brief_schema(self.returns)
        return out


_PLAIN = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,)}
_INERT = {"type", "description", "title", "default", "examples"}
_PLAIN_OBJECT = {"type", "properties", "required", "additionalProperties", "title", "description"}


def _plainly_valid(args: Any, types: dict[str, tuple[type, ...]], required: frozenset[str]) -> bool:
    """True only for arguments that certainly pass; False means "ask jsonschema"."""
    if type(args) is not dict or not required <= args.keys() or not args.keys() <= types.keys():
        return False
    for name, value in args.items():
        allowed = types[name]
        # bool is an int to Python but not an integer to JSON Schema
        if not isinstance(value, allowed) or (type(value) is bool) != (allowed == (bool,)):
            return False
    return True


def _brief_parameters(params: dict[str, Any]) -> dict[str, Any]:
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


ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
_DOLLAR = re.compile(r"\$\{[^}]*\}?")
ARG_REF = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_-]*)\}$")
_BRACED = re.compile(r"\{([A-Za-z_][A-Za-z0-9_-]*)\}")


def env_refs(text: str) -> list[str]:
    """Names of the ${env:NAME} secrets in `text`."""
    return ENV_REF.findall(text)


def load_tools(path: str | Path) -> list[ToolSpec]:
    """Read a JSON file holding one spec, a list of specs, or {"tools": [...]}."""
    path = Path(path)
    text = read_text(path, SpecError, "tool specs")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise SpecError(f"{path}: JSON nested too deeply") from None
    if isinstance(data, dict) and "tools" in data:
        data = data["tools"]
        if not isinstance(data, list):
            raise SpecError(f'{path}: "tools" must be a list of specs, got {got(data)}')
    items = data if isinstance(data, list) else [data]
    if not items:
        raise SpecError(f"{path}: no tool specs in the file")
    specs = [ToolSpec.from_dict(item, origin=f"{path}[{i}]") for i, item in enumerate(items)]
    check_unique(specs)
    return specs


def check_unique(specs: list[ToolSpec]) -> None:
    seen: dict[str, ToolSpec] = {}
    for spec in specs:
        if spec.name in seen:
            raise SpecError(f"{spec.origin} ({spec.name}): duplicate tool name, "
                            f"first defined at {seen[spec.name].origin}")
        seen[spec.name] = spec


def got(value: Any) -> str:
    """'string "5"', 'boolean true', 'null': what came, as the model would say it."""
    kind = json_type(value)
    return kind if value is None else f"{kind} {_short(value)}"


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


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace local $refs by their definitions, so the schema can nest inside another one.
    Recursive models keep their $refs and $defs (nothing finite can replace them)."""
    defs = schema.get("$defs", {})

    def walk(node: Any, seen: tuple[str, ...], path: str) -> Any:
        if isinstance(node, list):
            return [walk(n, seen, f"{path}/{i}") for i, n in enumerate(node)]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref.split("/")[-1]
            if name not in defs:
                raise _MissingRef(f"{path}/$ref")
            if name in seen:
                raise _Recursive
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return {**walk(defs[name], seen + (name,), f"/$defs/{name}"), **walk(rest, seen, path)}
        return {k: walk(v, seen, f"{path}/{k}") for k, v in node.items() if k != "$defs"}

    try:
        return walk(schema, (), "")
    except _Recursive:
        return schema


class _Recursive(Exception):
    pass


class _MissingRef(Exception):
    """args[0]: JSON pointer of the dangling $ref."""


def _returns(outer: dict, data: dict, where: str) -> dict[str, Any] | None:
    keys = [k for k in ("response", "returns", "return") if k in data or k in outer]
    if len(keys) > 1:
        raise _spec_error(where, "", f"give one return schema, not {' and '.join(keys)}")
    if not keys:
        return None
    schema = data.get(keys[0], outer.get(keys[0]))
    if isinstance(schema, bool):
        return None
    try:
        _validator_class().check_schema(_normalise(schema))
    except Exception as exc:  # jsonschema.SchemaError
        raise _spec_error(where, f"/{keys[0]}{_pointer(exc.path)}",
                          f"not a valid JSON Schema: {exc.message}") from None
    return _normalise(schema)


def _check_handler(handler: Any, params: dict, where: str) -> None:
    """Check a handler's shape, its ${env:NAME} syntax and its {arg} placeholders. Secrets
    are not looked up here: that happens when the tool is loaded to run."""
    if isinstance(handler, str):
        kind, body = "python", handler
    else:
        kinds = [k for k in ("python", "command", "http") if k in handler]
        if len(kinds) != 1:
            raise _spec_error(where, "/handler", "a handler object has exactly one of the keys "
                              f"python, command or http; got {sorted(handler) or 'none'}")
        kind, body = kinds[0], handler
    if kind == "python" and isinstance(body, str):
        body = {"python": body}
    errors = list(_dialect_validator(f"handler_{kind}").iter_errors(body))
    if errors:
        err = min(errors, key=lambda e: (len(e.path), e.message))
        raise _spec_error(where, "/handler" + _pointer(err.absolute_path), _spec_message(err))
    names = set(params.get("properties", {}))

    def arg(text: str, pointer: str, whole: bool) -> None:
        found = _BRACED.findall(text)
        if whole and found and not ARG_REF.match(text):
            raise _spec_error(where, pointer, f"{text!r}: a placeholder must be the whole value, "
                              "as in \"{name}\", never part of a string")
        for name in found:
            if name not in names:
                raise _spec_error(where, pointer, f"placeholder {{{name}}} names no parameter; "
                                  f"have: {', '.join(sorted(names)) or 'none'}")

    def secret(text: str, pointer: str) -> None:
        for ref in _DOLLAR.findall(text):
            if not ENV_REF.fullmatch(ref):
                raise _spec_error(where, pointer, f"{ref!r}: secrets are written ${{env:NAME}}")

    if kind == "command":
        for i, item in enumerate(body["command"]):
            arg(item, f"/handler/command/{i}", whole=True)
            if "${" in item:
                raise _spec_error(where, f"/handler/command/{i}", "secrets go in \"env\", never "
                                  "in argv, where any process can read them")
        for key, value in body.get("env", {}).items():
            secret(value, f"/handler/env/{key}")
    elif kind == "http":
        http = body["http"]
        secret(http["url"], "/handler/http/url")
        arg(http["url"].split("?")[0], "/handler/http/url", whole=False)
        for key, value in http.get("query", {}).items():
            if isinstance(value, str):
                secret(value, f"/handler/http/query/{key}")
                arg(value, f"/handler/http/query/{key}", whole=True)
        for key, value in http.get("headers", {}).items():
            secret(value, f"/handler/http/headers/{key}")

        def walk(node: Any, pointer: str) -> None:
            if isinstance(node, str):
                secret(node, pointer)
                arg(node, pointer, whole=True)
            elif isinstance(node, dict):
                for k, v in node.items():
                    walk(v, f"{pointer}/{k}")
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    walk(v, f"{pointer}/{i}")

        walk(http.get("json"), "/handler/http/json")


def _validator_class():
    from jsonschema import Draft202012Validator

    return Draft202012Validator


_DIALECT_VALIDATORS: dict[str, Any] = {}


def _dialect_validator(dialect: str):
    if dialect not in _DIALECT_VALIDATORS:
        meta = json.loads(bundled.path("tool_specs", "meta_schema.json").read_text("utf-8"))
        schema = {"$ref": f"#/$defs/{dialect}", "$defs": meta["$defs"]}
        _DIALECT_VALIDATORS[dialect] = _validator_class()(schema)
    return _DIALECT_VALIDATORS[dialect]


def _check_meta(data: Any, origin: str) -> None:
    if not isinstance(data, dict):
        raise SpecError(f"{origin}: a tool spec must be an object, got {got(data)}")
    # anyOf errors are unreadable: validate against the one dialect the spec looks like.
    if "function" in data or data.get("type") == "function":
        dialect = "openai"
    elif isinstance(data.get("parameters"), list):
        dialect = "legacy"
    else:
        dialect = "plain"
    errors = list(_dialect_validator(dialect).iter_errors(data))
    if errors:
        err = min(errors, key=lambda e: (len(e.path), e.message))
        raise _spec_error(_where(origin, data), _pointer(err.absolute_path),
                          f"{_spec_message(err)} ({dialect} dialect)")


def _where(origin: str, data: Any) -> str:
    """'file.json[2] (name)': where a spec came from, for error messages."""
    name = None
    if isinstance(data, dict):
        name = data.get("name")
        if name is None and isinstance(data.get("function"), dict):
            name = data["function"].get("name")
    return f"{origin} ({name})" if isinstance(name, str) else origin


def _spec_error(where: str, pointer: str, message: str) -> SpecError:
    return SpecError(f"{where}: {pointer}: {message}" if pointer else f"{where}: {message}")


def _spec_message(err) -> str:
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        return f"unknown key(s) {', '.join(map(repr, extra))}"
    if err.validator == "required":
        return err.message.replace("is a required property", "is missing")
    return err.message


def _legacy_parameters(params: list[dict], required: list[str] | None,
                       where: str) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for i, p in enumerate(params):
        if p["name"] in properties:
            raise _spec_error(where, f"/parameters/{i}/name", f"duplicate parameter {p['name']!r}")
        prop = {k: v for k, v in p.items() if k not in ("name",)}
        properties[p["name"]] = prop
    names = list(properties)
    if required is None:
        required = names  # the legacy dialect lists what the tool needs
    for j, r in enumerate(required):
        if r not in properties:
            raise _spec_error(where, f"/required/{j}", f"{r!r} is not one of the parameters {names}")
    return {"type": "object", "properties": properties, "required": list(required)}


def _normalise(schema: Any) -> Any:
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
            out[key] = _normalise(out[key])
    for key in _MANY:
        if isinstance(out.get(key), list):
            out[key] = [_normalise(s) for s in out[key]]
    for key in _MAP:
        if isinstance(out.get(key), dict):
            out[key] = {k: _normalise(s) for k, s in out[key].items()}
    return out


def _map_type(t: Any) -> dict[str, Any]:
    if isinstance(t, list):
        mapped = [PYTHON_TYPES.get(x, x) if isinstance(x, str) else x for x in t]
        return {"type": None} if None in mapped else {"type": mapped}
    if not isinstance(t, str) or t not in PYTHON_TYPES:
        return {"type": t}
    return {"type": PYTHON_TYPES[t]}


def _pointer(path) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _short(value: Any, limit: int = 40) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _deepest(err):
    """For anyOf/oneOf failures, the branch the value was most likely meant for: one
    whose type matched and that failed deeper inside."""
    while err.context:
        here = len(err.absolute_path)
        branches = [e for e in err.context
                    if e.validator != "type" or len(e.absolute_path) > here]
        if not branches:  # no branch took the value's type: say which types would do
            return err
        err = max(branches, key=lambda e: len(e.absolute_path))
    return err


def _arg_error(err) -> ArgError:
    path = _pointer(err.absolute_path)
    v, inst, schema = err.validator, err.instance, err.schema
    if v in ("anyOf", "oneOf") and err.context:
        types = [e.validator_value for e in err.context if e.validator == "type"]
        flat = [t for ts in types for t in (ts if isinstance(ts, list) else [ts])]
        return ArgError(path=path, message=f"expected {' or '.join(dict.fromkeys(flat))}, "
                                           f"got {got(inst)}")
    if v == "type":
        want = err.validator_value
        want = " or ".join(want) if isinstance(want, list) else want
        return ArgError(path=path, message=f"expected {want}, got {got(inst)}")
    if v == "required":
        missing = [r for r in err.validator_value if isinstance(inst, dict) and r not in inst]
        name = missing[0] if missing else "?"
        return ArgError(path=f"{path}/{name}", message="required argument is missing")
    if v in ("additionalProperties", "unevaluatedProperties"):
        allowed = sorted(schema.get("properties", {}))
        extra = sorted(set(inst) - set(allowed)) if isinstance(inst, dict) else []
        name = extra[0] if extra else "?"
        return ArgError(path=f"{path}/{name}",
                        message=f"unexpected argument; allowed: {', '.join(allowed) or 'none'}")
    if v == "enum":
        return ArgError(path=path, message=f"expected one of {_short(err.validator_value, 80)}, "
                                           f"got {_short(inst)}")
    if v == "const":
        return ArgError(path=path, message=f"expected {_short(err.validator_value)}, got {_short(inst)}")
    return ArgError(path=path, message=err.message if len(err.message) < 160
                    else err.message[:159] + "…")
