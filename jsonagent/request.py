"""One request of a step to the model: what the history shows within the budget, rendered
in the run's prompt style, sent, and the reply with its ModelCall event.

An endpoint's refusals change the run and the request is sent again: a refused JSON mode
steps down to the next weaker one, a refused tool-call form to plain messages. A request over
the model's window is summarised by the memory and sent again, once. A model that asks for
the request again (`errors.TryAgain`: a retry, or a fallback model's next model) gets it, after
the wait it asked for, rebuilt for what the model that answers declares. The events it
yields are the run's, numbered by the loop; live deltas are not numbered.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterator

from . import events as ev
from .cancel import CancelToken
from .config import JSON_MODES, AgentConfig
from .deps import RunDeps
from .errors import (Cancelled, ContextWindowExceeded, ModelError, ResponseFormatRejected,
                     ToolCallsRejected, TryAgain)
from .limits import Limits
from .memory import Memory
from .models import Capabilities, ModelReply, Usage
from .partial import ThoughtCap, ThoughtTooLong, reader_for
from .pricing import Price
from .state import Message, RunState

log = logging.getLogger("jsonagent")

_PARALLEL = {"parallel_tool_calls": True}
_GRAMMAR_HOLDS = ("json", "envelope", "tool", "calls")
"""The stages of a reply problem (reply.py) that no reply under the schema's grammar has."""

THOUGHT_CUT = "thought cut"
"""`usage.counting` of a reply the loop stopped where its thought passed the cap: its tokens
are estimated, and the envelope is not asked what it makes of it."""


