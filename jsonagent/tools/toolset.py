"""The toolset of a run: every tool by name, however it was written."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator

from .. import bundled
from .core import BUILTINS, FINAL_TOOL
from ..errors import SpecError, read_text
from .specs import ToolSpec, check_unique, load_tools
from .tool import Tool, context_param, tool

ToolLike = Any  # Tool | ToolSpec | MCPServer | A2AAgent | callable | str | Path, or an iterable of them


def default_tools_path() -> Path:
    return bundled.path("core_function.json")


def core_tools() -> list[ToolSpec]:
    """The four built-ins of core_function.json, to mix with your own tools."""
    return list(_core_specs())


@functools.lru_cache(maxsize=1)
def _core_specs() -> tuple[ToolSpec, ...]:
    # Package data, checked by a test (test_core_specs_pass_the_checks) rather than at every
    # start; specs are frozen, so sharing them is safe.
    return tuple(load_tools(default_tools_path(), trusted=True))


class Toolset:
    def __init__(self, tools: Iterable[Tool], sources: Iterable[Any] = ()):
        self.tools: dict[str, Tool] = {}
        self.sources = list(sources)
        """Tool sources this toolset opened (MCP servers); `close()` shuts them down."""
        tools = _dedupe(list(tools))
        check_unique([t.spec for t in tools])
        for t in tools:
            self.tools[t.name] = t

    @classmethod
    def build(cls, items: ToolLike = None, output_type: type | None = None) -> Toolset:
        """Tools from files, directories, specs, functions and MCP servers; the task-complete
        tool is always there. A source opened here is closed if building fails."""
        sources: list[Any] = []
        try:
            tools = list(_collect(core_tools() if items is None else items, sources))
            if not any(t.final for t in tools):
                tools.append(_bind(_final_spec()))
            if output_type is not None:
                tools = [_typed_final(t, output_type) if t.final else t for t in tools]
            return cls(tools, sources)
        except BaseException:
            _close_all(sources)
            raise

    def close(self) -> None:
        """Shut down what this toolset opened (MCP server processes). Safe to call twice."""
        sources, self.sources = self.sources, []
        _close_all(sources)

    def __enter__(self) -> Toolset:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

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
        key = fold(name)
        hits = [t for n, t in self.tools.items() if fold(n) == key]
        return hits[0] if len(hits) == 1 else None

    @property
    def final(self) -> Tool:
        return next(t for t in self if t.final)

    def fingerprint(self) -> str:
        return _fingerprint(tuple(t.spec.canonical for t in self))


@functools.lru_cache(maxsize=64)
def _fingerprint(canonical: tuple[str, ...]) -> str:
    # every run records it, and most processes build the same few toolsets again and again;
    # the bytes of json.dumps([describe(), ...], sort_keys=True), from each spec's cache
    blob = "[" + ", ".join(canonical) + "]"
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def fold(name: str) -> str:
    """A tool's name as `find` compares it: without case, '_' or '-'."""
    return name.lower().replace("_", "").replace("-", "")


def spec_files(path: str | Path) -> list[Path]:
    """A spec file itself, or a directory's *.json files in name order. A JSON Schema document
    (one with "$schema" at the top, such as meta_schema.json) is not a spec and is skipped."""
    path = Path(path)
    if not path.is_dir():
        return [path]
    files = []
    for f in sorted(path.glob("*.json")):
        try:
            head = json.loads(read_text(f, SpecError))
        except (SpecError, ValueError):
            head = None  # let load_tools say what is wrong with it
        if not (isinstance(head, dict) and "$schema" in head):
            files.append(f)
    if not files:
        raise SpecError(f"{path}: no *.json tool spec files in this directory")
    return files


def _collect(items: ToolLike, sources: list[Any]) -> Iterator[Tool]:
    # an MCPServer or A2AAgent given here means its module is loaded; not importing them
    # otherwise keeps an Agent with plain tools from paying for them (about 10 ms)
    mcp, a2a = (sys.modules.get(f"{__package__}.{name}") for name in ("mcp", "a2a"))
    MCPServer = mcp.MCPServer if mcp is not None else ()
    A2AAgent = a2a.A2AAgent if a2a is not None else ()

    if isinstance(items, Toolset):
        yield from items
    elif isinstance(items, Tool):
        yield items
    elif isinstance(items, ToolSpec):
        yield _bind(items)
    elif isinstance(items, MCPServer):
        if not items.is_open:
            sources.append(items)  # opened here, so closed by this toolset
        yield from items.open()
    elif isinstance(items, A2AAgent):
        yield from items.open()
    elif isinstance(items, (str, Path)):
        for file in spec_files(items):
            for spec in load_tools(file):
                yield _bind(spec, base=file.resolve().parent)
    elif isinstance(items, dict):
        yield _bind(ToolSpec.from_dict(items))
    elif callable(items):
        yield tool(items)
    elif isinstance(items, Iterable):
        for item in items:
            yield from _collect(item, sources)
    else:
        raise SpecError(f"cannot make a tool out of {type(items).__name__}: pass a @tool "
                        "function, a ToolSpec, a spec dict, an MCPServer or a path to a JSON "
                        "spec file or directory")


def _bind(spec: ToolSpec, base: Path | None = None) -> Tool:
    """Attach the implementation: the spec's own handler, else the built-in of that name."""
    if spec.handler:
        from .agents import bind_agent, is_agent_handler
        from .handlers import bind

        fn = bind_agent(spec, base) if is_agent_handler(spec.handler) else bind(spec, base)
    elif spec.name in BUILTINS:
        fn = BUILTINS[spec.name]
    else:
        fn = None
    return Tool(spec=spec, fn=fn, ctx_param=context_param(fn) if fn else None,
                final=spec.name == FINAL_TOOL)


def _dedupe(tools: list[Tool]) -> list[Tool]:
    """The same tool loaded twice (the bundled specs given again, say) counts once. The same
    name with another spec or source stays, for check_unique to report as a collision."""
    kept: list[Tool] = []
    for t in tools:
        if not any(k.name == t.name and _same(k, t) for k in kept):
            kept.append(t)
    return kept


def _same(a: Tool, b: Tool) -> bool:
    if a is b:
        return True
    if a.spec.model_dump(exclude={"origin"}) != b.spec.model_dump(exclude={"origin"}):
        return False
    from .handlers import CommandHandler, HttpHandler

    def how(fn) -> dict:  # what the handler runs, not where its spec was read
        return {k: v for k, v in vars(fn).items() if k not in ("spec", "where")}

    return a.fn is b.fn or (isinstance(a.fn, (CommandHandler, HttpHandler))
                            and type(a.fn) is type(b.fn) and how(a.fn) == how(b.fn))


def _close_all(sources: list[Any]) -> None:
    errors = []
    for source in reversed(sources):
        try:
            source.close()
        except Exception as exc:  # close every one, then report
            errors.append(exc)
    if errors:
        raise errors[0]


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
