"""A dataset: the cases of an eval, read from YAML or JSONL and checked before anything runs.

    defaults: {max_steps: 5}          # every case's, unless it says otherwise
    evaluators: [{status: completed}]  # applied to every case, beside its own
    variants:                          # the same cases for each (else one per --model)
      - {name: small, model: "local", temperature: 0}
      - {name: react, prompt_style: react}     # any AgentConfig field
    cases:
      - name: pow
        input: What is 2**10?
        expected: "1024"
        evaluators: [{trajectory: [{tool: run_python}]}]

A JSONL dataset holds one case a line. A bad one raises EvalError naming the file, the line
and the field.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ..errors import EvalError, read_text
from ..tools.schema import AUTHORED, schema_problem
from . import evaluators as ev
from .case import Case, Variant
from .judge import Judge
from .trajectory import MODES

KINDS: dict[str, type[ev.Evaluator]] = {cls.kind: cls for cls in (
    ev.Equals, ev.Contains, ev.Regex, ev.Number, ev.Schema, ev.Fields, ev.Status,
    ev.StepsAtMost, ev.SecondsAtMost, ev.TokensAtMost, ev.Trajectory, Judge, ev.Python)}
"""Each evaluator by the key that names it in a dataset."""


class Dataset(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    cases: list[Case]
    evaluators: list[Any] = []
    """Applied to every case (as a case's own: Evaluators, or functions)."""
    variants: list[Variant] = []
    path: Path | None = None
    hash: str = ""
    """sha256 of the file (of the cases, for a dataset built in code), 16 hex digits."""

    @field_validator("evaluators")
    @classmethod
    def _evaluators(cls, value):
        return [ev.evaluator(v) for v in value]

    @classmethod
    def load(cls, path: str | Path) -> Dataset:
        path = Path(path)
        text = read_text(path, EvalError, "dataset")
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        if path.suffix == ".jsonl":
            return _from_jsonl(path, text, digest)
        return _from_yaml(path, text, digest)

    def model_post_init(self, _):
        if not self.hash:  # the same cases hash the same in every process (no object ids)
            blob = json.dumps([[c.model_dump(mode="json", exclude={"evaluators"}),
                                [(e.kind, e.label) for e in c.evaluators]] for c in self.cases],
                              sort_keys=True, default=str).encode()
            self.hash = hashlib.sha256(blob).hexdigest()[:16]
        for i, case in enumerate(self.cases):
            case.name = case.name or f"case-{i + 1}"

    def run(self, agent_factory, out: str | Path | None = None, **options):
        """Run every case (see `runner.run` for the options); return the Report."""
        from .runner import run

        return run(self, agent_factory, out, **options)


# -- reading a file --------------------------------------------------------------------------

ALIASES_ADD = 1_000_000
"""The most characters a dataset's YAML aliases may add once expanded. Loading shares an
anchored value, but the results and the report write each use out: 336 bytes of aliases
nine deep gave 3.8 MB of each, and 474 bytes a MemoryError."""


def _refuse_alias_bombs(path: Path, text: str, root) -> None:
    """Count the document as its aliases expand it (each anchored node once, so counting
    cannot blow up itself): past ALIASES_ADD more than the text, or an alias inside the
    node it names (a loop, which no results line can hold), it is refused."""
    import yaml

    sizes: dict[int, int] = {}
    inside: set[int] = set()

    def size(node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in inside:
            raise EvalError(f"{path}:{node.start_mark.line + 1}: a YAML alias inside the "
                            "value it names: a loop")
        inside.add(key)
        if isinstance(node, yaml.SequenceNode):
            n = 1 + sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            n = 1 + sum(size(k) + size(v) for k, v in node.value)
        else:
            n = 1 + len(node.value)
        inside.discard(key)
        sizes[key] = n
        if n > len(text) + ALIASES_ADD:
            raise EvalError(f"{path}:{node.start_mark.line + 1}: its YAML aliases expand to "
                            f"more than {ALIASES_ADD:,} characters past the file's own (an "
                            "alias bomb?)")
        return n

    if root is not None:
        size(root)


def _from_yaml(path: Path, text: str, digest: str) -> Dataset:
    import yaml

    try:
        root = yaml.compose(text)
        _refuse_alias_bombs(path, text, root)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise EvalError(f"{path}{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from None

    def line(loc: tuple) -> int:
        node = root
        for key in loc:
            children = node.value if node is not None else None
            if isinstance(children, list) and children and isinstance(children[0], tuple):
                node = next((v for k, v in children if k.value == key), node)
            elif isinstance(children, list) and isinstance(key, int) and key < len(children):
                node = children[key]
            else:
                break
        return (node.start_mark.line + 1) if node is not None else 1

    if isinstance(data, list):
        data = {"cases": data}
    if not isinstance(data, dict) or "cases" not in data:
        raise EvalError(f"{path}:1: a dataset is a mapping with \"cases\" (or a list of cases)")
    unknown = set(data) - {"cases", "defaults", "evaluators", "variants"}
    if unknown:
        key = sorted(unknown)[0]
        raise EvalError(f"{path}:{line((key,))}: {key}: unknown key; a dataset has cases, "
                        "defaults, evaluators and variants")
    return _build(data, path, digest, line)


def _from_jsonl(path: Path, text: str, digest: str) -> Dataset:
    cases, lines = [], []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            cases.append(json.loads(raw))
        except json.JSONDecodeError as exc:
            raise EvalError(f"{path}:{n}: not valid JSON: {exc.msg} at column {exc.colno}") \
                from None
        lines.append(n)
    return _build({"cases": cases}, path, digest,
                  lambda loc: lines[loc[1]] if len(loc) > 1 and isinstance(loc[1], int)
                  and loc[1] < len(lines) else 1)


def _build(data: dict, path: Path, digest: str, line: Callable[[tuple], int]) -> Dataset:
    def fail(loc: tuple, message: str):
        field = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in loc).lstrip(".")
        raise EvalError(f"{path}:{line(loc)}: {field or 'dataset'}: {message}")

    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        fail(("defaults",), "must be a mapping of case fields")
    if not isinstance(data["cases"], list) or not data["cases"]:
        fail(("cases",), "must be a non-empty list of cases")
    base = str(path.parent.resolve())
    shared = [parse_evaluator(spec, ("evaluators", i), fail, base)
              for i, spec in enumerate(_list(data.get("evaluators"), ("evaluators",), fail))]
    cases, names = [], {}
    for i, raw in enumerate(data["cases"]):
        loc = ("cases", i)
        if not isinstance(raw, dict):
            fail(loc, "a case is a mapping with at least \"input\"")
        merged = {**defaults, **raw}
        specs = _list(merged.pop("evaluators", None), (*loc, "evaluators"), fail)
        merged["evaluators"] = [parse_evaluator(s, (*loc, "evaluators", j), fail, base)
                                for j, s in enumerate(specs)]
        case = _validated(Case, merged, loc, fail)
        case.name = case.name or f"case-{i + 1}"
        if case.name in names:
            fail((*loc, "name"), f"duplicate name {case.name!r} (first at case {names[case.name]})")
        names[case.name] = i + 1
        case.tools = [str(Path(base) / t) for t in case.tools]
        case.mcp_config = [str(Path(base) / t) for t in case.mcp_config]
        if case.output_type is not None:
            _check_schema(case.output_type, (*loc, "output_type"), fail)
        cases.append(case)
    variants = [parse_variant(v, ("variants", i), fail, base)
                for i, v in enumerate(_list(data.get("variants"), ("variants",), fail))]
    seen = [v.name for v in variants]
    if len(set(seen)) != len(seen):
        fail(("variants",), "variant names must be unique")
    return Dataset(cases=cases, evaluators=shared, variants=variants, path=path, hash=digest)


def _list(value: Any, loc: tuple, fail) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        fail(loc, "must be a list")
    return value


def _validated(model: type, data: Any, loc: tuple, fail):
    from pydantic import TypeAdapter

    try:
        return TypeAdapter(model).validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = tuple(k for k in first["loc"] if not (isinstance(k, str) and "[" in k))
        message = first["msg"] if first["type"] != "extra_forbidden" else "unknown field"
        fail((*loc, *where), message)


def parse_evaluator(spec: Any, loc: tuple, fail, base: str | None = None) -> ev.Evaluator:
    """`{KIND: VALUE, option: ...}` -> the evaluator; a bad one fails at `loc`. A `python:`
    module is looked for in `base` (the dataset's folder) too."""
    kinds = [k for k in spec if k in KINDS] if isinstance(spec, dict) else []
    if len(kinds) != 1:
        fail(loc, "an evaluator is a mapping with one of " + ", ".join(KINDS))
    kind = kinds[0]
    cls = KINDS[kind]
    main = next(f.name for f in fields(cls))
    options = {k: v for k, v in spec.items() if k != kind}
    known = [f.name for f in fields(cls) if f.name not in (main, "base")]
    for option in options:
        if option not in known:
            fail((*loc, option), f"unknown option of {kind}; it takes "
                 + (", ".join(known) or "none"))
    if kind == "trajectory":
        options["calls"] = [{"tool": c} if isinstance(c, str) else c
                            for c in _list(spec[kind], (*loc, kind), fail)]
        for i, call in enumerate(options["calls"]):
            extra = set(call) - {"tool", "args", "args_match"} if isinstance(call, dict) else ()
            if extra:
                fail((*loc, kind, i, sorted(extra)[0]), "unknown key of a call; it takes tool, "
                     "args and args_match")
        if options.get("mode", "in_order") not in MODES:
            fail((*loc, "mode"), f"{options['mode']!r} is not one of {', '.join(MODES)}")
    else:
        options[main] = spec[kind]
    evaluator = _validated(cls, options, loc, fail)
    if kind == "regex":
        try:
            re.compile(evaluator.pattern)
        except re.error as exc:
            fail((*loc, kind), f"not a valid regular expression: {exc}")
    elif kind == "schema":
        _check_schema(evaluator.schema, (*loc, kind), fail)
    elif kind == "judge" and isinstance(evaluator.model, str) and base is not None:
        from ..models import anchored

        evaluator.model = anchored(evaluator.model, base)
    elif kind == "python":
        evaluator.base = evaluator.base or base
        if not re.fullmatch(r"[\w.]+:[\w.]+", str(evaluator.function)):
            fail((*loc, kind), "write it as module:function")
        try:
            evaluator.resolve()
        except Exception as exc:
            fail((*loc, kind), f"cannot load {evaluator.function}: {type(exc).__name__}: {exc}")
    return evaluator


def _check_schema(schema: Any, loc: tuple, fail) -> None:
    """Once, before any run: refs only inside it (no file read, no URL fetched), no loop,
    within the bounds of a schema someone chose to load."""
    if not isinstance(schema, dict):
        fail(loc, "a JSON Schema is a mapping")
    problem = schema_problem(schema, AUTHORED)
    if problem is not None:
        fail(loc, problem)


def parse_variant(spec: Any, loc: tuple, fail, base: str = ".") -> Variant:
    """A variant; its `scripted:FILE` model is read against `base` (the dataset's folder),
    as the dataset's other paths are."""
    from ..config import AgentConfig
    from ..models import anchored

    if not isinstance(spec, dict):
        fail(loc, "a variant is a mapping with a name")
    own = {k: v for k, v in spec.items() if k in Variant.model_fields}
    config = {k: v for k, v in spec.items() if k not in Variant.model_fields}
    for key in config:
        if key not in AgentConfig.model_fields:
            fail((*loc, key), "neither a variant field (name, model, temperature, base_url) "
                              "nor an AgentConfig field")
    _validated(AgentConfig, config, loc, fail)
    variant = _validated(Variant, {**own, "config": {**own.get("config", {}), **config}}, loc,
                         fail)
    if variant.model is not None:
        variant.model = anchored(variant.model, base)
    return variant
