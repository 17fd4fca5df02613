"""Handler bindings: how a spec's `handler` becomes a function the loop can call.

    "module:function" or {"python": ...}   imported lazily, called with the arguments as keywords
    {"command": [...], "stdin": "json"}    a subprocess, never through a shell
    {"http": {"method", "url", ...}}       one request with httpx

`bind(spec, base)` runs when a tool is loaded to run: it imports, finds the command and
resolves `${env:NAME}` secrets, so a mistake is a SpecError before the run starts. A failure
while the tool runs is a ToolError whose one line is what the model reads next.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote, urlsplit

from ..cancel import run_coroutine, watching
from ..errors import SpecError, ToolError
from ..calls import IDEMPOTENT, KEY_ENV, KEY_HEADER, keyed
from ..tracing import outgoing_headers
from .processes import dies_with_us, kill_group
from .spec_checks import ARG_REF, BRACED, ENV_REF
from .specs import ToolSpec

# What a command or an MCP server inherits from our environment; the rest (API keys above
# all) it gets only when its spec names it.
ENV_ALLOWLIST = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TEMP", "TMP",
                 "USER", "LOGNAME", "SYSTEMROOT")
COMMAND_TIMEOUT = 30.0
HTTP_TIMEOUT = 30.0
MAX_OUTPUT = 20_000
MAX_BYTES = 1_000_000
_MAX_REDIRECTS = 5


def bind(spec: ToolSpec, base: Path | None = None) -> Callable[..., Any]:
    """The callable behind `spec.handler`; raise SpecError if it cannot run at all."""
    handler = spec.handler
    if isinstance(handler, str):
        return python_handler(spec, handler, base)
    if "python" in handler:
        return python_handler(spec, handler["python"], base)
    if "command" in handler:
        return CommandHandler(spec, handler, base)
    return HttpHandler(spec, handler["http"])


def check(spec: ToolSpec, base: Path | None = None) -> None:
    """What `tools validate` checks of a handler beyond the schema: a Python handler imports.
    Commands and URLs are checked when the tool is loaded to run, with its secrets."""
    handler = spec.handler
    ref = handler if isinstance(handler, str) else (handler or {}).get("python")
    if ref:
        python_handler(spec, ref, base)


def with_defaults(spec: ToolSpec, args: dict[str, Any]) -> dict[str, Any]:
    """The arguments plus the schema's defaults for those left out: a command or a URL has
    no Python signature to supply them."""
    props = spec.parameters.get("properties", {})
    filled = {k: p["default"] for k, p in props.items()
              if isinstance(p, dict) and "default" in p and k not in args}
    return {**filled, **args}


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: os.environ[k] for k in ENV_ALLOWLIST if k in os.environ}
    env.update(extra or {})
    return env


def resolve_secrets(text: str, where: str) -> str:
    """Replace each ${env:NAME}; a variable that is not set is the spec author's error."""
    def one(m) -> str:
        value = os.environ.get(m.group(1))
        if value is None:
            raise SpecError(f"{where}: environment variable {m.group(1)} is not set "
                            f"(the spec reads it as ${{env:{m.group(1)}}})")
        return value

    return ENV_REF.sub(one, text)


def python_handler(spec: ToolSpec, ref: str, base: Path | None) -> Callable[..., Any]:
    obj = import_ref(spec, ref, base)
    from .tool import Tool

    if isinstance(obj, Tool):
        obj = obj.fn
    if not callable(obj):
        raise SpecError(f"{spec.origin} ({spec.name}): handler {ref!r} is not callable")
    return sync(obj)


def import_ref(spec: ToolSpec, ref: str, base: Path | None) -> Any:
    module_name, _, attr = ref.partition(":")
    # A handler module beside its spec file is the common case; make it importable, last in
    # line so that a file there can never shadow an installed package.
    if base is not None and str(base) not in sys.path:
        sys.path.append(str(base))
    try:
        obj = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # any import-time failure is the spec author's to fix
        raise SpecError(f"{spec.origin} ({spec.name}): cannot load handler {ref!r}: "
                        f"{type(exc).__name__}: {exc}") from None
    return obj


