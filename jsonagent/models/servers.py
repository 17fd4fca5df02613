"""Which OpenAI-compatible server answers at an endpoint, and the settings that suit it.

Asked once, when a model first needs to know (see OpenAIModel.server), from what the server
says of itself (its own entry of /v1/models, where it lists several):

| server                      | told by                                  | context window from        |
|-----------------------------|------------------------------------------|----------------------------|
| llama.cpp (llama-server)    | /v1/models `owned_by: "llamacpp"`, /props | /props n_ctx              |
| llama-cpp-python's server   | /v1/models `owned_by: "me"` + `permissions` | (not said)              |
| Ollama                      | /v1/models `owned_by: "library"` (the model's namespace), else /api/version | (not said) |
| vLLM                        | /v1/models `owned_by: "vllm"`            | /v1/models max_model_len   |
| LM Studio                   | /v1/models `owned_by: "organization_owner"` | /api/v0/models loaded_context_length |

Each server's best JSON enforcement and sampling are in PROFILES. Anything else is
"unknown" and keeps the defaults every endpoint gets. Detection never raises: a server
that does not answer is unknown for now (`answered` False), and asked again later.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .requests_loop import on_it, requests_loop

log = logging.getLogger("jsonagent.models")

TIMEOUT_S = 2.0
"""Per read: a local server answers these at once; a remote one that hangs costs this."""
ASK_AGAIN_S = 10.0
"""How long an endpoint where nobody answered detection is taken as unknown before it is
asked again: a server starting up is found soon after, and requests meanwhile don't each
wait for the probe (DEADLINE_S at most when it hangs)."""
DEADLINE_S = 5.0
"""All of detection, its few requests together: a per-read timeout never fires for an
endpoint that sends a byte a second, and detection holds the model's first request."""
MAX_ANSWER = 1 << 20
"""The most of one answer read; a listing past it is no answer."""


@dataclass(frozen=True)
class Profile:
    json_mode: str = "object"
    """The response_format to start with (config.JSON_MODES)."""
    schema_as_json_object: bool = False
    """Send a schema as `{"type": "json_object", "schema": ...}` (llama-cpp-python's dialect)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Sampling fields outside OpenAI's API, sent with every request."""
    keeps_max_length: bool = False
    """Its grammar holds a schema's maxLength: the thought's cap needs no watched stream."""
    tool_results_alone: bool = False
    """It takes a `tool` message no assistant `tool_calls` announced (see OpenAIModel)."""
    grammar_costly: bool = False
    """Its grammar costs more a token than the reply it constrains (models.Capabilities)."""
    stream_unmarked: bool = False
    """Its streams end with neither a finish_reason nor [DONE]: one is whole when its
    connection closes (on any other server such a stream was cut, and is asked for again)."""
    why: str = ""


PROFILES = {
    # GBNF from the schema, on the server; it keeps the prompt's KV cache between requests
    # only with cache_prompt (the default since late 2024, not before); repeat_penalty was
    # 1.1 by default in older builds
    "llama.cpp": Profile("schema", extra={"cache_prompt": True, "repeat_penalty": 1.0},
                         keeps_max_length=True,
                         why="json_schema grammar; prompt cache on; no repetition penalty"),
    # its response_format takes only text and json_object (with a schema: a grammar);
    # repeat_penalty defaults to 1.1. Its grammar slows each token (127 ms against 67 on
    # the 1.5B model), yet it is on from the first try: asked for without it first
    # (grammar_costly), 6 of 38 replies broke the envelope and were asked again
    "llama-cpp-python": Profile("schema", schema_as_json_object=True,
                                extra={"repeat_penalty": 1.0}, keeps_max_length=True,
                                tool_results_alone=True,
                                why="schema as json_object+schema (its dialect); no "
                                    "repetition penalty"),
    # format=schema through its OpenAI API since 0.5; its repeat_penalty and num_ctx are
    # not settable there (a Modelfile or OLLAMA_CONTEXT_LENGTH sets them)
    "ollama": Profile("schema", why="json_schema (its structured outputs); repeat_penalty "
                                    "and num_ctx are the Modelfile's"),
    # guided decoding; a model's generation_config.json may set repetition_penalty
    # (Qwen2.5's is 1.05), which vLLM applies unless the request says otherwise
    "vllm": Profile("schema", extra={"repetition_penalty": 1.0},
                    why="json_schema (guided decoding); no repetition penalty over the "
                        "model's generation_config"),
    # refuses json_object outright ('response_format.type' must be 'json_schema' or
    # 'text'); repeat_penalty defaults to 1.1
    "lmstudio": Profile("schema", extra={"repeat_penalty": 1.0},
                        why="json_schema (it refuses json_object); no repetition penalty"),
}


@dataclass(frozen=True)
class Server:
    kind: str
    """A PROFILES key, or "unknown"."""
    version: str | None = None
    context_tokens: int | None = None
    answered: bool = True
    """False when nobody answered (a connection refused, a timeout): the server may not be
    up yet, so the endpoint is asked again later (see OpenAIModel)."""

    @property
    def profile(self) -> Profile | None:
        return PROFILES.get(self.kind)


