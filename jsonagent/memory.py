"""The context policy: what each request shows of the stored history, under a token budget.

The stored history (`RunState.messages`) stays complete; the store and the transcript keep
every observation whole. Each request shows a view of it:

    system prompt | summary slot | (the run's question, when the summary covers it) | turns...

- Large observations are cut in the view, with a note telling the model so.
- A step is never shown without its observation: the history is cut between turns only.
- Before a request would go over budget, the context is compacted, in this order: older
  steps lose their thought (their answers stay); then the oldest turns are condensed into
  the summary by a plain-text request (`response_format=None`) to the run's model or
  `AgentConfig.summary_model`; if that fails, they are dropped, and an event says so. The
  summary request is the current context up to the cut plus one instruction, so it reuses
  the cached prefix too.
- A compaction goes well below the budget (`LOW_WATER`), and between two compactions the
  view only grows at its end: the prefix stays byte-identical for many steps, so llama.cpp's
  KV cache and endpoints' prompt caches stay warm.
- When even the newest turn does not fit, the run fails with a clear message: a request over
  budget is never sent.

The layout (summary, where it ends, which thoughts are hidden) lives in `RunState.memory`,
so a run resumed in another process shows the same context.
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import Any, Callable, Iterator

from . import events as ev
from .config import AgentConfig
from .errors import RunError, TryAgain
from .models import Capabilities, Model, capabilities
from .usage import Usage
from .notes import note
from .pricing import Price
from .state import Message, RunState, to_json

log = logging.getLogger("jsonagent")

LOW_WATER = 0.6
"""After a compaction the context fills at most this share of the budget."""
SUMMARY_SHARE = 8
"""A summary gets at most 1/SUMMARY_SHARE of the budget."""
KEEP_THOUGHTS = 2
"""The newest steps that keep their thought when older ones lose it."""
CHARS_PER_TOKEN_FLOOR = 3
"""Characters per token assumed when cutting observations: few tokenizers do worse on text."""
ESTIMATE_MARGIN = 1.1
"""An estimate is kept this far clear of the budget."""
OVERFLOW_SHARE = 0.8
"""After a request overflowed the model's window, the budget is this share of that request."""
FIRST_GUESS = 0.3
"""Tokens per character before the endpoint has reported any."""


