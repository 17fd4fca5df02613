"""What an OpenAI-compatible endpoint sends back, read as anything at all: its usage counts,
a body that is not a chat completion, and whether a stream came to its end."""

from __future__ import annotations

import json
from typing import Any, Callable

from ..errors import ModelError
from ..usage import Usage

UNENDED = "unended"
"""The finish of a stream that stopped without its end (neither a finish_reason nor [DONE]):
a reply cut off, whose JSON may look whole (models.ModelReply.unended)."""
HEAD_CHARS = 120
"""How much of a body that is not a chat completion its error shows."""


def ignore(piece: str) -> None:
    """Where a reply streamed for the transport's sake, not for a watcher, sends its pieces."""


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


ODD_STREAM = (UnicodeDecodeError, json.JSONDecodeError)
"""What the SDK raises on a stream that is not server-sent JSON: bytes that are not UTF-8 (it
reads events strictly), a `data:` line that is not JSON. Named, so that on_delta's own errors
are never read as the stream's."""


def as_text(base_url: str, where: dict, holder: Any, streamed: bool = False) -> str | None:
    """The content of a reply's message or a chunk's delta, which is text or nothing; a
    number or a list of parts would break the reply built from it, so it is an error of the
    endpoint that says what came."""
    content = getattr(holder, "content", None)
    if content is None or isinstance(content, str):
        return content
    shown = json.dumps(content, default=repr)
    shown = shown[:HEAD_CHARS] + ("..." if len(shown) > HEAD_CHARS else "")
    asked = "a streamed request" if streamed else "the request"
    raise ModelError(f"{base_url} returned no text: it answered {asked} with a content of "
                     f"{type(content).__name__} {shown}", **where)


def stream_broke(base_url: str, where: dict, exc: Exception) -> ModelError:
    """A stream that held something other than chunks: an error event mid-reply (`data:
    {"error": ...}`, which the SDK raises as a bare APIError), or one of ODD_STREAM; each
    was `internal error: ...`."""
    if isinstance(exc, UnicodeDecodeError):
        return ModelError(f"{base_url} sent a stream that is not UTF-8 text (byte "
                          f"{exc.start} of a chunk)", **where)
    if isinstance(exc, ValueError):
        said = f"a data line that is not JSON ({exc})"
    else:
        said = f"an error in place of a chunk: {' '.join(str(exc).split())[:HEAD_CHARS]}"
    return ModelError(f"{base_url} broke off a streamed reply with {said}", **where)


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