class Requester:
    def __init__(self, deps: RunDeps, cancel: CancelToken,
                 watched: Callable[[], bool] | None, limits: Limits):
        self.model, self.toolset = deps.model, deps.toolset
        self.limits = limits
        self.style, self.hooks = deps.style, deps.hooks
        self.cancel, self._watched = cancel, watched
        self._followed = (deps.config.observation_role == deps.caps.observation_role,
                          deps.config.tool_calls == deps.caps.tool_calls)
        """The config's observation role and tool-call form are the model's own: a model
        that takes over brings its own (see `_declared`)."""
        self._declared(deps.caps, deps.config)
        self.bare = self._schema = False

    def _declared(self, caps: Capabilities, config: AgentConfig) -> None:
        """What requests are built from: the capabilities of the model that answers."""
        self.caps, self.config = caps, config
        # slow calls are waited on through the token, so a cancel ends the wait at once
        self.call = self.cancel.call_here if caps.stops_on_cancel else self.cancel.call
        self.watched = self._watched if caps.streams else None
        """Asked before each model call: is someone watching the reply as it is written?
        Only then is it streamed, and delta events built."""
        self.memory = Memory(self.model, config, self.style, self.call, caps)
        self.memory.estimates = self.limits.counts_requests
        self.price = Price(caps)

    def start(self, s: RunState) -> None:
        """A run starts or resumes with the primary model (a fallback model's route starts
        there again), but its state may carry what another model brought: the JSON mode and
        tool-call form of a fallback that took over, in this run or in the session's last.
        Neither may be stronger than what the primary declares (or the config fixed); a
        step-down the primary's endpoint asked for stays."""
        top = self.config.json_mode or self.caps.default_json_mode
        if JSON_MODES.index(s.json_mode) < JSON_MODES.index(top):
            s.json_mode = top
        s.tool_calls = s.tool_calls and bool(self.config.tool_calls)

    def ask(self, s: RunState, extra: list[Message], index: int, attempt: int,
            without: str | None = None) -> Iterator[ev.Event]:
        """The events of one model request; returns its reply."""
        shrunk = False
        """This model's window was exceeded once already (and the context summarised): the
        next overflow is the model's fallback (models/fallback.py), or the end."""
        over = False
        """The last request overflowed: the memory summarises before it goes again. It is
        done at the top of the next pass, inside the `try`, so that a summary request that
        asks to be sent again (a 429 for it) is handled as any request is."""
        while True:
            self._shown = False
            try:
                if over:
                    yield from self.memory.overflowed(s, extra, index)
                    over = False
                reply = yield from self._send(s, extra, index, attempt, without)
            except TryAgain as again:
                if again.fallback is not None:
                    shrunk = False  # another model, another window
                yield from self._again(s, again, index, attempt)
                continue
            except ContextWindowExceeded as exc:
                if shrunk:
                    raise
                shrunk = over = True  # the memory summarises, and the request goes again, once
                yield self._retried(s, exc, index, attempt, 0.0, "summarising the context")
                continue
            except ResponseFormatRejected as exc:
                yield self._step_down(s, str(exc))
                continue
            except ToolCallsRejected as exc:
                s.tool_calls = False  # said once: the plain form is not refused
                log.warning("endpoint refused the tool-call form (%s); sending tool results "
                            "as %s messages for the rest of the run", exc,
                            self.config.observation_role)
                continue
            self.memory.calibrate(s, self._wire, reply.usage)
            if reply.unended and not reply.usage.prompt_tokens:
                # a cut stream brings no usage, yet its prompt was read: counted as the memory
                # estimates it, or an endpoint that always cuts would pass every token limit
                reply.usage = reply.usage.model_copy(update={
                    "prompt_tokens": self.memory.tokens(s, self._wire),
                    "counting": reply.usage.counting or "estimate"})
            if self.memory.counting and not reply.usage.counting:  # how the budget was counted
                reply.usage = reply.usage.model_copy(update={"counting": self.memory.counting})
            reply.usage = self.price.priced(reply.usage)
            s.stats.model_calls += 1
            s.usage.add(reply.usage)
            self.hooks.call("after_model", s, reply)
            yield ev.ModelCall(step=index, attempt=attempt, raw=reply.text, usage=reply.usage,
                               json_mode=self._sent_mode,
                               finish_reason="length" if reply.cut else
                               None if reply.unended else "stop",
                               sampling=reply.sampling, model=reply.model,
                               latency_s=round(time.perf_counter() - self._t0, 4))
            return reply

    def _send(self, s: RunState, extra: list[Message], index: int, attempt: int,
              without: str | None) -> Iterator[ev.Event]:
        """The request, built from the history and what the model declares, and its reply."""
        fmt = self.style.response_format(s.json_mode, self.toolset,
                                         self.config.thought_max_chars, without)
        self.bare = bare = fmt is not None and self.caps.grammar_costly and \
            without is None and attempt == 0 < self.config.max_reasks
        """The try goes without the grammar: a reply the envelope accepts needed none, and
        one that breaks it is asked for again (attempt 1) under the grammar (see
        `rules_out`). The stall mask is the grammar's alone, so a masked step has it from
        the start, and so does a step with no re-ask left."""
        self._schema = s.json_mode == "schema"
        if bare:
            fmt = None
        self._sent_mode = s.json_mode if fmt is not None or self.style.stop else "prompt"
        # first, so that a summary the memory asks for goes where the request goes (a
        # fallback model's hook says which of its models answers the run)
        self.hooks.call("before_model", s)
        # memory decides what of the history this request shows, within the budget
        view = yield from self.memory.fit(s, extra, index)
        self._wire = wire = self.style.render(view, self.config.observation_role,
                                              tool_calls=s.tool_calls)
        self.limits.check(s, tokens=lambda: self.memory.tokens(s, wire), price=self.price)
        self._t0 = time.perf_counter()
        cap = self._thought_cap(s)
        # a step of several calls, in the tool-call form: the endpoint is told a reply may
        # hold several (a model that takes the form takes the keyword; see models/)
        more = _PARALLEL if s.tool_calls and self.style.most > 1 and self.caps.tool_calls \
            else {}
        try:
            if self.watched is not None and self.watched():
                reply = yield from self._streamed(s, wire, fmt, index, attempt, cap, more)
            elif cap is not None:
                reply = self.call(self.model.complete, wire, fmt, stop=self.style.stop,
                                  on_delta=cap.feed, **more)
            else:
                reply = self.call(self.model.complete, wire, fmt, stop=self.style.stop, **more)
        except ThoughtTooLong:  # stopped where the thought passed its cap, to be re-asked
            return ModelReply(text=cap.text, cut=True, usage=Usage(
                completion_tokens=len(cap.text) // 4, counting=THOUGHT_CUT))
        return self._held(reply) if bare else reply

    def rules_out(self, stage: str, cut: bool) -> bool:
        """Whether the last try went without the schema's grammar and its reply broke what
        the grammar holds: then it is asked for again under the grammar with the same
        messages, as though it had not been made, for a note about a mistake the grammar
        rules out only gives a small model something else to answer. A reply cut at the
        length limit, or in object mode, whose grammar holds no envelope, gets its note. So
        does one wrong in its arguments when no re-ask would be left after this one: a
        server's grammar holds what is required and of what type, but may skip a keyword
        such as `format`, and the try after the grammar's must then see the note."""
        if not (self.bare and self._schema and not cut):
            return False
        return stage in _GRAMMAR_HOLDS or stage == "args" and self.config.max_reasks > 1

    def _held(self, reply: ModelReply) -> ModelReply:
        """A reply written without the grammar whose maxLength holds the thought (see
        `_thought_cap`): one whose thought passed the cap is re-asked like a stopped one."""
        cap = self.config.thought_max_chars
        if cap is None:
            return reply
        try:
            ThoughtCap(cap).feed(reply.text)
        except ThoughtTooLong:
            return reply.model_copy(update={"cut": True, "usage": reply.usage.model_copy(
                update={"counting": THOUGHT_CUT})})
        return reply

    def _again(self, s: RunState, again: TryAgain, index: int, attempt: int
               ) -> Iterator[ev.Event]:
        """The model asked for the request again: say so, wait (a cancel ends the wait at
        once), and, when another model took it over, build requests for that one."""
        if again.fallback is None:
            s.stats.retries += 1
            yield self._retried(s, again, index, attempt, again.wait_s, str(again))
        else:
            yield ev.ModelFallback(step=index, attempt=attempt, kind=again.kind,
                                   model=again.model or "", fallback=again.fallback,
                                   error=str(again.cause or again), restart=self._shown)
            self._took_over(s, again.takes_over)
        if again.wait_s > 0 and self.cancel.wait(again.wait_s):
            raise Cancelled(self.cancel.reason)

    def _retried(self, s: RunState, exc: Exception, index: int, attempt: int, wait_s: float,
                 said: str) -> ev.ModelRetry:
        cause = getattr(exc, "cause", None) or exc
        return ev.ModelRetry(step=index, attempt=attempt, kind=getattr(exc, "kind", "model_error"),
                             model=getattr(cause, "model", None) or self.caps.name,
                             wait_s=round(wait_s, 3), error=str(cause), said=said,
                             restart=self._shown)

    def _took_over(self, s: RunState, caps: Capabilities) -> None:
        """Another model answers from now on: its JSON mode, tool-call form, observation
        role, streaming and context window, unless the config fixed them."""
        role, form = self._followed
        config = self.config.model_copy(update={
            **({"observation_role": caps.observation_role} if role else {}),
            **({"tool_calls": caps.tool_calls} if form else {})})
        self._declared(caps, config)
        s.json_mode = config.json_mode or caps.default_json_mode
        s.tool_calls = bool(config.tool_calls)

    def _thought_cap(self, s: RunState) -> ThoughtCap | None:
        """What stops a thought that runs on, where the model's decoding may not: a server's
        grammar that ignores maxLength, or object mode, which has none. A try without the
        grammar (`grammar_costly`) is not streamed for it, since a stream would cost
        llama-cpp-python's server a request to count its tokens, which leaves the reply out
        of its prompt cache: its thought is measured whole once written (`_held`)."""
        cap = self.config.thought_max_chars
        caps = self.caps
        if cap is None or not caps.streams or caps.writes_ahead or self.style.stop \
                or caps.keeps_max_length and s.json_mode == "schema":
            return None  # (a text style, with its stop sequence, writes no JSON thought)
        return ThoughtCap(cap)

    def _streamed(self, s: RunState, wire: list, fmt: dict | None, index: int,
                  attempt: int, cap: ThoughtCap | None, more: dict) -> Iterator[ev.Delta]:
        """The model call, with what its reply makes known as it is written (live only)."""
        reader = reader_for()
        stop = self.style.stop

        def write(emit: Callable[[str], None]) -> ModelReply:
            if cap is None:
                return self.model.complete(wire, fmt, stop=stop, on_delta=emit, **more)

            def on_delta(piece: str) -> None:
                emit(piece)
                cap.feed(piece)
            return self.model.complete(wire, fmt, stop=stop, on_delta=on_delta, **more)

        writing = self.cancel.stream(write)
        while True:
            try:
                piece = next(writing)
            except StopIteration as done:
                return done.value
            for kind, value in reader.feed(piece):
                self._shown = True  # what is shown is void if the request goes again
                delta = ev.DELTAS[kind](**{"name" if kind == "tool" else "text": value})
                delta.run_id, delta.session_id, delta.step, delta.attempt = \
                    s.run_id, s.session_id, index, attempt
                yield delta

    def _step_down(self, s: RunState, reason: str) -> ev.JsonModeChange:
        """The endpoint refused our response_format: use the next weaker mode from now on."""
        if s.json_mode == "prompt":
            raise ModelError(reason)
        old = s.json_mode
        s.json_mode = JSON_MODES[JSON_MODES.index(old) + 1]
        log.warning("endpoint rejected json mode %r (%s); using %r for the rest of the run",
                    old, reason, s.json_mode)
        return ev.JsonModeChange(old=old, new=s.json_mode, reason=reason)
