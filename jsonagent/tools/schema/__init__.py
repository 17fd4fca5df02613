"""JSON Schema as the package reads it: the walks that map, inline and shorten a schema, and
the one place its $refs are resolved and its patterns matched.

A schema from outside the code (a client's tool, an MCP server's, a spec file, an eval's)
passes `check_bounds` once, before it is validated against, shown or compiled into a
grammar (_bounds.py). Every validator comes from `validator()`, whose registry retrieves
nothing and whose patterns run in bounded time (_validation.py, _regex.py).

Nothing here knows what a tool spec is: specs.py and spec_checks.py build on it, and the
envelope and lint name values and pointers with it.
"""

from ._bounds import AUTHORED, FRONTEND, Bounds, check_bounds
from ._regex import MATCH_TIMEOUT_S
from ._validation import check_schema, schema_problem, validator, validator_class
from ._walks import (
    PYTHON_TYPES,
    brief_parameters,
    brief_schema,
    got,
    inline_refs,
    json_pointer,
    json_type,
    normalise,
    short_json,
)

__all__ = ["AUTHORED", "FRONTEND", "MATCH_TIMEOUT_S", "PYTHON_TYPES", "Bounds", "brief_parameters",
           "brief_schema", "check_bounds", "check_schema", "got", "inline_refs", "json_pointer", "json_type",
           "normalise", "schema_problem", "short_json", "validator", "validator_class"]
