"""The HTTP API from the server's own OpenAPI document, and the envelope's JSON Schema.

Rendered as static Markdown: the site loads no script from elsewhere, so it builds and reads
offline (no Swagger UI or Redoc from a CDN).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any


def _json(data: Any) -> str:
    return "```json\n" + json.dumps(data, indent=2, ensure_ascii=False) + "\n```"


def _type(schema: dict) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[1]
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    limits = [f"{k} {schema[k]}" for k in ("minimum", "maximum", "maxLength") if k in schema]
    return kind + (f" ({', '.join(limits)})" if limits else "")


def openapi() -> dict:
    """The document `GET /openapi.json` serves, from an app built on a throwaway store."""
    from jsonagent import Agent
    from jsonagent.server.app import create_app
    from jsonagent.server.runner import Runner
    from jsonagent.store import open_store
    from jsonagent.testing import ScriptedModel

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "openapi.db")
        try:
            # the app's routes and models only: nothing is started, no model is called
            return create_app(Runner(lambda: Agent(model=ScriptedModel([])), store)).openapi()
        finally:
            store.close()


def http() -> str:
    from reference import _cell, _table

    spec = openapi()
    out = [f"OpenAPI {spec['openapi']}, `{spec['info']['title']}` version {spec['info']['version']}.\n"]
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            out.append(f"### `{method.upper()} {path}`\n")
            if op.get("description"):
                out.append(op["description"] + "\n")
            params = [[f"`{p['name']}`", p["in"], "yes" if p.get("required") else "no",
                       _type(p.get("schema", {})), p.get("schema", {}).get("default", "")]
                      for p in op.get("parameters", [])]
            if params:
                out.append(_table(["parameter", "in", "required", "type", "default"], params) + "\n")
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                out.append(f"Body: `{_type(body['schema'])}` (JSON), below.\n")
            answers = [[code, _cell(r.get("description", ""))] for code, r in op["responses"].items()]
            out.append(_table(["status", "response"], answers) + "\n")
    out.append("## Bodies\n")
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        out.append(f"### `{name}`\n")
        if schema.get("description"):
            out.append(schema["description"] + "\n")
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        out.append(_table(["field", "type", "required", "default", "what it is"],
                          [[f"`{k}`", _type(v), "yes" if k in required else "no",
                            json.dumps(v["default"]) if "default" in v else "",
                            v.get("description", "")] for k, v in props.items()]) + "\n")
    return "\n".join(out)


def envelope() -> str:
    """The step every reply must be, and the response schema built for the built-in tools."""
    from jsonagent.envelope import response_schema
    from jsonagent.reply import CallEnvelope, ParallelStep, Step
    from jsonagent.tools.toolset import Toolset

    return "\n".join([
        "## The envelope\n",
        "`jsonagent.reply.Step`, which every reply is validated against:\n",
        _json(Step.model_json_schema()),
        "\n## The response schema of the built-in tools\n",
        "What schema mode sends as the response format for the four built-ins and the "
        "task-complete tool (`jsonagent.envelope.response_schema`): one alternative per tool, "
        "its name a constant and its arguments that tool's schema.\n",
        _json(response_schema(Toolset.build(None))),
        "\n## Several calls a step\n",
        "With `parallel_calls = N` from 2 on ([Several calls in one step]"
        "(../how-to/parallel-calls.md)), every reply is a `jsonagent.reply.ParallelStep`, each "
        "of its calls a `jsonagent.reply.CallEnvelope`:\n",
        _json(ParallelStep.model_json_schema()),
        _json(CallEnvelope.model_json_schema()),
        "\nSchema mode's response schema is then a list of 1 to N calls of the tools that are "
        "not final, or the final tool's call alone (here with N = 4):\n",
        _json(response_schema(Toolset.build(None), most=4)),
    ])
