"""Any OpenAI-compatible chat endpoint: OpenAI, DeepSeek, Qwen, vLLM, Ollama, llama.cpp."""

from __future__ import annotations

import logging
import os
import time
from typing import Callable

from ..cancel import watching
from ..config import REPLY_TOKENS
from ..errors import (Cancelled, ConfigError, ContentFiltered, ModelTimeout,
                      ModelUnavailable, ResponseFormatRejected, ToolCallsRejected,
                      model_error_for, retry_after_s)
from ..status import Reason
from . import Message, ModelReply, Usage
from .answers import (ODD_STREAM, UNENDED, as_text, head_of, ignore, no_choices,
                      reported_usage, stream_broke, watch_done)
from .refusals import (FORMAT_STATUSES, detail_of, is_openai, refuses_format, refuses_streaming,
                       refuses_tool_calls)
from .requests_loop import requests_loop, started
from .servers import DEADLINE_S as DETECTION_S
from .servers import Detection

log = logging.getLogger("jsonagent.models")

DEADLINE_S = 300.0
"""The longest one request may take, a streamed reply's last byte included (OpenAIModel's
`deadline`): the SDK's `timeout` bounds each read only, so an endpoint that sends a byte
every few seconds held a run for as long as it liked."""
# The in-process backend samples without a repetition penalty; llama.cpp's server adds 1.1
# unless told otherwise (repeat_penalty), vLLM takes repetition_penalty, Ollama's OpenAI API
# ignores both. OpenAI's own API refuses fields it does not know, so it never gets them.
_NO_PENALTY = {"repeat_penalty": 1.0, "repetition_penalty": 1.0}