def sync(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` itself, or for an async function a sync one that runs it to the end (a cancel
    of the run cancels its task)."""
    if not inspect.iscoroutinefunction(fn):
        return fn

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return run_coroutine(fn(*args, **kwargs))

    return call


def observation(text: str, output: str, limit: int, what: str) -> Any:
    """Parsed JSON when it is JSON (or must be), else the text, cut to `limit` characters."""
    stripped = text.strip()
    if output != "text" and stripped:
        try:
            return json.loads(stripped)
        except json.JSONDecodeError as exc:
            if output == "json":
                raise ToolError(f"{what} was not JSON ({exc.msg} at line {exc.lineno} column "
                                f"{exc.colno}): {_snippet(stripped)}") from None
    elif output == "json":
        raise ToolError(f"{what} was empty, and JSON was expected")
    if len(text) > limit:
        return text[:limit] + f"\n[cut: {len(text) - limit} more characters]"
    return text


def _snippet(text: str, n: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= n else line[: n - 1] + "…"


def _render(value: Any) -> str:
    """An argument as it goes into argv or a URL: strings bare, everything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class CommandHandler:
    """Runs argv with the arguments substituted into whole-element placeholders."""

    stops_on_cancel = True  # a cancel kills its process group

    def __init__(self, spec: ToolSpec, handler: dict[str, Any], base: Path | None):
        self.spec = spec
        self.where = f"{spec.origin} ({spec.name})"
        self.argv = list(handler["command"])
        self.stdin_json = handler.get("stdin") == "json"
        self.timeout = float(handler.get("timeout", COMMAND_TIMEOUT))
        self.output = handler.get("output", "auto")
        self.limit = handler.get("max_output", MAX_OUTPUT)
        base = base or Path.cwd()
        self.cwd = str((base / handler["cwd"]).resolve()) if "cwd" in handler else None
        self.base = base
        self.env = base_env({k: resolve_secrets(v, f"{self.where}: /handler/env/{k}")
                             for k, v in handler.get("env", {}).items()})
        exe = self.argv[0]
        if not ARG_REF.match(exe):
            # A path with a slash is relative to the spec file, like a handler module is.
            found = os.path.abspath(base / exe) if "/" in exe else shutil.which(exe, path=self.env.get("PATH"))
            if found is None or not os.path.exists(found):
                raise SpecError(f"{self.where}: command {exe!r} not found"
                                + ("" if "/" in exe else " on PATH"))
            self.argv[0] = found

    def __call__(self, **args: Any) -> Any:
        args = with_defaults(self.spec, args)
        argv = []
        for item in self.argv:
            m = ARG_REF.match(item)
            if m is None:
                argv.append(item)
            elif args.get(m.group(1)) is not None:
                argv.append(_render(args[m.group(1)]))
        name = Path(self.argv[0]).name
        data = json.dumps(args, ensure_ascii=False).encode() if self.stdin_json else None
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE if data is not None
                                    else subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=keyed(self.env, KEY_ENV),
                                    cwd=self.cwd, start_new_session=True,
                                    preexec_fn=dies_with_us())
        except OSError as exc:
            raise ToolError(f"command {name!r} could not start: {exc.strerror or exc}") from None
        try:
            with watching(lambda: kill_group(proc, wait=False)):
                out, err = proc.communicate(data, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise ToolError(f"command {name!r} timed out after {self.timeout:g} s and was "
                            "killed") from None
        except BaseException:  # Ctrl-C while it runs: leave nothing behind
            kill_group(proc)
            raise
        finally:
            kill_group(proc, wait=False)
        text = out.decode("utf-8", "replace")
        if proc.returncode != 0:
            why = (f"killed by signal {-proc.returncode}" if proc.returncode < 0
                   else f"exited with status {proc.returncode}")
            detail = _snippet(err.decode("utf-8", "replace")) or _snippet(text) or "no output"
            raise ToolError(f"command {name!r} {why}: {detail}{self._where_it_ran(argv)}")
        return observation(text, self.output, self.limit, f"output of command {name!r}")

    def _where_it_ran(self, argv: list[str]) -> str:
        """When an argument names a file beside the spec that the caller's directory lacks
        (`["python3", "helper.py"]`): where the command ran, and how to run it beside the
        spec. The caller's directory stays the default, which `git log` and the like need."""
        if self.cwd is not None:
            return ""
        here = Path.cwd()
        beside = next((a for a in argv[1:] if a and not os.path.isabs(a)
                       and (self.base / a).is_file() and not (here / a).exists()), None)
        if beside is None:
            return ""
        return (f" (it ran in {here}, the caller's directory, and {beside!r} is beside the "
                f"spec in {self.base.resolve()}: \"cwd\": \".\" in the handler runs it there)")


class HttpHandler:
    """One request; arguments are percent-encoded into the URL path, query or JSON body."""

    stops_on_cancel = True  # a cancel cancels the request's task, closing its connection

    def __init__(self, spec: ToolSpec, http: dict[str, Any]):
        self.spec = spec
        self.where = f"{spec.origin} ({spec.name})"
        self.method = http.get("method", "GET").upper()
        self.effects = IDEMPOTENT if self.method in ("GET", "HEAD") else None  # reads only
        self.url = resolve_secrets(http["url"], f"{self.where}: /handler/http/url")
        self.query = {k: resolve_secrets(v, f"{self.where}: /handler/http/query/{k}")
                      if isinstance(v, str) else v for k, v in http.get("query", {}).items()}
        self.headers = {k: resolve_secrets(v, f"{self.where}: /handler/http/headers/{k}")
                        for k, v in http.get("headers", {}).items()}
        self.secret_headers = {k for k, v in http.get("headers", {}).items() if ENV_REF.search(v)}
        self.body = http.get("json")
        if self.body is not None:
            self.body = _resolve_tree(self.body, f"{self.where}: /handler/http/json")
        self.timeout = float(http.get("timeout", HTTP_TIMEOUT))
        self.max_bytes = http.get("max_bytes", MAX_BYTES)
        self.output = http.get("output", "auto")

    def __call__(self, **args: Any) -> Any:
        # async, so that a cancel of the run cancels the request and closes its connection;
        # the trace's headers are read here, in the tool call's own context
        return run_coroutine(self._request(args, keyed(outgoing_headers(), KEY_HEADER)))

    async def _request(self, args: dict[str, Any], trace: dict[str, str] | None = None) -> Any:
        import httpx

        args = with_defaults(self.spec, args)
        url = self._url(args)
        query = {}
        for key, value in self.query.items():
            m = ARG_REF.match(value) if isinstance(value, str) else None
            if m is None:
                query[key] = _render(value)
            elif args.get(m.group(1)) is not None:
                query[key] = _render(args[m.group(1)])
        body = _fill(self.body, args) if self.body is not None else None
        if body is None and self.body is None and self.method in ("POST", "PUT", "PATCH"):
            body = args
        where = _safe_url(url)
        headers = {**(trace or {}), **self.headers}  # the spec's own headers win
        try:
            async with httpx.AsyncClient(timeout=self.timeout, follow_redirects=False) as client:
                request = client.build_request(self.method, url, params=query or None,
                                               json=body, headers=headers)
                for _ in range(_MAX_REDIRECTS + 1):
                    response = await client.send(request, stream=True)
                    try:
                        if not response.is_redirect:
                            return await self._read(response, where)
                    finally:
                        await response.aclose()
                    request = self._follow(client, request, response)
                raise ToolError(f"{self.method} {where}: more than {_MAX_REDIRECTS} redirects")
        except httpx.TimeoutException:
            raise ToolError(f"{self.method} {where}: no answer within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise ToolError(f"{self.method} {where}: {type(exc).__name__}: {exc}") from None

    def _url(self, args: dict[str, Any]) -> str:
        parts = urlsplit(self.url)

        def one(m) -> str:
            value = args.get(m.group(1))
            # safe="" encodes "/" and "?" too: an argument is one path segment, never a route.
            return quote(_render(value if value is not None else ""), safe="")

        return parts._replace(path=BRACED.sub(one, parts.path)).geturl()

    def _follow(self, client, request, response):
        location = response.headers.get("location", "")
        target = request.url.join(location)
        headers = dict(request.headers)
        if target.host != request.url.host or target.scheme != request.url.scheme:
            # A secret is for the host the spec names; another host never sees it.
            for name in self.secret_headers:
                headers.pop(name, None)
                headers.pop(name.lower(), None)
            headers.pop("authorization", None)
        method = request.method
        content = request.content
        if response.status_code == 303 or (response.status_code in (301, 302)
                                           and method == "POST"):
            method, content = "GET", None
            headers.pop("content-type", None)
            headers.pop("content-length", None)
        return client.build_request(method, target, headers=headers, content=content)

    async def _read(self, response, where: str) -> Any:
        chunks, size = [], 0
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_bytes:
                break
        data = b"".join(chunks)[: self.max_bytes]
        text = data.decode(response.encoding or "utf-8", "replace")
        if not response.is_success:
            raise ToolError(f"HTTP {response.status_code} {response.reason_phrase} from "
                            f"{self.method} {where}: {_snippet(text) or 'empty body'}")
        if size > self.max_bytes:
            return text[:MAX_OUTPUT] + f"\n[cut: the response is larger than {self.max_bytes} bytes]"
        return observation(text, self.output, MAX_OUTPUT, f"response of {self.method} {where}")


def _safe_url(url: str) -> str:
    """The URL without its query, which may hold a key."""
    return urlsplit(url)._replace(query="", fragment="").geturl()


def _resolve_tree(node: Any, where: str) -> Any:
    if isinstance(node, str):
        return resolve_secrets(node, where)
    if isinstance(node, dict):
        return {k: _resolve_tree(v, f"{where}/{k}") for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve_tree(v, f"{where}/{i}") for i, v in enumerate(node)]
    return node


_ABSENT = object()


def _fill(node: Any, args: dict[str, Any]) -> Any:
    """The JSON body template with each "{arg}" string replaced by the argument, typed;
    a key whose argument was not given is left out."""
    def walk(n: Any) -> Any:
        if isinstance(n, str):
            m = ARG_REF.match(n)
            value = args.get(m.group(1)) if m else n
            return _ABSENT if value is None else value
        if isinstance(n, dict):
            out = {k: walk(v) for k, v in n.items()}
            return {k: v for k, v in out.items() if v is not _ABSENT}
        if isinstance(n, list):
            return [v for v in (walk(x) for x in n) if v is not _ABSENT]
        return n

    out = walk(node)
    return None if out is _ABSENT else out
