"""Model backends: transport only. A backend never parses the step envelope."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

Message = dict[str, Any]


class Usage(BaseModel):
    prompt_tokens: int = 0
    """Tokens in the prompt, as the backend counted them."""
    completion_tokens: int = 0
    """Tokens generated."""
    cached_tokens: int = 0
    """Prompt tokens served from a reused prefix (KV cache), when the backend reports it."""
    counting: str = ""
    """How the context budget counted tokens: "exact" (the backend's own tokenizer) or
    "estimate" (characters, calibrated against the prompt_tokens the endpoint reports);
    "" when no budget applied."""

    def add(self, other: "Usage") -> None:
        """Count `other` in, in place: a run adds every reply's usage to its own, and a new
        model each step cost more than the rest of the bookkeeping. The fields are plain
        numbers we own, so they are set past pydantic's __setattr__."""
        d = self.__dict__
        d["prompt_tokens"] += other.prompt_tokens
        d["completion_tokens"] += other.completion_tokens
        d["cached_tokens"] += other.cached_tokens
        d["counting"] = other.counting or self.counting


class ModelReply(BaseModel):
    text: str
    """The raw reply, exactly as the model produced it."""
    usage: Usage = Usage()
    cut: bool = False
    """The reply reached its token cap before it ended (finish_reason "length")."""


@runtime_checkable
class Model(Protocol):
    """One method: messages and an optional OpenAI-style response_format in, text out.

    `stop` lists sequences that end the reply early (not included in the text); a prompt
    style sends them, as ReAct sends `Observation:`.

    Optional: `count_tokens(messages) -> int`, the exact prompt tokens of a request, and
    `context_tokens`, the model's context window; the context budget uses them when present.

    Raise `errors.ResponseFormatRejected` when the endpoint refuses the response_format,
    and `errors.ModelError` for anything else that is not recoverable.
    """

    name: str

    def complete(self, messages: list[Message], response_format: dict | None, *,
                 stop: list[str] | None = None) -> ModelReply: ...


def resolve_model(spec: str | None = None, *, base_url: str | None = None,
                  api_key: str | None = None, kv_cache: bool = True, on_status=None) -> Model:
    """'scripted:FILE.json', 'local', 'local:PATH.gguf', 'openai:NAME' or any endpoint's model name.

    `kv_cache` and `on_status` (told what slow thing happens now, None when it is over) are
    for the local backend and ignored by the others.
    """
    import os

    from ..errors import ConfigError

    spec = spec or os.environ.get("JSONAGENT_MODEL")
    if not spec:
        raise ConfigError("no model: pass --model NAME or set JSONAGENT_MODEL "
                          "(for example gpt-4o-mini, local, or scripted:replies.json)")
    kind, _, rest = spec.partition(":")
    if kind == "scripted":
        from ..testing import ScriptedModel

        return ScriptedModel.from_file(rest)
    if kind == "local":
        if base_url:
            raise ConfigError(f"--model {spec} runs llama.cpp in this process, so --base-url "
                              "has nothing to do: to use the endpoint, give the model's name "
                              "there (or openai:NAME) as --model")
        from .local import LocalConfig, LocalModel

        return LocalModel.from_spec(rest or None, LocalConfig(kv_cache=kv_cache), on_status)
    from .openai import OpenAIModel

    return OpenAIModel(rest if kind == "openai" else spec, base_url=base_url, api_key=api_key)
