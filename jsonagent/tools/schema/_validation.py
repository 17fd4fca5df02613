"""The one way the package validates against a schema: `validator()`. Its registry retrieves
nothing (a $ref to a file or a URL is unresolvable, never read or fetched), and its pattern
keywords are matched in bounded time (_regex.py). It asserts no `format`, so `format: regex`
compiles nothing a model wrote. A schema is checked against the meta-schema the same way, by
`check_schema`, never by jsonschema's own, which would `re.compile` every pattern a client
wrote (its format checker) and could fetch a meta-schema it does not bundle."""

from __future__ import annotations

import functools
from typing import Any

from ...errors import MissingRef, SchemaRefused
from ._bounds import Bounds, check_bounds
from ._regex import MATCH_TIMEOUT_S, search
from ._walks import json_pointer, short_json


def validator(schema: Any):
    """A validator for `schema` that never retrieves a $ref from outside it and matches
    patterns in bounded time. Check a schema from outside the code with `check_bounds`
    first: this one only keeps what slipped past from reaching out."""
    return validator_class()(schema, registry=_registry())


def schema_problem(schema: Any, bounds: Bounds) -> str | None:
    """What keeps a schema from outside the code from being used, in one line ("/where:
    what"): past `bounds`, a ref to nothing, or not a schema; None when it may be used."""
    try:
        check_bounds(schema, bounds)
    except MissingRef as exc:
        return f"{exc.args[0]}: $ref points to a missing definition"
    except SchemaRefused as exc:
        return f"{exc.args[0] or '/'}: {exc.args[1]}"
    from jsonschema.exceptions import SchemaError

    try:
        check_schema(schema)
    except SchemaError as exc:
        return f"{json_pointer(exc.path) or '/'}: not a valid JSON Schema: {exc.message}"
    return None


def check_schema(schema: Any) -> None:
    """Raise jsonschema's SchemaError when `schema` is not a valid Draft 2020-12 schema. The
    meta-schema is read with our pattern keywords and no format checker, and its own refs
    resolve among the meta-schemas jsonschema bundles, nothing retrieved."""
    from jsonschema.exceptions import SchemaError

    for error in _meta_validator().iter_errors(schema):
        raise SchemaError.create_from(error)


@functools.lru_cache(maxsize=1)
def _meta_validator():
    from jsonschema_specifications import REGISTRY  # retrieves nothing it does not bundle

    cls = validator_class()
    return cls(cls.META_SCHEMA, registry=REGISTRY)


@functools.lru_cache(maxsize=1)
def _registry():
    from referencing import Registry
    from referencing.exceptions import NoSuchResource

    def refuse(uri: str):
        raise NoSuchResource(ref=uri)

    return Registry(retrieve=refuse)


@functools.lru_cache(maxsize=1)
def validator_class():
    """Draft 2020-12 with every pattern keyword matched by `regex`, under a timeout. Check a
    schema with `check_schema`, not this class's own (see the module's docstring)."""
    from jsonschema import Draft202012Validator, validators

    return validators.extend(Draft202012Validator, {
        "pattern": _pattern, "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties})


def _too_slow(pattern: str):
    from jsonschema.exceptions import ValidationError

    return ValidationError(f"could not be matched against {short_json(pattern, 60)} within "
                           f"{MATCH_TIMEOUT_S} s")


def _pattern(validator, pattern, instance, schema):
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string"):
        found = search(pattern, instance)
        if found is None:
            yield _too_slow(pattern)
        elif not found:
            yield ValidationError(f"{short_json(instance)} does not match {pattern!r}")


def _pattern_properties(validator, patterns, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            found = search(pattern, key)
            if found is None:  # one timeout is enough: the rest would only add to the wait
                yield _too_slow(pattern)
                return
            if found:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator, additional, instance, schema):
    from jsonschema import Draft202012Validator

    stock = Draft202012Validator.VALIDATORS["additionalProperties"]
    patterns = schema.get("patternProperties")
    if not patterns or not validator.is_type(instance, "object"):
        yield from stock(validator, additional, instance, schema)
        return
    # what the stock keyword finds with re.search: the keys no property nor pattern covers
    named, extras = schema.get("properties", {}), {}
    for key, value in instance.items():
        if key in named:
            continue
        for pattern in patterns:
            found = search(pattern, key)
            if found is None:
                yield _too_slow(pattern)
                return
            if found:
                break
        else:
            extras[key] = value
    yield from stock(validator, additional, extras, {})
