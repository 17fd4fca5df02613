"""What the reference pages say, rendered from the code when the site is built.

Each public function renders one `<!-- generated: NAME -->` section as Markdown (site.py puts
it in its page). Nothing here is a second home of a fact: every table is read from the
module that owns it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent


def _cell(text: Any) -> str:
    """One table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(head: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def attribute_docs(module: str, cls: str) -> dict[str, str]:
    """The docstring under each attribute of a class (`x: int = 1` then `\"\"\"...\"\"\"`),
    read from the source: pydantic and dataclasses keep no such docstring at run time."""
    path = Path(inspect.getsourcefile(importlib.import_module(module)))
    tree = ast.parse(path.read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    docs, body = {}, node.body
    for here, after in zip(body, body[1:]):
        if isinstance(here, ast.AnnAssign) and isinstance(here.target, ast.Name) \
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) \
                and isinstance(after.value.value, str):
            docs[here.target.id] = inspect.cleandoc(after.value.value)
    return docs


# ---- concepts

def statuses() -> str:
    """The one status table, from status.py."""
    from jsonagent import status

    rows = [[f"`{name}`", f"`{row.server}`", row.a2a.removeprefix("TASK_STATE_"),
             "–" if row.exit_code is None else row.exit_code]
            for name, row in status.TABLE.items()]
    rows.insert(next(i for i, r in enumerate(rows) if r[0] == "`interrupted`"),
                ["`failed`, because the model did (`error_kind`)", "`failed`", "FAILED",
                 f"{status.MODEL_FAILED_LATER}, {status.MODEL_FAILED}"])
    return _table(["`RunResult.status`", "server `status`", "A2A task state", "exit code"], rows)


def layers() -> str:
    """The import-linter contracts of pyproject.toml, top layer first."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    out = []
    for contract in config["tool"]["importlinter"]["contracts"]:
        out.append(f"**{contract['name']}** (`{contract['type']}`)\n")
        if contract["type"] == "layers":
            rows = [[i, "`" + layer.replace(" : ", "` : `").replace(" | ", "` \\| `") + "`"]
                    for i, layer in enumerate(contract["layers"], 1)]
            out.append(_table(["from the top", "modules of `" + contract["containers"][0] + "`"],
                              rows))
        elif contract["type"] == "independence":
            out.append("Independent of each other: " + ", ".join(f"`{m}`" for m in contract["modules"]))
        else:
            out.append(", ".join(f"`{m}`" for m in contract["source_modules"]) + " may not import "
                       + ", ".join(f"`{m}`" for m in contract["forbidden_modules"]))
        out.append("")
    return "\n".join(out)


# ---- the Python API, by mkdocstrings

def _autodoc(path: str, heading: str) -> str:
    return f"::: {path}\n    options:\n      heading: \"{heading}\"\n"


def python_api() -> str:
    """Everything in jsonagent.__all__, grouped by the module that defines it."""
    import jsonagent

    by_module: dict[str, list[str]] = {}
    for name in jsonagent.__all__:  # _EXPORTS: where each lazily loaded name is defined
        by_module.setdefault(jsonagent._EXPORTS[name], []).append(name)
    out = []
    for module, names in sorted(by_module.items()):
        out.append(f"## From `jsonagent.{module}`\n")
        out += [_autodoc(f"jsonagent.{module}.{name}", f"jsonagent.{name}") for name in names]
    return "\n".join(out)


def _module_api(module: str) -> str:
    mod = importlib.import_module(module)
    return "\n".join(_autodoc(f"{module}.{name}", f"{module}.{name}") for name in mod.__all__)


def testing_api() -> str:
    return _module_api("jsonagent.testing")


def tracing_api() -> str:
    return _module_api("jsonagent.tracing")


def stores_api() -> str:
    """The store protocol and its two implementations."""
    return "\n".join([_module_api("jsonagent.store"),
                      _autodoc("jsonagent.store.sqlite.SQLiteStore", "jsonagent.store.sqlite.SQLiteStore"),
                      _autodoc("jsonagent.store.postgres.PostgresStore",
                               "jsonagent.store.postgres.PostgresStore")])


# ---- configuration, events

def _fields(model: type, module: str) -> str:
    from pydantic import BaseModel

    docs = attribute_docs(module, model.__name__)
    rows = []
    for name, field in model.model_fields.items():
        default = field.get_default(call_default_factory=True)
        shown = type(default).__name__ + "()" if isinstance(default, BaseModel) else repr(default)
        kind = field.annotation.__name__ if isinstance(field.annotation, type) \
            else str(field.annotation).replace("typing.", "")
        rows.append([f"`{name}`", f"`{kind}`", f"`{shown}`", docs.get(name, "")])
    return _table(["field", "type", "default", "what it is"], rows)


def config() -> str:
    """AgentConfig and the settings grouped under it."""
    from jsonagent.config import AgentConfig, RetryConfig, UsageLimits

    out = []
    for model in (AgentConfig, RetryConfig, UsageLimits):
        doc = inspect.getdoc(model) if model.__doc__ else ""
        out += [f"## {model.__name__}\n", doc + "\n" if doc else "", _fields(model, "jsonagent.config"), ""]
    return "\n".join(out)


def events() -> str:
    """Every event type of jsonagent.events, its `type` and its own fields."""
    from dataclasses import fields

    from jsonagent import events as ev

    common = attribute_docs("jsonagent.events", "Event")
    out = ["## Every stored event\n",
           _table(["field", "what it is"], [[f"`{f.name}`", common.get(f.name, "")]
                                            for f in fields(ev.Event)]), ""]
    base = {f.name for f in fields(ev.Event)} | {f.name for f in fields(ev.Delta)}
    kinds = [c for c in vars(ev).values() if isinstance(c, type) and c.__module__ == ev.__name__
             and (issubclass(c, ev.Event) and c is not ev.Event or issubclass(c, ev.Delta) and c is not ev.Delta)]
    for cls in kinds:
        delta = issubclass(cls, ev.Delta)
        if delta and cls is kinds[[issubclass(k, ev.Delta) for k in kinds].index(True)]:
            delta_docs = attribute_docs("jsonagent.events", "Delta")
            out += ["## Deltas (live only)\n", inspect.getdoc(ev.Delta) or "", "",
                    _table(["field", "what it is"], [[f"`{f.name}`", delta_docs.get(f.name, "")]
                                                     for f in fields(ev.Delta)]), ""]
        kind = next(f.default for f in fields(cls) if f.name == "type")
        out.append(f"### `{kind}`: `{cls.__name__}`\n")
        if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):  # (a dataclass's own)
            out.append(inspect.getdoc(cls) + "\n")
        docs = attribute_docs("jsonagent.events", cls.__name__)
        own = [f for f in fields(cls) if f.name not in base | {"type"}]
        if own:
            out.append(_table(["field", "what it is"], [[f"`{f.name}`", docs.get(f.name, "")] for f in own]))
        out.append("")
    return "\n".join(out)


# ---- the command line

def cli() -> str:
    """Every command of the typer app, walked as click sees it."""
    import typer

    from jsonagent.cli.main import app

    out: list[str] = []

    # typer carries its own copy of click: its classes are read by duck typing, not isinstance
    def walk(command: Any, path: list[str], parent: Any) -> None:
        ctx = command.context_class(command, info_name=path[-1], parent=parent)
        if path[1:]:
            out.append(f"{'#' * min(len(path), 4)} `{' '.join(path)}`\n")
            out.append("```text\n" + command.get_usage(ctx).replace("Usage: ", "") + "\n```\n")
        if command.help:
            out.append(inspect.cleandoc(command.help).replace("\b\n", "") + "\n")
        rows = []
        for param in command.params:
            record = param.get_help_record(ctx) if param.param_type_name == "option" else None
            if param.param_type_name == "argument":
                rows.append([f"`{param.metavar or param.name.upper()}`", "argument", param.help or ""])
            elif record:
                rows.append([f"`{record[0]}`", "option", record[1]])
        if rows:
            out.append(_table(["name", "kind", "what it does"], rows) + "\n")
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name], ctx)

    walk(typer.main.get_command(app), ["jsonagent"], None)
    return "\n".join(out)


def exit_codes() -> str:
    """run, chat and resume: from status.py; the other commands: what their help says."""
    import typer

    from jsonagent import status
    from jsonagent.cli.exits import USAGE
    from jsonagent.cli.main import app

    rows = {}
    for name in status.RESULTS:
        rows.setdefault(status.exit_code(name), []).append(f"`{name}`")
    rows.setdefault(USAGE, []).append("a usage or spec error (a bad option, a bad tool spec)")
    rows.setdefault(status.MODEL_FAILED_LATER, []).append(
        "`failed`, because the model failed for now (rate limited, unavailable, timed out)")
    rows.setdefault(status.MODEL_FAILED, []).append(
        "`failed`, because the model failed for good (authentication, a bad request, the "
        "context window, a content filter)")
    table = _table(["code", "the run ended"], [[code, "; ".join(what)] for code, what in sorted(rows.items())])
    said = []

    def walk(command: Any, path: list[str]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
        elif path[1] not in ("run", "chat", "resume") and command.help and "exit" in command.help.lower():
            said.append([f"`{' '.join(path)}`", inspect.cleandoc(command.help).replace("\b\n", "")])

    walk(typer.main.get_command(app), ["jsonagent"])
    return "\n".join([table, "", "## Other commands, as their help says", "",
                      _table(["command", "help"], said)])


def environment() -> str:
    from jsonagent.environment import VARIABLES

    return _table(["variable", "what it sets"], [[f"`{name}`", what] for name, what in VARIABLES.items()])


from openapi import envelope, http  # noqa: E402,F401  (two more sections, in their own file)
