"""One request of a step to the model: what the history shows within the budget, rendered
in the run's prompt style, sent, and the reply with its ModelCall event.

An endpoint's refusals change the run and the request is sent again: a refused JSON mode
steps down to the next weaker one, a refused tool-call form to plain messages. The events
it yields are the run's, numbered by the loop; live deltas are not numbered.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterator

from . import events as ev
from .cancel import CancelToken
from .config import JSON_MODES
from .deps import RunDeps
from .errors import ModelError, ResponseFormatRejected, ToolCallsRejected
from .limits import Limits
from .memory import Memory
from .models import ModelReply, Usage
from .partial import ThoughtCap, ThoughtTooLong, reader_for
from .pricing import Price
from .state import Message, RunState

log = logging.getLogger("jsonagent")

THOUGHT_CUT = "thought cut"
"""`usage.counting` of a reply the loop stopped where its thought passed the cap: its tokens
are estimated, and the envelope is not asked what it makes of it."""


class Requester:
    def __init__(self, deps: RunDeps, cancel: CancelToken,
                 watched: Callable[[], bool] | None = None, limits: Limits | None = None):
        self.model, self.toolset, self.config = deps.model, deps.toolset, deps.config
        self.style, self.hooks, self.caps = deps.style, deps.hooks, deps.caps
        self.cancel = cancel
        # slow calls are waited on through the token, so a cancel ends the wait at once
        self.call = cancel.call_here if deps.caps.stops_on_cancel else cancel.call
        self.watched = watched if deps.caps.streams else None
        """Asked before each model call: is someone watching the reply as it is written?
        Only then is it streamed, and delta events built."""
        self.memory = Memory(self.model, self.config, self.style, self.call, deps.caps)
        self.limits = limits or Limits(deps.config, deps.toolset, deps.caps)
        self.memory.estimates = self.limits.counts_requests
        self.price = Price(deps.caps)

    def ask(self, s: RunState, extra: list[Message], index: int, attempt: int,
            without: str | None = None) -> Iterator[ev.Event]:
        """The events of one model request; returns its reply."""
        while True:
            fmt = self.style.response_format(s.json_mode, self.toolset,
                                             self.config.thought_max_chars, without)
            # memory decides what of the history this request shows, within the budget
            view = yield from self.memory.fit(s, extra, index)
            wire = self.style.render(view, self.config.observation_role,
                                     tool_calls=s.tool_calls)
            self.limits.check(s, tokens=lambda: self.memory.tokens(s, wire))
            self.hooks.call("before_model", s)
            t0 = time.perf_counter()
            cap = self._thought_cap(s)
            try:
                if self.watched is not None and self.watched():
                    reply: ModelReply = yield from self._streamed(s, wire, fmt, index, attempt,
                                                                  cap)
                elif cap is not None:
                    reply = self.call(self.model.complete, wire, fmt, stop=self.style.stop,
                                      on_delta=cap.feed)
                else:
                    reply = self.call(self.model.complete, wire, fmt, stop=self.style.stop)
            except ThoughtTooLong:  # stopped where the thought passed its cap, to be re-asked
                reply = ModelReply(text=cap.text, cut=True, usage=Usage(
                    completion_tokens=len(cap.text) // 4, counting=THOUGHT_CUT))
            except ResponseFormatRejected as exc:
                yield self._step_down(s, str(exc))
                continue
            except ToolCallsRejected as exc:
                s.tool_calls = False  # said once: the plain form is not refused
                log.warning("endpoint refused the tool-call form (%s); sending tool results "
                            "as %s messages for the rest of the run", exc,
                            self.config.observation_role)
                continue
            self.memory.calibrate(s, wire, reply.usage)
            if self.memory.counting and not reply.usage.counting:  # how the budget was counted
                reply.usage = reply.usage.model_copy(update={"counting": self.memory.counting})
            reply.usage = self.price.priced(reply.usage)
            s.stats.model_calls += 1
            s.usage.add(reply.usage)
            self.hooks.call("after_model", s, reply)
            yield ev.ModelCall(step=index, attempt=attempt, raw=reply.text, usage=reply.usage,
                               json_mode=s.json_mode,
                               finish_reason="length" if reply.cut else "stop",
                               sampling=reply.sampling,
                               latency_s=round(time.perf_counter() - t0, 4))
            return reply

    def _thought_cap(self, s: RunState) -> ThoughtCap | None:
        """What stops a thought that runs on, where the model's decoding may not: a server's
        grammar that ignores maxLength, or object mode, which has none."""
        cap = self.config.thought_max_chars
        caps = self.caps
        if cap is None or not caps.streams or caps.writes_ahead or self.style.stop \
                or caps.keeps_max_length and s.json_mode == "schema":
            return None  # (a text style, with its stop sequence, writes no JSON thought)
        return ThoughtCap(cap)

    def _streamed(self, s: RunState, wire: list, fmt: dict | None, index: int,
                  attempt: int, cap: ThoughtCap | None) -> Iterator[ev.Delta]:
        """The model call, with what its reply makes known as it is written (live only)."""
        reader = reader_for()
        stop = self.style.stop

        def write(emit: Callable[[str], None]) -> ModelReply:
            if cap is None:
                return self.model.complete(wire, fmt, stop=stop, on_delta=emit)

            def on_delta(piece: str) -> None:
                emit(piece)
                cap.feed(piece)
            return self.model.complete(wire, fmt, stop=stop, on_delta=on_delta)

        writing = self.cancel.stream(write)
        while True:
            try:
                piece = next(writing)
            except StopIteration as done:
                return done.value
            for kind, value in reader.feed(piece):
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
