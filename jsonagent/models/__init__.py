"""Model backends: transport only. A backend never parses the step envelope."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from ..usage import Usage

Message = dict[str, Any]


class ModelReply(BaseModel):
    model_config = ConfigDict(defer_build=True)

    text: str
    """The raw reply, exactly as the model produced it."""
    usage: Usage = Field(default_factory=Usage)
    cut: bool = False
    """The reply reached its token cap (finish_reason "length"): acted on only when its JSON
    is whole as written, never once the repair had to close it."""
    unended: bool = False
    """The reply's end is not the model's: a stream that stopped without its end (neither a
    finish_reason nor [DONE]), or a constrained reply the decoder steered to a close at its
    cap. Never acted on, whatever its JSON: it is re-asked as a cut one is."""
    sampling: dict[str, Any] | None = None
    """The sampling settings this request carried, for the run's record (None: the backend
    does not say)."""
    model: str | None = None
    """The model that wrote it, when one of several could have (a fallback model's)."""


@runtime_checkable
class Model(Protocol):
    """One method: messages and an optional OpenAI-style response_format in, text out.

    `stop` lists sequences that end the reply early (not included in the text); a prompt
    style sends them, as ReAct sends `Observation:`.

    `on_delta`, when given, is called with each new piece of the raw text as it is written
    (from any thread); the pieces add up to the returned text, up to a stop sequence. The
    reply returned is the same either way. None (nobody is watching) costs nothing.

    A model that declares `tool_calls` also takes `parallel_tool_calls=True`, sent with the
    tool-call form when a step may make several calls (`AgentConfig.parallel_calls`): the
    endpoint is told a reply may hold several, as OpenAI's API says it.

    Raise `errors.ResponseFormatRejected` when the endpoint refuses the response_format,
    `errors.ToolCallsRejected` when it refuses the native tool-call form (a model that
    declares `tool_calls`), and `errors.ModelError` for anything else that is not
    recoverable.

    A backend may declare what `Capabilities` lists, as attributes of the same names;
    what it leaves out takes the default there.
    """

    name: str

    def complete(self, messages: list[Message], response_format: dict | None, *,
                 stop: list[str] | None = None,
                 on_delta: Callable[[str], None] | None = None) -> ModelReply: ...


@dataclass(frozen=True)
class Capabilities:
    """What the core may ask of a model beyond `complete`, with the defaults of a model
    that declares nothing. `capabilities(model)` reads them, once per agent."""

    name: str = "?"
    context_tokens: int | None = None
    """The context window (prompt and reply), when known: the context budget follows it."""
    count_tokens: Callable[[list[Message]], int] | None = None
    """The exact prompt tokens of a request; without it, tokens are estimated."""
    observation_role: str = "user"
    """The chat role tool results are sent in: "tool" where the template has a tool turn."""
    default_json_mode: str = "object"
    """The response_format to start with (see config.JSON_MODES)."""
    tool_calls: bool = False
    """The model takes the native tool-call form: a step as an assistant message with
    `tool_calls`, its results as `tool` messages with their `tool_call_id` (see prompt.py);
    and `complete(..., parallel_tool_calls=True)`."""
    base_url: str | None = None
    """Where an endpoint is (it names the endpoint in token estimates)."""
    stops_on_cancel: bool = False
    """A cancel of the run stops its call by itself (see cancel.py), so the loop may wait
    for it in its own thread."""
    streams: bool = False
    """`complete` takes `on_delta` (see Model): the reply can be shown as it is written."""
    keeps_max_length: bool = False
    """In schema mode its decoding keeps strings within the schema's maxLength (llguidance
    does). Otherwise the loop has the reply streamed and stops it once its thought passes
    the cap (a server's grammar may ignore maxLength, and object mode has none)."""
    grammar_costly: bool = False
    """Its grammar costs more a token than the reply it constrains: llama-cpp-python's
    server checks the whole vocabulary against it at every token (119 ms a token against
    67 without, on the 1.5B model; bench/free_first.py). The first try at a step then goes
    without one, and only a reply that breaks the envelope is asked again under it."""
    writes_ahead: bool = False
    """Its replies are fixed before they are asked for (a script, a replay): none can run
    on, so none is watched as it is written."""
    server: dict | None = None
    """The model server found behind an endpoint (models/servers.py) and what that set:
    recorded with each run."""
    hooks: tuple = ()
    """Hooks (see hooks.py) the model needs on every run: a replayed script follows the
    run's model calls."""
    provider: str | None = None
    """Who bills its tokens, as genai-prices names providers (openai, anthropic, deepseek,
    ...), for the run's cost (pricing.py). None: the one `base_url` names, when genai-prices
    knows it; else the cost is unknown."""
    free: bool = False
    """Its tokens cost nothing, by declaration (in-process llama.cpp): its cost is 0."""


def capabilities(model: Any) -> Capabilities:
    """The one place that asks a model what it has."""
    declared = {f.name: getattr(model, f.name) for f in fields(Capabilities)
                if getattr(model, f.name, None) is not None}
    return Capabilities(**declared)


def resolve_model(spec: str | None = None, *, base_url: str | None = None,
                  api_key: str | None = None, kv_cache: bool = True, on_status=None,
                  temperature: float | None = None, reply_tokens: int | None = None) -> Model:
    """'scripted:FILE.json', 'local', 'local:PATH.gguf', 'openai:NAME' or any endpoint's model name;
    'NAME@URL' is that model at the endpoint URL rather than at `base_url`.

    `temperature` None keeps each backend's default (0 for local and endpoint models);
    `reply_tokens` None, the backend's cap on a reply (`config.REPLY_TOKENS`).

    `kv_cache` and `on_status` (told what slow thing happens now, None when it is over) are
    for the local backend and ignored by the others.
    """
    import os

    from ..errors import ConfigError

    spec = spec or os.environ.get("JSONAGENT_MODEL")
    if not spec:
        raise ConfigError("no model: pass --model NAME or set JSONAGENT_MODEL "
                          "(for example gpt-4o-mini, local, or scripted:replies.json)")
    name, at, url = spec.rpartition("@")
    if at and url.startswith(("http://", "https://")):  # NAME@URL: a model at its own endpoint
        spec, base_url = name, url
    kind, _, rest = spec.partition(":")
    if kind == "scripted":
        from .scripted import ScriptedModel

        return ScriptedModel.from_file(rest)
    if kind == "local":
        if base_url:
            raise ConfigError(f"--model {spec} runs llama.cpp in this process, so --base-url "
                              "has nothing to do: to use the endpoint, give the model's name "
                              "there (or openai:NAME) as --model")
        from .local import LocalConfig, LocalModel

        sampling = {} if temperature is None else {"temperature": temperature}
        if reply_tokens is not None:
            sampling["max_tokens"] = reply_tokens
        return LocalModel.from_spec(rest or None, LocalConfig(kv_cache=kv_cache, **sampling),
                                    on_status)
    from .openai import OpenAIModel

    return OpenAIModel(rest if kind == "openai" else spec, base_url=base_url, api_key=api_key,
                       **({} if temperature is None else {"temperature": temperature}),
                       **({} if reply_tokens is None else {"max_tokens": reply_tokens}))


def anchored(spec: str, folder: str | Path) -> str:
    """`spec` with the relative path of a `scripted:FILE` or a `local:FILE.gguf` read against
    `folder`, made absolute: a dataset's are its folder's, and a stored run's must load from
    any directory. A catalog name (`local:qwen2.5-coder-1.5b`) is no path and stays."""
    from pathlib import Path

    kind, _, rest = spec.partition(":")
    path = kind == "scripted" or kind == "local" and (rest.endswith(".gguf") or "/" in rest)
    if not path or not rest:
        return spec
    return f"{kind}:{(Path(folder) / Path(rest).expanduser()).resolve()}"
