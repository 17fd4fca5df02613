"""Tool specs: three dialects in, one normalised JSON Schema 2020-12 out.

Accepted dialects:
- OpenAI function format: {"type": "function", "function": {name, description, parameters}}
- plain: {name, description, parameters: <JSON Schema>}
- legacy list: {name, description, parameters: [{name, type, description}], required?, return?}

Any of them may carry a return schema (`response`, as in the Berkeley Function-Calling
Leaderboard, `returns` or `return`) and a `handler` saying how the tool runs: a Python
function, a command or an HTTP request (see handlers.py, which runs them).

This module owns the spec and its arguments: the dialects read into one `ToolSpec`, and
arguments validated against it with messages fit for the model. The walks over JSON Schema
live in schema.py, the checks that refuse a bad spec in spec_checks.py.
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..calls import Effects
from ..errors import MissingRef, SchemaRefused, SpecError, read_text
from .schema import (
    AUTHORED,
    Bounds,
    brief_parameters,
    brief_schema,
    check_bounds,
    check_schema,
    got,
    inline_refs,
    json_pointer,
    normalise,
    short_json,
    validator,
)
from .spec_checks import check_handler, check_meta, check_returns, spec_error, spec_where

# These moved to schema.py and spec_checks.py; code written against this module still finds them.
from .schema import PYTHON_TYPES, json_type  # noqa: F401
from .spec_checks import ARG_REF, ENV_REF  # noqa: F401


class ArgError(BaseModel):
    """One reason a set of arguments does not fit a tool's schema."""

    model_config = ConfigDict(defer_build=True)

    path: str
    """JSON pointer into the arguments, "" for the whole object."""
    message: str
    """What was expected and what came, fit to send to the model."""

    def __str__(self) -> str:
        return f"{self.path or '/'}: {self.message}"


class ToolSpec(BaseModel):
    """A tool's contract: its name, what it is for, and a JSON Schema for its arguments."""

    model_config = ConfigDict(frozen=True, defer_build=True)

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
    max_calls: int | None = None
    """Calls allowed in one run: one past it is refused with an observation saying so, and
    the run goes on without the tool (limits.py). None: no limit of its own."""
    effects: Effects | None = None
    """What running a call twice does: idempotent, once or unknown (calls.py). None: what
    the tool's handler declares (`Tool.effects`)."""
    origin: str = "<dict>"
    """Where the spec came from, e.g. 'tools.json[2]', for error messages."""

    @classmethod
    def from_dict(cls, data: Any, origin: str = "<dict>", *, trusted: bool = False,
                  bounds: Bounds = AUTHORED) -> ToolSpec:
        """Check `data` against the meta-schema and normalise it; raise SpecError if it is bad.
        `trusted` skips the JSON-Schema checks, for the package's own specs only: loading
        jsonschema to check them cost every process about 60 ms, and a test checks them.
        `bounds`: how far its schemas may go (schema.py); a client's tools get FRONTEND."""
        if not trusted:
            check_meta(data, origin)
        outer = data
        if "function" in data:
            data = data["function"]
        handler = outer.get("handler") or data.get("handler")
        confirm = bool(outer.get("confirm") or data.get("confirm"))
        repeatable = bool(outer.get("repeatable") or data.get("repeatable"))
        max_calls = outer.get("max_calls") or data.get("max_calls")
        effects = outer.get("effects") or data.get("effects")
        where = spec_where(origin, data)
        params = data.get("parameters", {"type": "object", "properties": {}})
        if isinstance(params, list):
            params = _legacy_parameters(params, data.get("required"), where)
        try:
            if not trusted:  # before anything walks it: normalise and inline_refs recurse
                check_bounds(params, bounds)
            params = inline_refs(normalise(params))
        except MissingRef as exc:
            raise spec_error(where, f"/parameters{exc.args[0]}", "$ref points to a missing "
                             "definition") from None
        except SchemaRefused as exc:
            raise spec_error(where, f"/parameters{exc.args[0]}", exc.args[1]) from None
        params.setdefault("properties", {})
        # An argument nobody declared is almost always a model's invention: reject it
        # unless the author opted in.
        params.setdefault("additionalProperties", False)
        try:
            if not trusted:
                check_schema(params)
        except Exception as exc:  # jsonschema.SchemaError
            raise spec_error(where, f"/parameters{json_pointer(exc.path)}",
                             f"not a valid JSON Schema: {exc.message}") from None
        if params["additionalProperties"] is False:
            for i, name in enumerate(params.get("required", [])):
                if name not in params["properties"]:
                    raise spec_error(where, f"/parameters/required/{i}", f"{name!r} is required "
                                     "but not among the properties, so no call could pass")
        returns = check_returns(outer, data, where, None if trusted else bounds)
        if handler is not None:
            check_handler(handler, params, where)
        # a trusted spec is not validated either: building the validator is what makes
        # pydantic scan every installed package for its plugins (~25 ms)
        make = cls.model_construct if trusted else cls
        return make(name=data["name"], description=data.get("description", ""),
                    parameters=params, returns=returns, handler=handler,
                    confirm=confirm, repeatable=repeatable, max_calls=max_calls,
                    effects=effects, origin=origin)

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
        return validator(self.parameters)

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
                               "parameters": brief_parameters(self.parameters)}
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


def load_tools(path: str | Path, *, trusted: bool = False) -> list[ToolSpec]:
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
    specs = [ToolSpec.from_dict(item, origin=f"{path}[{i}]", trusted=trusted)
             for i, item in enumerate(items)]
    check_unique(specs)
    return specs


def check_unique(specs: list[ToolSpec]) -> None:
    seen: dict[str, ToolSpec] = {}
    for spec in specs:
        if spec.name in seen:
            raise SpecError(f"{spec.origin} ({spec.name}): duplicate tool name, "
                            f"first defined at {seen[spec.name].origin}")
        seen[spec.name] = spec


def _legacy_parameters(params: list[dict], required: list[str] | None,
                       where: str) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for i, p in enumerate(params):
        if p["name"] in properties:
            raise spec_error(where, f"/parameters/{i}/name", f"duplicate parameter {p['name']!r}")
        prop = {k: v for k, v in p.items() if k not in ("name",)}
        properties[p["name"]] = prop
    names = list(properties)
    if required is None:
        required = names  # the legacy dialect lists what the tool needs
    for j, r in enumerate(required):
        if r not in properties:
            raise spec_error(where, f"/required/{j}", f"{r!r} is not one of the parameters {names}")
    return {"type": "object", "properties": properties, "required": list(required)}


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
    path = json_pointer(err.absolute_path)
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
        return ArgError(path=path, message=f"expected one of {short_json(err.validator_value, 80)}, "
                                           f"got {short_json(inst)}")
    if v == "const":
        return ArgError(path=path, message=f"expected {short_json(err.validator_value)}, got {short_json(inst)}")
    return ArgError(path=path, message=err.message if len(err.message) < 160
                    else err.message[:159] + "…")
