"""The toolset of a run: every tool by name, however it was written."""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import json
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator

from .core import BUILTINS, FINAL_TOOL
from ..errors import SpecError
from .specs import ToolSpec, check_unique, load_tools
from .tool import Tool, context_param, tool

ToolLike = Any  # Tool | ToolSpec | callable | str | Path, or an iterable of them


def default_tools_path() -> Path:
    from importlib.resources import files

    return Path(str(files("tool_specs").joinpath("core_function.json")))


def core_tools() -> list[ToolSpec]:
    """The four built-ins of core_function.json, to mix with your own tools."""
    return list(_core_specs())


@functools.lru_cache(maxsize=1)
def _core_specs() -> tuple[ToolSpec, ...]:
    # Checked against the meta-schema once per process: specs are frozen, so sharing is safe,
    # and an Agent is then cheap to construct (~6 ms of checking otherwise).
    return tuple(load_tools(default_tools_path()))


class Toolset:
    def __init__(self, tools: Iterable[Tool]):
        self.tools: dict[str, Tool] = {}
        tools = list(tools)
        check_unique([t.spec for t in tools])
        for t in tools:
            self.tools[t.name] = t

    @classmethod
    def build(cls, items: ToolLike = None, output_type: type | None = None) -> Toolset:
        """Tools from files, specs and functions; the task-complete tool is always there."""
        tools = list(_collect(core_tools() if items is None else items))
        if not any(t.final for t in tools):
            tools.append(_bind(_final_spec()))
        if output_type is not None:
            tools = [_typed_final(t, output_type) if t.final else t for t in tools]
        return cls(tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools.values())

    def __len__(self) -> int:
        return len(self.tools)

    def __contains__(self, name: str) -> bool:
        return name in self.tools

    @property
    def names(self) -> list[str]:
        return list(self.tools)

    def get(self, name: str) -> Tool | None:
        return self.tools.get(name)

    def find(self, name: str) -> Tool | None:
        """Exact name first, then a unique case- and separator-insensitive match."""
        if name in self.tools:
            return self.tools[name]
        key = _fold(name)
        hits = [t for n, t in self.tools.items() if _fold(n) == key]
        return hits[0] if len(hits) == 1 else None

    @property
    def final(self) -> Tool:
        return next(t for t in self if t.final)

    def fingerprint(self) -> str:
        blob = json.dumps([t.spec.describe() for t in self], sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def _fold(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def _collect(items: ToolLike) -> Iterator[Tool]:
    if isinstance(items, Toolset):
        yield from items
    elif isinstance(items, Tool):
        yield items
    elif isinstance(items, ToolSpec):
        yield _bind(items)
    elif isinstance(items, (str, Path)):
        for spec in load_tools(items):
            yield _bind(spec, base=Path(items).resolve().parent)
    elif isinstance(items, dict):
        yield _bind(ToolSpec.from_dict(items))
    elif callable(items):
        yield tool(items)
    elif isinstance(items, Iterable):
        for item in items:
            yield from _collect(item)
    else:
        raise SpecError(f"cannot make a tool out of {type(items).__name__}: pass a @tool "
                        "function, a ToolSpec, a spec dict or a path to a JSON spec file")


def _bind(spec: ToolSpec, base: Path | None = None) -> Tool:
    """Attach the implementation: the spec's own handler, else the built-in of that name."""
    if spec.handler:
        fn = _import_handler(spec, base)
    elif spec.name in BUILTINS:
        fn = BUILTINS[spec.name]
    else:
        fn = None
    return Tool(spec=spec, fn=fn, ctx_param=context_param(fn) if fn else None,
                final=spec.name == FINAL_TOOL)


def _import_handler(spec: ToolSpec, base: Path | None) -> Any:
    module_name, _, attr = spec.handler.partition(":")
    # A handler module beside its spec file is the common case; make it importable, last in
    # line so that a file there can never shadow an installed package.
    if base is not None and str(base) not in sys.path:
        sys.path.append(str(base))
    try:
        obj = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # any import-time failure is the spec author's to fix
        raise SpecError(f"{spec.origin} ({spec.name}): cannot load handler {spec.handler!r}: "
                        f"{type(exc).__name__}: {exc}") from None
    if isinstance(obj, Tool):
        obj = obj.fn
    if not callable(obj):
        raise SpecError(f"{spec.origin} ({spec.name}): handler {spec.handler!r} is not callable")
    return obj


def _final_spec() -> ToolSpec:
    return next(s for s in core_tools() if s.name == FINAL_TOOL)


def _typed_final(final: Tool, output_type: type) -> Tool:
    from pydantic import TypeAdapter

    schema = TypeAdapter(output_type).json_schema()
    schema.pop("title", None)
    if schema.get("type") != "object":
        raise SpecError(f"output_type {output_type!r} must be a pydantic model or another "
                        "type whose JSON Schema is an object")
    description = (final.spec.description + " Its arguments are the final answer: "
                   + (_own_doc(output_type) or "fill in every field.")).strip()
    spec = ToolSpec.from_dict({"name": final.name, "description": description,
                               "parameters": schema}, origin=f"output_type {output_type.__name__}")
    return Tool(spec=spec, fn=final.fn, ctx_param=final.ctx_param, final=True)


def _own_doc(cls: type) -> str | None:
    """The docstring written on `cls` itself. An inherited one (pydantic's BaseModel has 2,000
    characters of it) or a dataclass's generated signature says nothing about the answer."""
    doc = vars(cls).get("__doc__") if isinstance(cls, type) else None
    if not isinstance(doc, str) or (hasattr(cls, "__dataclass_fields__")
                                    and doc.startswith(cls.__name__ + "(")):
        return None
    return inspect.cleandoc(doc) or None
