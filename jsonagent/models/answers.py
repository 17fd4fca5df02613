"""What an OpenAI-compatible endpoint sends back, read as anything at all: its usage counts,
a body that is not a chat completion, and whether a stream came to its end."""

from __future__ import annotations

from typing import Any, Callable

from ..errors import ModelError
from ..usage import Usage

UNENDED = "unended"
"""The finish of a stream that stopped without its end (neither a finish_reason nor [DONE]):
a reply cut off, whose JSON may look whole (models.ModelReply.unended)."""
HEAD_CHARS = 120
"""How much of a body that is not a chat completion its error shows."""


def watch_done(stream) -> Callable[[], bool]:
    """Whether the stream's [DONE] came, which the SDK reads without a word: its event
    decoder is watched. With an SDK that reads it otherwise, never (a finish_reason ends
    a stream all the same)."""
    inner = getattr(stream, "_decoder", None)
    if inner is None or not hasattr(inner, "aiter_bytes"):
        return lambda: False
    seen: list[bool] = []

    class Watched:
        def iter_bytes(self, iterator):
            return inner.iter_bytes(iterator)

        async def aiter_bytes(self, iterator):
            async for sse in inner.aiter_bytes(iterator):
                if sse.data.startswith("[DONE]"):
                    seen.append(True)
                yield sse

    stream._decoder = Watched()
    return lambda: bool(seen)


async def head_of(response) -> str:
    """The first few hundred bytes of a body, as text, reading no more of it."""
    head = b""
    async for part in response.aiter_bytes():
        head += part
        if len(head) > 4 * HEAD_CHARS:
            break
    return head.decode("utf-8", "replace")


def no_choices(base_url: str, where: dict, kind: str, body: str,
               streamed: bool = False) -> ModelError:
    """What came back instead of a chat completion, in one line: its content type and
    the head of its body (an HTML page from a proxy, garbage, a whole reply's JSON to a
    streamed request); each was "returned no choices", which said nothing."""
    kind = kind.split(";")[0].strip() or "no content type"
    shown = " ".join(body.split())
    shown = shown[:HEAD_CHARS] + ("..." if len(shown) > HEAD_CHARS else "")
    asked = "a streamed request" if streamed else "the request"
    what = f"{kind}, starting {shown!r}" if shown else \
        f"{kind} and no server-sent events" if streamed else f"{kind} and an empty body"
    return ModelError(f"{base_url} returned no choices: it answered {asked} with {what}",
                      **where)


def reported_usage(base_url: str, where: dict, u: Any, **counted: int) -> Usage:
    """The usage the endpoint reported (None: it reported none), whose counts the SDK
    passes on as the JSON held them; `counted`: those counted here instead."""
    if u is None:
        return Usage(**counted)
    details = getattr(u, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None)  # optional, and often null
    counts = {"prompt_tokens": getattr(u, "prompt_tokens", 0),
              "completion_tokens": getattr(u, "completion_tokens", 0),
              "cached_tokens": 0 if cached is None else cached, **counted}
    try:
        return Usage.reported(**counts)
    except ValueError as exc:
        raise ModelError(f"{base_url} reported a usage its token limits cannot count: {exc}",
                         **where) from None