class OpenAIModel:
    stops_on_cancel = True  # a cancel cancels the request, closing its connection
    streams = True
    tool_calls = True  # every OpenAI-compatible API has the tool turn; a refusal steps down

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None,
                 timeout: float = 120.0, max_retries: int = 0, temperature: float | None = 0.0,
                 max_tokens: int | None = REPLY_TOKENS, extra_body: dict | None = None,
                 detect: bool = True, provider: str | None = None, *,
                 keeps_max_length: bool | None = None, tool_results_alone: bool | None = None,
                 stream_unmarked: bool | None = None,
                 grammar_costly: bool | None = None, deadline: float = DEADLINE_S):
        """`temperature` 0 (the default) makes runs repeatable, as in-process; None leaves it
        to the server (0.8 on llama.cpp's, 1.0 on OpenAI's).

        `extra_body`: fields outside OpenAI's API sent with every request (llama.cpp's
        `repeat_penalty`, vLLM's `top_k`...), over what the server's detection sets.
        `detect`: ask the endpoint which server it is, once, when the model is first used
        (servers.py), and take that server's best JSON mode and sampling; OpenAI's own API
        is never asked. `provider` names who bills the tokens, for the run's cost, where the
        URL does not say (a proxy; see pricing.py).

        `keeps_max_length`, `tool_results_alone`, `grammar_costly`, `stream_unmarked`: what
        the endpoint does
        with a prompt (see servers.Profile, whose values None takes): its grammar holds
        maxLength, so the thought's cap needs no watched stream; it takes a `tool` message
        no `tool_calls` announced, so a step goes as its JSON alone, as its template renders
        in-process; its grammar slows every token, so a step is first asked for without
        one (models.Capabilities); its streams end with neither a finish_reason nor [DONE], so
        one is whole when its connection closes, where another's would be cut.

        `timeout` bounds each read of a request; `deadline`, the whole request, however
        slowly its bytes come (detection too, within servers.DEADLINE_S)."""
        try:
            import openai
        except ImportError:  # pragma: no cover - a core dependency
            raise ConfigError("the openai package is missing: pip install openai") from None
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            if not base_url:
                raise ConfigError("no API key: set OPENAI_API_KEY, or pass --base-url for a "
                                  "local server that needs none")
            api_key = "no-key"  # local servers (llama.cpp, Ollama, vLLM) ignore it
        self.name = model
        self.base_url = base_url or "https://api.openai.com/v1"
        self.provider = provider
        self.temperature = temperature
        self.sampling: dict = {} if temperature is None else {"temperature": temperature}
        """Sampling fields sent with each request; one the endpoint refuses is dropped."""
        self._extra_given = dict(extra_body or {})
        self.sampling_extra: dict = dict(self._extra_given) if is_openai(self.base_url) \
            else {**_NO_PENALTY, **self._extra_given}
        """The same, for fields outside OpenAI's API (sent through the SDK's extra_body)."""
        self._api_key = api_key
        self._declared = {"keeps_max_length": keeps_max_length,
                          "tool_results_alone": tool_results_alone,
                          "grammar_costly": grammar_costly,
                          "stream_unmarked": stream_unmarked}
        if not deadline > 0:
            raise ConfigError(f"deadline {deadline!r}: a request's deadline is seconds, > 0")
        self.deadline = deadline
        self._detection = Detection(self.base_url, api_key, model, min(DETECTION_S, deadline)) \
            if detect and not is_openai(self.base_url) else None
        self.max_tokens = max_tokens
        """Sent with every request: a model that writes without end (the 135M one repeated
        a clause for 3,534 tokens) is cut there, not at the context's end."""
        # The SDK's retries stay off (max_retries 0): one loop retries, ours (fallback.py).
        # Its async client, on an event loop of our own, so that a cancel of the run cancels
        # the request and closes its connection (the server then stops generating).
        self.timeout = timeout
        self._client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout,
                                          max_retries=max_retries)
        self._openai = openai
        # Once "json_schema" is refused, send the schema as {"type": "json_object", "schema": ...},
        # the dialect of llama-cpp-python's server, before giving up on schemas altogether.
        self._schema_as_json_object = False
        self._streams = True
        """False once the endpoint refused a streamed request: one fallback, said once."""
        self._slow_whole = False
        """A whole reply outlasted the read timeout once: the rest are streamed."""
        self._parallel = True
        """False once the endpoint refused parallel_tool_calls: it goes no more."""
        self._said_no_usage = False
        self._where = {"model": model, "endpoint": self.base_url}

    def complete(self, messages: list[Message], response_format: dict | None, *,
                 stop: list[str] | None = None,
                 on_delta: Callable[[str], None] | None = None,
                 parallel_tool_calls: bool = False, _ends: float | None = None) -> ModelReply:
        """`parallel_tool_calls`: a reply may hold several calls (sent until refused)."""
        def again() -> ModelReply:
            return self.complete(messages, response_format, stop=stop, on_delta=on_delta,
                                 parallel_tool_calls=parallel_tool_calls, _ends=ends)

        self._detected()
        if self.tool_results_alone:  # the step's JSON already holds the call
            messages = [{k: v for k, v in m.items() if k != "tool_calls"} for m in messages]
        kwargs = {"model": self.name, "messages": messages}
        if stop:
            kwargs["stop"] = stop
        if response_format is not None:
            kwargs["response_format"] = self._dialect(response_format)
        kwargs.update(self.sampling)
        if self.sampling_extra:
            kwargs["extra_body"] = dict(self.sampling_extra)
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        if parallel_tool_calls and self._parallel:
            kwargs["parallel_tool_calls"] = True
        streamed = self._streams and (on_delta is not None or self._slow_whole)
        # one deadline for the request, however often it is asked again below (streamed, or
        # without what was refused), set after detection (its own bound)
        ends = time.monotonic() + self.deadline if _ends is None else _ends
        try:
            text, u, finish = self._request(self._streamed(kwargs, on_delta or ignore)
                                            if streamed else self._whole(kwargs), ends)
        except self._openai.APIStatusError as exc:
            detail = detail_of(exc)
            if streamed and refuses_streaming(exc.status_code, detail):
                self._streams = False  # said once, remembered: the rest come whole
                log.warning("%s refused a streamed request (%s %s); asking for whole replies "
                            "from now on", self.base_url, exc.status_code, detail)
                return again()
            if self._drop_refused(exc.status_code, detail, "parallel_tool_calls" in kwargs):
                return again()
            if refuses_tool_calls(exc.status_code, detail, messages):
                raise ToolCallsRejected(f"{exc.status_code} for the tool-call form: "
                                        f"{detail}") from None
            if response_format is not None and refuses_format(exc.status_code, detail):
                if response_format["type"] == "json_schema" and not self._schema_as_json_object:
                    self._schema_as_json_object = True  # the same schema, in the other dialect
                    return again()
                raise ResponseFormatRejected(f"{exc.status_code} for response_format "
                                             f"{response_format['type']}: {detail}") from None
            response = getattr(exc, "response", None)
            raise model_error_for(exc.status_code, self._explain(exc.status_code, detail),
                                  retry_after=retry_after_s(getattr(response, "headers", None)),
                                  **self._where) from None
        except self._openai.APITimeoutError:
            if not streamed and self._streams and not self._slow_whole:
                # a whole reply sends nothing until written: 1,024 tokens under a local
                # server's grammar outlast the read timeout, whole again and again (a run
                # failed after 620 s so); streamed, each token shows the server is alive
                self._slow_whole = True
                log.warning("%s sent no whole reply within %g s; streaming replies from "
                            "now on", self.base_url, self.timeout)
                return again()
            raise ModelTimeout(f"{self.base_url} timed out", **self._where) from None
        except self._openai.APIConnectionError as exc:
            raise ModelUnavailable(f"cannot reach {self.base_url}: {exc.__cause__ or exc}",
                                   **self._where) from None
        if finish == "content_filter":
            raise ContentFiltered(f"{self.base_url} withheld the reply (its content filter)",
                                  **self._where)
        if on_delta is not None and not streamed and text:
            on_delta(text)  # a whole reply is its own only piece
        usage = u if isinstance(u, Usage) else reported_usage(self.base_url, self._where, u)
        return ModelReply(text=text, usage=usage, cut=finish == "length",
                          unended=finish == UNENDED,
                          sampling={**self.sampling, **self.sampling_extra})

    # -- what the server is (servers.py): asked once, the first time anything needs it ------

    @property
    def default_json_mode(self) -> str:
        found = self._detected()
        return found.profile.json_mode if found is not None and found.profile else "object"

    @property
    def keeps_max_length(self) -> bool:
        return self._said("keeps_max_length")

    @property
    def tool_results_alone(self) -> bool:
        return self._said("tool_results_alone")

    @property
    def grammar_costly(self) -> bool:
        return self._said("grammar_costly")

    @property
    def stream_unmarked(self) -> bool:
        return self._said("stream_unmarked")

    def _said(self, name: str) -> bool:
        """What the caller declared the endpoint does, else what its server's profile says."""
        if self._declared[name] is not None:
            return self._declared[name]
        found = self._detected()
        return bool(found is not None and found.profile and getattr(found.profile, name))

    @property
    def context_tokens(self) -> int | None:
        found = self._detected()
        return found.context_tokens if found is not None else None

    @property
    def server(self) -> dict | None:
        """What the endpoint was found to be and what that set, for the run's record."""
        found = self._detected()
        if found is None:
            return None
        profile = found.profile
        return {"kind": found.kind, "version": found.version,
                "context_tokens": found.context_tokens,
                "json_mode": profile.json_mode if profile else None,
                "extra_body": dict(self.sampling_extra),
                "schema_as_json_object": self._schema_as_json_object,
                "grammar_costly": self.grammar_costly}

    def _detected(self):
        """The server behind the endpoint (servers.Detection), or None when not asked."""
        return self._detection.server(self._take) if self._detection is not None else None

    def _take(self, found) -> None:
        """Apply a server's profile, once it is found, under what the user gave."""
        profile = found.profile
        if profile is not None:
            self.sampling_extra = {**profile.extra, **self._extra_given}
            self._schema_as_json_object = profile.schema_as_json_object
            log.info("%s is %s%s: %s", self.base_url, found.kind,
                     f" {found.version}" if found.version else "", profile.why)

    def _drop_refused(self, status: int, detail: str, parallel: bool = False) -> bool:
        """The endpoint refused a sampling field it names (a reasoning model takes only its
        default temperature; a strict server, an unknown field), or parallel_tool_calls (an
        API that takes it only beside `tools`): leave it out from now on."""
        if status not in FORMAT_STATUSES:
            return False
        words = detail.lower()
        if parallel and "parallel_tool_calls" in words:
            self._parallel = False
            log.warning("%s refused parallel_tool_calls (%s %s); sending requests without it "
                        "from now on", self.base_url, status, detail)
            return True
        refused = [k for k in [*self.sampling, *self.sampling_extra]
                   if k in words]
        for key in refused:
            self.sampling.pop(key, None)
            self.sampling_extra.pop(key, None)
        if refused:
            log.warning("%s refused %s (%s %s); sending requests without %s from now on",
                        self.base_url, ", ".join(refused), status, detail,
                        "them" if len(refused) > 1 else "it")
        return bool(refused)

    async def _whole(self, kwargs: dict) -> tuple[str, object, str | None]:
        raw = await self._client.chat.completions.with_raw_response.create(**kwargs)
        resp = raw.parse()  # the body's text, when it is not JSON
        choices = getattr(resp, "choices", None)
        if not (isinstance(choices, list) and choices and hasattr(choices[0], "message")):
            raise no_choices(self.base_url, self._where, raw.headers.get("content-type", ""),
                             raw.text)
        text = as_text(self.base_url, self._where, resp.choices[0].message) or ""
        return text, resp.usage, resp.choices[0].finish_reason

    async def _streamed(self, kwargs: dict, on_delta: Callable[[str], None]
                        ) -> tuple[str, object, str | None]:
        """The reply as it is written; the usage comes in the last chunk, so it stays exact.
        Cancelling the task (a cancel of the run) closes the stream and its connection. A
        stream that stops without its end has the finish UNENDED, however it was framed."""
        stream = await self._client.chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True})
        kind = stream.response.headers.get("content-type", "")
        if kind and "text/event-stream" not in kind:  # a page, or a whole reply's JSON
            try:
                head = await head_of(stream.response)
            finally:
                await stream.close()
            raise no_choices(self.base_url, self._where, kind, head, streamed=True)
        done = watch_done(stream)
        pieces: list[str] = []
        usage, finish, chosen, tokens = None, None, False, 0
        try:
            async for chunk in stream:
                usage = chunk.usage or usage
                if not chunk.choices:
                    continue
                chosen = True
                choice = chunk.choices[0]
                finish = choice.finish_reason or finish
                piece = as_text(self.base_url, self._where, choice.delta, streamed=True)
                if piece is not None:
                    tokens += 1  # a server without usage in streams sends a token a chunk
                if piece:
                    pieces.append(piece)
                    on_delta(piece)
        except self._openai.APIConnectionError as exc:
            if not pieces or isinstance(exc, self._openai.APITimeoutError):
                # nothing came, or a timeout (a subclass, and no cut stream: its own handling
                # streams from now on, or ends on ModelTimeout): as any request that failed
                raise
            # chunked or sized framing: the body broke off mid-reply, and what came is a head
            finish = finish or UNENDED
        except (self._openai.APIError, *ODD_STREAM) as exc:  # after its APIConnectionError
            raise stream_broke(self.base_url, self._where, exc) from None
        finally:
            await stream.close()
        if not chosen:
            raise no_choices(self.base_url, self._where, kind, "", streamed=True)
        if finish is None and not done() and not self.stream_unmarked:
            finish = UNENDED  # framed by the connection's close, a cut shows no error
        if usage is None:
            usage = Usage(completion_tokens=tokens) if finish == UNENDED \
                else await self._counted_afterwards(kwargs, tokens)
        return "".join(pieces), usage, finish

    async def _counted_afterwards(self, kwargs: dict, tokens: int) -> Usage:
        """The usage of a streamed reply from a server that ignores include_usage (llama-cpp-
        python's): the reply's tokens are its chunks, and the prompt's come exact from a
        one-token request on the same messages, which the server answers from the prompt it
        has just read (llama.cpp keeps it)."""
        if not self._said_no_usage:
            self._said_no_usage = True
            log.warning("%s sends no token usage in streamed replies (it ignores "
                        "stream_options.include_usage): counting them with one more short "
                        "request a reply", self.base_url)
        probe = await self._client.chat.completions.create(**{**kwargs, "max_tokens": 1})
        return reported_usage(self.base_url, self._where, getattr(probe, "usage", None),
                              completion_tokens=tokens)

    def _request(self, coroutine, ends: float):
        import asyncio
        import concurrent.futures

        async def bounded():
            try:
                return await asyncio.wait_for(coroutine, max(0.0, ends - time.monotonic()))
            except asyncio.TimeoutError:  # the SDK's own timeouts are APITimeoutError
                exc = ModelTimeout(f"{self.base_url} sent no whole reply within "
                                   f"{self.deadline:g} s (the request's deadline)",
                                   **self._where)
                exc.past_deadline = True  # asked again, it would hold the run as long again
                raise exc from None

        future = asyncio.run_coroutine_threadsafe(bounded(), requests_loop())
        with watching(future.cancel):
            try:
                return future.result()
            except concurrent.futures.CancelledError:
                raise Cancelled(Reason.CANCELLED) from None

    def close(self) -> None:
        """Close the client's connections; the model takes no requests after this."""
        import asyncio

        if started() is not None:
            asyncio.run_coroutine_threadsafe(self._client.close(), started()).result(timeout=10)

    def _dialect(self, response_format: dict) -> dict:
        if response_format["type"] == "json_schema" and self._schema_as_json_object:
            return {"type": "json_object", "schema": response_format["json_schema"]["schema"]}
        return response_format

    def _explain(self, status: int, detail: str) -> str:
        hint = {401: "check OPENAI_API_KEY", 403: "the key may lack access to this model",
                404: f"is {self.name!r} served at {self.base_url}?",
                429: "rate limited"}.get(status, "")
        if status >= 500:
            hint = "server error"
        # the model too: one endpoint serves several, and a key may fit only some of them
        return f"{self.base_url} answered {status} for model {self.name!r}: {detail}" + \
            (f" ({hint})" if hint else "")