class Memory:
    def __init__(self, model: Model, config: AgentConfig, style: Any,
                 call: Callable[..., Any] | None = None, caps: Capabilities | None = None):
        self.model, self.config, self.style = model, config, style
        self.call = call or (lambda fn, *args: fn(*args))
        """How a summary's model call is made: the loop's, so that a cancel stops it too."""
        self.caps = caps or capabilities(model)
        self.budget = budget(model, config)
        self.exact = self.caps.count_tokens is not None
        self.counting = ("exact" if self.exact else "estimate") if self.budget else ""
        self.estimates = False
        self._sized: tuple[list | None, int] = (None, 0)
        """Requests are counted beside the budget (a token limit's check): learn the ratio."""
        self._summariser: Model | None = None
        self._layout: tuple | None = None
        self._source: list[Message] | None = None
        self._shown_msgs: list[Message] = []

    # -- the view -----------------------------------------------------------------------------

    def view(self, state: RunState, extra: list[Message] = (), end: int | None = None
             ) -> list[Message]:
        """The style-neutral messages of the next request, under the current layout
        (with `end`, only the stored messages before it)."""
        m, msgs = state.memory, state.messages
        out = [msgs[0]]
        if m.start > 1:
            out.append(Message(role="user", content=note("summary_slot", summary=m.summary or "")))
            question = _question_at(state)
            if question is not None and question < m.start:
                out.append(msgs[question])
        end = len(msgs) if end is None else end
        return out + self._stored(state)[:end - m.start] + list(extra)

    def _stored(self, state: RunState) -> list[Message]:
        """The stored messages from `start` on, as shown. Each one is cut or bared once, not
        at every request: between two compactions (which change the layout) the history
        only grows."""
        m, msgs, limit = state.memory, state.messages, self.observation_chars
        layout = (m.start, m.bare, limit)
        if self._layout != layout or self._source is not msgs:
            self._layout, self._source, self._shown_msgs = layout, msgs, []
        shown = self._shown_msgs
        shown += [self._shown(msgs[i], i < m.bare, limit)
                  for i in range(m.start + len(shown), len(msgs))]
        return shown

    def count(self, state: RunState, messages: list[Message]) -> int:
        return self.tokens(state, self.style.render(messages, self.config.observation_role,
                                                    tool_calls=state.tool_calls))

    def tokens(self, state: RunState, wire: list[dict]) -> int:
        """The prompt tokens of a request as it is sent: exact where the model counts them,
        else estimated from its characters."""
        if self.exact:
            try:
                return self.caps.count_tokens(wire)
            except Exception as exc:  # a backend that cannot count after all: estimate
                log.warning("%s cannot count tokens (%s); estimating", self.caps.name, exc)
                self.exact, self.counting = False, "estimate"
        ratio = state.memory.tokens_per_char or FIRST_GUESS
        self._sized = (wire, _chars(wire))  # calibrate reads it again for the same request
        return math.ceil(self._sized[1] * ratio * ESTIMATE_MARGIN)

    def calibrate(self, state: RunState, wire: list[dict], usage: Usage) -> None:
        """Learn the endpoint's tokens per character from what it reports."""
        if (self.budget or self.estimates) and not self.exact and usage.prompt_tokens > 0:
            chars = self._sized[1] if self._sized[0] is wire else _chars(wire)
            state.memory.tokens_per_char = usage.prompt_tokens / max(chars, 1)

    @staticmethod
    def _shown(msg: Message, bare: bool, limit: int) -> Message:
        # the whole message within the cap means its response is too: no need to parse it
        if msg.role == "observation" and len(msg.content) > limit:
            body = json.loads(msg.content)
            response = body["response"]
            text = response if isinstance(response, str) else to_json(response)
            if len(text) > limit:
                body["response"] = note("cut", head=text[:limit], more=len(text) - limit)
                return Message(role="observation", content=to_json(body))
        elif msg.role == "assistant" and bare:
            step = json.loads(msg.content)
            if step.get("thought"):
                return Message(role="assistant",
                               content=to_json(step | {"thought": ""}))
        return msg

    @property
    def observation_chars(self) -> int:
        """Where an observation is cut: the config's cap, and at most a quarter of the budget
        (a fixed rule, so that a message looks the same in every request)."""
        limit = self.config.max_observation_chars
        if self.budget:
            limit = min(limit, max(self.budget // 4 * CHARS_PER_TOKEN_FLOOR, 200))
        return limit

    # -- fitting ------------------------------------------------------------------------------

    def fit(self, state: RunState, extra: list[Message], step: int) -> Iterator[ev.Event]:
        """Events of any compaction; returns the view to send, within the budget."""
        view = self.view(state, extra)
        if self.budget is None:
            return view
        need = self.count(state, view)
        if need <= self.budget:
            return view
        yield from self._compact(state, extra, step, need)
        view = self.view(state, extra)
        need = self.count(state, view)
        if need > self.budget:
            raise RunError(f"the context does not fit: the newest turn alone needs {need} tokens "
                           f"({self.counting}), over the budget of {self.budget}; raise "
                           "--max-context-tokens or use a model with a larger context")
        return view

    def overflowed(self, state: RunState, extra: list[Message], step: int) -> Iterator[ev.Event]:
        """The model said the request was over its window, which is then smaller than what
        was counted (or unknown): the budget falls below this request, and the context is
        compacted under it, as before any request over budget."""
        need = self.count(state, self.view(state, extra))
        was = self.budget, self.counting
        self.budget = min(self.budget or need, int(need * OVERFLOW_SHARE))
        self.counting = self.counting or ("exact" if self.exact else "estimate")
        compacted = False
        for event in self._compact(state, extra, step, need):
            compacted = compacted or isinstance(event, ev.ContextChange)
            yield event
        if not compacted:  # nothing older to condense: the same request goes again as it is
            self.budget, self.counting = was

    def _compact(self, state: RunState, extra: list[Message], step: int,
                 before: int) -> Iterator[ev.Event]:
        m = state.memory
        starts = _turn_starts(state.messages, m.start)
        target = int(self.budget * LOW_WATER)
        change = dict(step=step, tokens_before=before, budget=self.budget, counting=self.counting)
        if len(starts) > KEEP_THOUGHTS and m.bare < starts[-KEEP_THOUGHTS]:
            bare, m.bare = m.bare, starts[-KEEP_THOUGHTS]
            after = self.count(state, self.view(state, extra))
            if after <= target:
                yield ev.ContextChange(action="thoughts", covered=m.start - 1, tokens_after=after,
                                       **change)
                return
            m.bare = bare  # not enough: the summary request below keeps the cached prefix
        # the fewest oldest turns whose removal, with room for a summary, reaches the target
        room = self.budget // SUMMARY_SHARE
        cut = next((s for s in starts[1:] if self._without(state, extra, s) + room <= target),
                   starts[-1])
        if cut <= m.start:  # a single turn is left: nothing to condense
            return
        summary, failure = yield from self._summarise(state, cut, step)
        if summary is not None:
            m.summary = summary
        elif not (m.summary or "").endswith(note("summary_dropped")):
            m.summary = "\n".join(filter(None, [m.summary, note("summary_dropped")]))
        m.start = m.bare = cut
        after = self.count(state, self.view(state, extra))
        yield ev.ContextChange(action="summarised" if summary is not None else "dropped",
                               covered=cut - 1, tokens_after=after, reason=failure, **change)

    def _without(self, state: RunState, extra: list[Message], cut: int) -> int:
        """Tokens of the view if the turns before `cut` were condensed (the slot left empty)."""
        m = state.memory
        saved = (m.start, m.bare, m.summary)
        m.start, m.bare, m.summary = cut, max(m.bare, cut), ""
        try:
            return self.count(state, self.view(state, extra))
        finally:
            m.start, m.bare, m.summary = saved

    def _summarise(self, state: RunState, cut: int, step: int) -> Iterator[ev.Event]:
        """Condense the turns before `cut` (and the summary so far). The request is the view
        up to `cut`, which the KV cache or prompt cache already holds, plus one instruction.
        Returns (summary, None), or (None, why it failed)."""
        words = max(self.budget // SUMMARY_SHARE * 3 // 4, 30)
        request = self.view(state, [Message(role="user", content=note("summary_request", words=words))],
                            end=cut)
        wire = self.style.render(request, self.config.observation_role,
                                 tool_calls=state.tool_calls)
        model, t0 = self._summary_model(), time.perf_counter()
        summary, failure, usage = None, None, Usage()
        try:
            reply = self.call(model.complete, wire, None)
            usage, summary = reply.usage, reply.text.strip()
            if not summary:
                summary, failure = None, "the summary came back empty"
        except TryAgain:  # the request asks for it again (request.py), summary included
            raise
        except Exception as exc:  # a failed summary costs old turns, never the run
            failure = f"{type(exc).__name__}: {exc}"
            log.warning("summary failed (%s); dropping old turns", failure)
        if summary is not None:
            summary = summary[: self.budget // SUMMARY_SHARE * CHARS_PER_TOKEN_FLOOR]
        if model is self.model:  # a replayed script counts summaries among the model's calls
            state.stats.model_calls += 1
        usage = Price(capabilities(model)).priced(usage)
        state.usage.add(usage)
        yield ev.SummaryCall(step=step, model=capabilities(model).name,
                             messages=cut - state.memory.start, text=summary, error=failure,
                             usage=usage, latency_s=round(time.perf_counter() - t0, 4))
        return summary, failure

    def _summary_model(self) -> Model:
        if self.config.summary_model is None:
            return self.model
        if self._summariser is None:
            from .models import resolve_model

            self._summariser = resolve_model(self.config.summary_model,
                                             base_url=self.caps.base_url)
        return self._summariser


def budget(model: Model, config: AgentConfig) -> int | None:
    """The context budget: the model's window minus the reply's share, or the configured cap,
    whichever is smaller; None when neither is known."""
    window = capabilities(model).context_tokens
    limits = [b for b in (config.max_context_tokens,
                          window - config.reply_tokens if window else None) if b]
    return min(limits) if limits else None


def _turn_starts(messages: list[Message], start: int) -> list[int]:
    """Where each turn begins, from `start` on: a user message alone, or a step with its
    observations (one a call). The history is only ever cut at these points."""
    starts, i = [], start
    while i < len(messages):
        starts.append(i)
        step = messages[i].role == "assistant"
        i += 1
        while step and i < len(messages) and messages[i].role == "observation":
            i += 1
    return starts


def _question_at(state: RunState) -> int | None:
    """Index of this run's question, which stays in view even when the summary covers it."""
    for i in range(len(state.messages) - 1, 0, -1):
        msg = state.messages[i]
        if msg.role == "user" and msg.content == state.question:
            return i
    return None


def _chars(wire: list[dict]) -> int:
    return sum(len(str(m.get("content", ""))) + 8 for m in wire)