class Detection:
    """What answers at one endpoint, asked on first need and kept (OpenAIModel's). While
    nobody answers (a server not up yet), it is unknown, and asked again ASK_AGAIN_S later."""

    def __init__(self, base_url: str, api_key: str | None, model: str | None,
                 deadline: float = DEADLINE_S):
        self._ask = (base_url, api_key, model, deadline)
        self.found: Server | None = None
        self._unanswered: tuple[float, Server] | None = None
        """When the endpoint last did not answer, and what that found (unknown)."""
        self._lock = threading.Lock()

    def server(self, first: Callable[[Server], None]) -> Server | None:
        """The server, asked now if need be; `first` gets it once, when it is found."""
        if self.found is not None:
            return self.found
        if on_it():
            # asked from within a request (a stream's end): detection runs on this same
            # loop, so waiting for it, or for the lock its asker holds, would never end
            missed = self._unanswered
            return missed[1] if missed is not None else None
        import asyncio

        with self._lock:
            missed = self._unanswered
            if self.found is None and missed is not None \
                    and time.monotonic() - missed[0] < ASK_AGAIN_S:
                return missed[1]
            if self.found is None:
                base_url, api_key, model, deadline = self._ask
                found = asyncio.run_coroutine_threadsafe(
                    detect(base_url, api_key, model=model, deadline=deadline),
                    requests_loop()).result()
                if not found.answered:
                    self._unanswered = (time.monotonic(), found)
                    return found
                first(found)
                self.found = found
        return self.found


async def detect(base_url: str, api_key: str | None = None, timeout: float = TIMEOUT_S,
                 model: str | None = None, deadline: float = DEADLINE_S) -> Server:
    """Ask the endpoint what it is: its /v1/models (the entry of `model`, else the first),
    then what that points to; all within `deadline` seconds."""
    import asyncio

    import httpx

    root = base_url.rstrip("/")
    root = root[:-3] if root.endswith("/v1") else root
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with httpx.AsyncClient(timeout=timeout, headers=headers) as client:
            return await asyncio.wait_for(
                _detect(lambda path: _get(client, path), base_url.rstrip("/"), root, model),
                deadline)
    except httpx.HTTPError as exc:  # nobody there (yet), or a body not decoded: the requests
        log.debug("no server detected at %s: %s", base_url, exc)  # will say what is wrong
    except asyncio.TimeoutError:
        log.warning("%s did not say what server it is within %g s; taking it as unknown "
                    "for now", base_url, deadline)
    return Server("unknown", answered=False)


async def _detect(get, base: str, root: str, model: str | None = None) -> Server:
    models = await get(f"{base}/models")
    entries = models.get("data") if isinstance(models, dict) else None
    entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    # the model's own entry: a server may list several, of different owners or windows
    first = next((e for e in entries if e.get("id") == model), entries[0] if entries else {})
    owner = first.get("owned_by")
    if owner == "llamacpp":
        return _llama_cpp(await get(f"{root}/props"))
    if owner == "vllm":
        return Server("vllm", context_tokens=_int(first.get("max_model_len")))
    if owner == "organization_owner":
        return _lmstudio(await get(f"{root}/api/v0/models"), first.get("id"))
    if owner == "me" and "permissions" in first:
        return Server("llama-cpp-python")
    if owner == "library":
        return Server("ollama", version=_version(await get(f"{root}/api/version")))
    # a namespaced Ollama model (owned_by "someone"), or a llama.cpp older than owned_by
    version = _version(await get(f"{root}/api/version"))
    if version is not None:
        return Server("ollama", version=version)
    props = await get(f"{root}/props")
    if isinstance(props, dict) and "default_generation_settings" in props:
        return _llama_cpp(props)
    return Server("unknown")


def _llama_cpp(props: Any) -> Server:
    props = props if isinstance(props, dict) else {}
    settings = props.get("default_generation_settings") or {}
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    build = props.get("build_info")
    return Server("llama.cpp", version=build if isinstance(build, str) else None,
                  context_tokens=_int(n_ctx))


def _lmstudio(listing: Any, model_id: Any) -> Server:
    """/api/v0/models lists every model; the loaded one's window is its context."""
    entries = listing.get("data") if isinstance(listing, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("id") == model_id:
            return Server("lmstudio", context_tokens=_int(entry.get("loaded_context_length")))
    return Server("lmstudio")


async def _get(client, url: str) -> Any:
    """The JSON at `url`, or None for any answer that is not a 200 with JSON (of MAX_ANSWER
    bytes at most)."""
    body = bytearray()
    async with client.stream("GET", url) as response:
        if response.status_code != 200:
            return None
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_ANSWER:
                return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested past what can be read
        return None


def _version(answer: Any) -> str | None:
    version = answer.get("version") if isinstance(answer, dict) else None
    return version if isinstance(version, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
