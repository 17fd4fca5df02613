"""What an endpoint's error says it refused: streaming, the tool-call form, a response
format; and the endpoint's own words for it. OpenAIModel reads them (openai.py)."""

from __future__ import annotations

from typing import Any

FORMAT_STATUSES = {400, 415, 422}
# Words servers use when they refuse a response_format (OpenAI, vLLM, llama.cpp, Ollama).
# A 400 without them (a context overflow, a bad message) is not a reason to step down.
_FORMAT_WORDS = ("format", "schema", "json", "grammar", "guided", "structured")
# Words servers use when they refuse `tool` messages or `tool_calls` (a server that knows
# only the user and assistant roles, or checks tool_call_id against a schema of its own).
_TOOL_WORDS = ("tool", "role")
_OPENAI_HOSTS = ("openai.com", "openai.azure.com")


def refuses_streaming(status: int, detail: str) -> bool:
    """The endpoint refused `stream` (or `stream_options`): a client error naming it."""
    return 400 <= status < 500 and status not in (401, 403, 404, 429) and "stream" in detail.lower() \
        or status == 501


def refuses_tool_calls(status: int, detail: str, messages: list[dict[str, Any]]) -> bool:
    """A client error naming tools or roles, on a request that carried the tool-call form."""
    sent = any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)
    return sent and status in FORMAT_STATUSES and any(w in detail.lower() for w in _TOOL_WORDS)


def is_openai(base_url: str) -> bool:
    from urllib.parse import urlsplit

    host = (urlsplit(base_url).hostname or "").lower()
    return any(host == h or host.endswith("." + h) for h in _OPENAI_HOSTS)


def refuses_format(status: int, detail: str) -> bool:
    """The endpoint refused our response_format. llama-cpp-python's server answers a request it
    cannot validate with a 500 that names the field, so that counts too."""
    if status in FORMAT_STATUSES:
        return any(w in detail.lower() for w in _FORMAT_WORDS)
    return status == 500 and "response_format" in detail


def detail_of(exc) -> str:
    """The server's own words, in one line: SDK errors nest them in different places."""
    body, msg = getattr(exc, "body", None), None
    if isinstance(body, dict):
        err = body.get("error")
        msg = err.get("message") if isinstance(err, dict) else (body.get("message") or err)
    return " ".join(str(msg or getattr(exc, "message", exc)).split())[:300]
