"""The checks a tool spec must pass to load, each failure a SpecError that points into it:
the spec against its dialect's meta-schema, its return schema, and its handler (shape,
`{arg}` placeholders, `${env:NAME}` secrets). The placeholder syntax is defined here once;
handlers.py fills it in when the tool runs.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .. import bundled
from ..errors import MissingRef, SchemaRefused, SpecError
from .schema import (
    Bounds,
    check_bounds,
    check_schema,
    got,
    json_pointer,
    normalise,
    validator,
)

ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
_DOLLAR = re.compile(r"\$\{[^}]*\}?")
ARG_REF = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_-]*)\}$")
BRACED = re.compile(r"\{([A-Za-z_][A-Za-z0-9_-]*)\}")


def check_meta(data: Any, origin: str) -> None:
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
        raise spec_error(spec_where(origin, data), json_pointer(err.absolute_path),
                         f"{_spec_message(err)} ({dialect} dialect)")


_DIALECT_VALIDATORS: dict[str, Any] = {}


def _dialect_validator(dialect: str):
    if dialect not in _DIALECT_VALIDATORS:
        meta = json.loads(bundled.path("tool_specs", "meta_schema.json").read_text("utf-8"))
        schema = {"$ref": f"#/$defs/{dialect}", "$defs": meta["$defs"]}
        _DIALECT_VALIDATORS[dialect] = validator(schema)
    return _DIALECT_VALIDATORS[dialect]


def check_returns(outer: dict, data: dict, where: str, bounds: Bounds | None
                  ) -> dict[str, Any] | None:
    """The spec's one return schema, normalised; None when it gives none (or just true/false).
    `bounds` None: a trusted spec's, not checked."""
    keys = [k for k in ("response", "returns", "return") if k in data or k in outer]
    if len(keys) > 1:
        raise spec_error(where, "", f"give one return schema, not {' and '.join(keys)}")
    if not keys:
        return None
    schema = data.get(keys[0], outer.get(keys[0]))
    if isinstance(schema, bool):
        return None
    try:
        if bounds is not None:
            check_bounds(schema, bounds)
    except MissingRef as exc:
        raise spec_error(where, f"/{keys[0]}{exc.args[0]}", "$ref points to a missing "
                         "definition") from None
    except SchemaRefused as exc:
        raise spec_error(where, f"/{keys[0]}{exc.args[0]}", exc.args[1]) from None
    try:
        if bounds is not None:
            check_schema(normalise(schema))
    except Exception as exc:  # jsonschema.SchemaError
        raise spec_error(where, f"/{keys[0]}{json_pointer(exc.path)}",
                         f"not a valid JSON Schema: {exc.message}") from None
    return normalise(schema)


def check_handler(handler: Any, params: dict, where: str) -> None:
    """Check a handler's shape, its ${env:NAME} syntax and its {arg} placeholders. Secrets
    are not looked up here: that happens when the tool is loaded to run."""
    if isinstance(handler, str):
        kind, body = "python", handler
    else:
        kinds = [k for k in ("python", "command", "http", "agent", "a2a") if k in handler]
        if len(kinds) != 1:
            raise spec_error(where, "/handler", "a handler object has exactly one of the keys "
                             f"python, command, http, agent or a2a; got {sorted(handler) or 'none'}")
        kind, body = kinds[0], handler
    if kind == "python" and isinstance(body, str):
        body = {"python": body}
    errors = list(_dialect_validator(f"handler_{kind}").iter_errors(body))
    if errors:
        err = min(errors, key=lambda e: (len(e.path), e.message))
        raise spec_error(where, "/handler" + json_pointer(err.absolute_path), _spec_message(err))
    names = set(params.get("properties", {}))

    def arg(text: str, pointer: str, whole: bool) -> None:
        found = BRACED.findall(text)
        if whole and found and not ARG_REF.match(text):
            raise spec_error(where, pointer, f"{text!r}: a placeholder must be the whole value, "
                             "as in \"{name}\", never part of a string")
        for name in found:
            if name not in names:
                raise spec_error(where, pointer, f"placeholder {{{name}}} names no parameter; "
                                 f"have: {', '.join(sorted(names)) or 'none'}")

    def secret(text: str, pointer: str) -> None:
        for ref in _DOLLAR.findall(text):
            if not ENV_REF.fullmatch(ref):
                raise spec_error(where, pointer, f"{ref!r}: secrets are written ${{env:NAME}}")

    if kind == "command":
        for i, item in enumerate(body["command"]):
            arg(item, f"/handler/command/{i}", whole=True)
            if "${" in item:
                raise spec_error(where, f"/handler/command/{i}", "secrets go in \"env\", never "
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
    elif kind == "a2a":
        for key, value in body.get("headers", {}).items():
            secret(value, f"/handler/headers/{key}")


def spec_where(origin: str, data: Any) -> str:
    """'file.json[2] (name)': where a spec came from, for error messages."""
    name = None
    if isinstance(data, dict):
        name = data.get("name")
        if name is None and isinstance(data.get("function"), dict):
            name = data["function"].get("name")
    return f"{origin} ({name})" if isinstance(name, str) else origin


def spec_error(where: str, pointer: str, message: str) -> SpecError:
    return SpecError(f"{where}: {pointer}: {message}" if pointer else f"{where}: {message}")


def _spec_message(err) -> str:
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        return f"unknown key(s) {', '.join(map(repr, extra))}"
    if err.validator == "required":
        return err.message.replace("is a required property", "is missing")
    return err.message
