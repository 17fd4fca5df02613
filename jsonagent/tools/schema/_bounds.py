"""How far a schema from outside the code may go, and the one walk that checks it: its refs
stay inside it, it does not loop, and its size, depth and patterns stay within bounds.

The walk follows $refs as validation would, counting what it has expanded, so a ref bomb
(each level doubling the last) is refused after `size` characters of walking, long before
validation, the prompt or a grammar compiler would have written it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import MissingRef, SchemaRefused
from ._regex import pattern_problem
from ._walks import _MANY, _MAP, _ONE, _escape, json_type, resolve_ref, short_json


@dataclass(frozen=True)
class Bounds:
    """How far a schema from outside the code may go; past any of these it is refused."""

    size: int = 64 << 10
    """Characters of JSON once every $ref is expanded: a ref bomb doubles at each level."""
    depth: int = 32
    """Objects and arrays nested in one another, $refs expanded."""
    pattern: int = 256
    """Characters of one regular expression (`pattern`, a `patternProperties` key)."""
    recursive: bool = False
    """A $ref may name a schema it sits in, below a property or an item (a tree's node)."""


FRONTEND = Bounds()
"""A tool a client declares for one run: the client is anyone the server lets in."""
AUTHORED = Bounds(size=256 << 10, depth=64, pattern=1024, recursive=True)
"""A schema someone chose to load: a spec file, an MCP server's tool, an eval's dataset."""

# keywords that move validation into a part of the value: a $ref loop through one of them
# is a tree (it ends where the value does); without one it never ends
_DESCEND = {"properties", "patternProperties", "additionalProperties", "items", "prefixItems",
            "additionalItems", "contains", "propertyNames", "unevaluatedItems",
            "unevaluatedProperties"}


def check_bounds(schema: Any, bounds: Bounds) -> None:
    """Refuse a schema whose $refs leave it or loop, or that passes `bounds`: SchemaRefused
    with a pointer and a reason (MissingRef for a ref to nothing)."""
    _Walk(schema, bounds).schema(schema, "", 0, 0)


class _Walk:
    def __init__(self, root: Any, bounds: Bounds):
        self.root, self.bounds, self.size = root, bounds, 0
        self.open: dict[str, int] = {}
        """The schemas being walked, by pointer: how many descents deep each was entered."""
        self.pattern_properties_at = self.unevaluated = ""
        """The first patternProperties and unevaluatedProperties met: refused together."""

    def grow(self, n: int) -> None:
        self.size += n
        if self.size > self.bounds.size:
            raise SchemaRefused("", f"more than {self.bounds.size >> 10} KB of JSON once its "
                                "$refs are expanded")

    def deep(self, at: str, depth: int) -> None:
        if depth >= self.bounds.depth:
            raise SchemaRefused(at, f"nested more than {self.bounds.depth} levels deep")

    def schema(self, node: Any, at: str, depth: int, descents: int) -> None:
        if not isinstance(node, dict):
            return self.data(node, at, depth)
        self.deep(at, depth)
        entered = at not in self.open
        if entered:
            self.open[at] = descents
        self.grow(2)
        for key, value in node.items():
            here = f"{at}/{_escape(key)}"
            self.grow(len(key) + 4)
            deeper = descents + (key in _DESCEND)
            if key == "$ref" and isinstance(value, str):
                self.ref(value, here, depth, descents)
            elif key in ("$dynamicRef", "$recursiveRef") or key == "$id" and at:
                raise SchemaRefused(here, f"{key} is not accepted: only $ref, to a place "
                                    "in the same schema")
            elif key == "pattern" and isinstance(value, str):
                self.regex(value, here)
            if key == "unevaluatedProperties":
                self.unevaluated = self.unevaluated or here
            if key in _MAP and isinstance(value, dict):
                self.grow(2)
                for name, sub in value.items():
                    if key == "patternProperties":
                        self.pattern_properties_at = self.pattern_properties_at or here
                        self.regex(name, f"{here}/{_escape(name)}")
                    self.grow(len(name) + 4)
                    self.schema(sub, f"{here}/{_escape(name)}", depth + 2, deeper)
            elif key in _MANY and isinstance(value, list):
                self.grow(2)
                for i, sub in enumerate(value):
                    self.schema(sub, f"{here}/{i}", depth + 2, deeper)
            elif key in _ONE or key == "additionalItems":
                self.schema(value, here, depth + 1, deeper)
            else:  # $ref's string, type, required, description, enum, const...: data
                self.data(value, here, depth + 1)
        if entered:
            del self.open[at]
        if not at and self.pattern_properties_at and self.unevaluated:
            raise SchemaRefused(self.unevaluated, "unevaluatedProperties beside "
                                "patternProperties is not accepted (its matching cannot be "
                                "bounded in time)")

    def data(self, node: Any, at: str, depth: int) -> None:
        self.deep(at, depth)
        if isinstance(node, dict):
            self.grow(2 + sum(len(k) + 4 for k in node))
            for k, v in node.items():
                self.data(v, f"{at}/{_escape(k)}", depth + 1)
        elif isinstance(node, list):
            self.grow(2 + len(node))
            for i, v in enumerate(node):
                self.data(v, f"{at}/{i}", depth + 1)
        else:
            self.grow(len(node) + 2 if isinstance(node, str) else 5)

    def ref(self, ref: str, at: str, depth: int, descents: int) -> None:
        if ref != "#" and not ref.startswith("#/"):
            raise SchemaRefused(at, f"$ref {short_json(ref, 60)} points outside the schema; "
                                'only refs inside it ("#/...") are followed')
        try:
            pointer, target = resolve_ref(self.root, ref)
        except LookupError:
            raise MissingRef(at) from None
        if pointer in self.open:
            if self.open[pointer] == descents:
                raise SchemaRefused(at, "this $ref loops: it names a schema it sits in, with "
                                    "no property or item between")
            if not self.bounds.recursive:
                raise SchemaRefused(at, "a recursive $ref (a schema inside itself) is not "
                                    "accepted here")
            return  # a tree: validation follows it only as deep as the value goes
        if not isinstance(target, (dict, bool)):
            raise SchemaRefused(at, f"$ref points to {json_type(target)}, not a schema")
        self.schema(target, pointer, depth, descents)

    def regex(self, pattern: str, at: str) -> None:
        problem = pattern_problem(pattern, self.bounds.pattern)
        if problem is not None:
            raise SchemaRefused(at, problem)

