"""Spans and metrics built from a run's events, in the OpenTelemetry GenAI conventions.

    invoke_agent jsonagent          one stretch of a run (a resumed run starts another,
    ├── chat {model}                linked to the one that paused); each model call, re-asks
    ├── execute_tool {name}         and summaries included; each tool call
    └── ...

The events come after the fact (a ModelCall says how long the call took), so a span is
started with the time its event reports, not when the builder sees it. Spans are kept per
run id: a sub-run's events reach its parent's stream, and a sub-run nests under the tool
call of its parent that started it. Only tracing.py imports this module, and only when
tracing is on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from opentelemetry import metrics, trace
from opentelemetry.propagate import extract, inject
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from . import events as ev
from .calls import call_index, call_key, sub_run_id
from .status import COMPLETED, NEEDS_HUMAN, Reason

SCOPE = "jsonagent"
_EXC_NAME = re.compile(r"^([A-Z][A-Za-z0-9_]*(?:Error|Exception|Exit|Timeout)): ")


def _ns(t: float) -> int:
    return int(t * 1e9)


def traceparent(span: Any) -> str | None:
    return _headers(span).get("traceparent")


def _context_of(parent: str | None):
    return extract({"traceparent": parent}) if parent else None


@dataclass
class _Run:
    span: Any
    model: str
    tool: Any = None
    """The execute_tool span in flight of a step of one call, if any."""
    tool_step: int = 0
    tool_name: str = ""
    parent: str | None = None
    """The run id of the run whose tool call started this one (a sub-run)."""
    calls: dict[int, Any] = field(default_factory=dict)
    """The execute_tool spans in flight of a step of several calls, by the call's index."""
    approved: dict[int, bool] = field(default_factory=dict)
    """Decisions on calls of a step of several, for their spans when they start."""

    def in_flight(self) -> Any:
        """The tool call span an HTTP call or a sub-run belongs under, if any (of calls
        side by side, the last started)."""
        return self.tool or next(reversed(self.calls.values()), None)

    def started(self, run_id: str, sub_run: str) -> Any:
        """The span of this run's call that started the sub-run (its id comes from the
        call's key), else the one in flight."""
        return next((span for i, span in self.calls.items()
                     if sub_run_id(call_key(run_id, self.tool_step, i)) == sub_run),
                    None) or self.in_flight()


class SpanBuilder:
    """A record like the journal: `write(event, state)` for every event of a session."""

    def __init__(self, toolset: Any = None, model: str = "", *, content: bool = False,
                 outgoing: Callable[[Any], None] = lambda span: None,
                 flush: Callable[[], None] | None = None,
                 tracer_provider: Any = None, meter_provider: Any = None):
        """`content`: record prompts, replies, arguments and results; `outgoing(span)` is
        told the span an HTTP call of a tool belongs under; the providers default to the
        global ones (`instrument()`)."""
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}",
            description="Number of input and output tokens used")
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s",
            description="GenAI operation duration (model calls and tool calls)")
        self.toolset, self.model, self._flush = toolset, model, flush
        self.content, self._outgoing = content, outgoing
        self.runs: dict[str, _Run] = {}

    def write(self, event: ev.Event, state: Any = None) -> None:
        handler = getattr(self, f"_on_{event.type}", None)
        if handler is not None:
            handler(event, state if state is not None and
                    getattr(state, "run_id", None) == event.run_id else None)

    def close(self) -> None:
        """End whatever is still open (a run abandoned mid-way), so nothing is lost."""
        for run_id in list(self.runs):
            run = self.runs.pop(run_id)
            self._end_tool(run, None)
            run.span.set_attribute("jsonagent.run.status", Reason.ABANDONED)
            run.span.end()
        self._outgoing(None)

    # -- the run ------------------------------------------------------------------------------

    def _start_run(self, event: ev.Event, state: Any, resumed: bool) -> None:
        model = getattr(event, "model", None) or getattr(state, "model", "") or self.model
        parent = self._parent(event, state)
        links = []
        previous = getattr(state, "span", None) if resumed else None
        linked = _context_of(previous)
        if linked is not None:
            links.append(Link(trace.get_current_span(linked).get_span_context(),
                              {"jsonagent.link": "resumed_from"}))
        attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": SCOPE,
                 "gen_ai.conversation.id": event.session_id, "jsonagent.run.id": event.run_id,
                 "gen_ai.request.model": model, "jsonagent.resumed": resumed}
        if getattr(event, "parent_run_id", None):
            attrs["jsonagent.run.parent_id"] = event.parent_run_id
            attrs["jsonagent.run.depth"] = int(getattr(event, "depth", 0) or 0)
        if self.content and isinstance(event, ev.RunStart):
            attrs["gen_ai.input.messages"] = _messages("user", event.question)
        span = self.tracer.start_span(f"invoke_agent {SCOPE}", context=parent, links=links,
                                      kind=SpanKind.INTERNAL, attributes=attrs,
                                      start_time=_ns(event.t))
        self.runs[event.run_id] = _Run(span=span, model=model,
                                       parent=getattr(event, "parent_run_id", None))
        self._outgoing(span)
        if state is not None and hasattr(state, "span"):
            # kept with the run, so that a resume in another process can link to this span
            state.span = traceparent(span)

    def _parent(self, event: ev.Event, state: Any):
        parent_id = getattr(event, "parent_run_id", None)
        parent_run = self.runs.get(parent_id) if parent_id else None
        if parent_run is not None:
            return trace.set_span_in_context(parent_run.started(parent_id, event.run_id)
                                             or parent_run.span)
        given = _context_of(getattr(state, "traceparent", None))
        if given is not None:
            return given
        return None  # the current context: the application's span, if it has one

    def _on_run_start(self, event: ev.RunStart, state: Any) -> None:
        self._start_run(event, state, resumed=False)

    def _on_run_resumed(self, event: ev.RunResumed, state: Any) -> None:
        self._start_run(event, state, resumed=True)

    def _on_run_end(self, event: ev.RunEnd, state: Any) -> None:
        run = self.runs.pop(event.run_id, None)
        if run is None:
            return
        self._end_tool(run, event.t)
        span = run.span
        span.set_attributes({
            "jsonagent.run.status": event.status,
            "gen_ai.usage.input_tokens": event.usage.prompt_tokens,
            "gen_ai.usage.output_tokens": event.usage.completion_tokens,
            **_cost(event.usage)})
        if event.status not in (COMPLETED, NEEDS_HUMAN):
            span.set_attribute("error.type", event.status)
            span.set_status(Status(StatusCode.ERROR, event.error or event.status))
        if self.content and event.answer is not None:
            span.set_attribute("gen_ai.output.messages", _messages("assistant", event.answer))
        span.end(end_time=_ns(event.t))
        parent = self.runs.get(run.parent) if run.parent else None
        # a sub-run's end hands the trace back to its parent's tool call, still in flight
        self._outgoing((parent.in_flight() or parent.span) if parent is not None else None)
        if not self.runs and self._flush is not None:
            self._flush()

    # -- model calls --------------------------------------------------------------------------

    def _chat(self, event: ev.Event, model: str, usage: Any, latency_s: float, kind: str,
              attrs: dict[str, Any], error: str | None = None) -> None:
        run = self.runs.get(event.run_id)
        if run is None:
            return
        base = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
        attrs = {**base, "jsonagent.call": kind, "jsonagent.step": event.step,
                 "gen_ai.usage.input_tokens": usage.prompt_tokens,
                 "gen_ai.usage.output_tokens": usage.completion_tokens, **_cost(usage),
                 **attrs}
        span = self.tracer.start_span(f"chat {model}", context=trace.set_span_in_context(run.span),
                                      kind=SpanKind.CLIENT, attributes=attrs,
                                      start_time=_ns(event.t - latency_s))
        if error:
            span.set_attribute("error.type", "summary_failed")
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=_ns(event.t))
        self.duration.record(latency_s, {**base, **({"error.type": "summary_failed"}
                                                    if error else {})})
        self.tokens.record(usage.prompt_tokens, {**base, "gen_ai.token.type": "input"})
        self.tokens.record(usage.completion_tokens, {**base, "gen_ai.token.type": "output"})

    def _on_model_reply(self, event: ev.ModelCall, state: Any) -> None:
        run = self.runs.get(event.run_id)
        if run is None:
            return
        finish = getattr(event, "finish_reason", None) or "stop"
        attrs: dict[str, Any] = {"gen_ai.response.finish_reasons": [finish],
                                 "jsonagent.attempt": event.attempt,
                                 "jsonagent.json_mode": event.json_mode}
        if self.content:
            attrs["gen_ai.output.messages"] = _messages("assistant", event.raw, finish)
        self._chat(event, run.model, event.usage, event.latency_s,
                   "reask" if event.attempt > 0 else "step", attrs)

    def _on_summary(self, event: ev.SummaryCall, state: Any) -> None:
        attrs: dict[str, Any] = {"jsonagent.summary.messages": event.messages}
        if self.content and event.text is not None:
            attrs["gen_ai.output.messages"] = _messages("assistant", event.text)
        self._chat(event, event.model, event.usage, event.latency_s, "summary", attrs,
                   error=event.error)

    def _on_model_retry(self, event: ev.ModelRetry, state: Any) -> None:
        self._mark(event, "jsonagent.model.retry", {
            "jsonagent.step": event.step, "error.type": event.kind,
            "gen_ai.request.model": event.model, "jsonagent.retry.wait_s": event.wait_s,
            "jsonagent.retry.restart": event.restart})

    def _on_model_fallback(self, event: ev.ModelFallback, state: Any) -> None:
        self._mark(event, "jsonagent.model.fallback", {
            "jsonagent.step": event.step, "error.type": event.kind,
            "gen_ai.request.model": event.model, "jsonagent.fallback.model": event.fallback,
            "jsonagent.retry.restart": event.restart})

    def _mark(self, event: ev.Event, name: str, attrs: dict[str, Any]) -> None:
        """A retry or a fallback is a moment in the run, not an operation: a span event."""
        run = self.runs.get(event.run_id)
        if run is not None:
            run.span.add_event(name, attrs, timestamp=_ns(event.t))

    # -- tool calls ---------------------------------------------------------------------------

    def _on_step(self, event: ev.StepTaken, state: Any) -> None:
        run = self.runs.get(event.run_id)
        if run is None:
            return
        self._end_tool(run, event.t)
        run.tool_step, run.tool_name = event.step, event.tool
        if event.calls:  # several calls: each has its span from its ToolCall
            return
        run.tool = self._tool_span(run, event.run_id, event.step, event.tool, event.t,
                                   event.args)
        self._outgoing(run.tool)

    def _on_tool_call(self, event: ev.ToolCall, state: Any) -> None:
        run = self.runs.get(event.run_id)
        if run is None:
            return
        span = self._tool_span(run, event.run_id, event.step, event.tool, event.t, event.args,
                               event.key)
        if event.call in run.approved:
            span.set_attribute("jsonagent.approved", run.approved.pop(event.call))
        run.calls[event.call], run.tool_step = span, event.step
        self._outgoing(span)

    def _tool_span(self, run: _Run, run_id: str, step: int, name: str, t: float,
                   args: Any = None, key: str | None = None) -> Any:
        attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool",
                                 "gen_ai.tool.name": name,
                                 "gen_ai.tool.call.id": key or f"{run_id}.{step}",
                                 "gen_ai.tool.type": "function", "jsonagent.step": step}
        if key is not None:
            attrs["jsonagent.call"] = call_index(key)
        server = self._server(name)
        if server:
            attrs["jsonagent.mcp.server"] = server
        if self.content and args is not None:
            attrs["gen_ai.tool.call.arguments"] = _json(args)
        return self.tracer.start_span(f"execute_tool {name}",
                                      context=trace.set_span_in_context(run.span),
                                      kind=SpanKind.INTERNAL, attributes=attrs,
                                      start_time=_ns(t))

    def _on_approval(self, event: ev.Approval, state: Any) -> None:
        run = self.runs.get(event.run_id)
        if run is None:
            return
        if _several(event, state):  # the call's span starts with its ToolCall, if it runs
            run.approved[event.call] = event.approved
            return
        if run.tool is None:  # approved after a pause: the call starts now
            run.tool = self._tool_span(run, event.run_id, event.step, event.tool, event.t)
            run.tool_step, run.tool_name = event.step, event.tool
        run.tool.set_attribute("jsonagent.approved", event.approved)
        self._outgoing(run.tool)

    def _on_tool_result(self, event: ev.ToolResult, state: Any) -> None:
        run = self.runs.get(event.run_id)
        if run is None:
            return
        span = run.calls.pop(event.call, None) if run.tool_step == event.step else None
        if span is None and run.tool is not None and run.tool_step == event.step:
            span, run.tool = run.tool, None
        if span is None:
            # resumed with an answer (in this process or another), or a call of several
            # that never started (denied, refused): its span starts from the time the
            # result reports
            if run.tool is not None:
                self._end_tool(run, event.t)
            several = _several(event, state)
            span = self._tool_span(run, event.run_id, event.step, event.tool,
                                   event.t - event.duration_s, key=call_key(
                                       event.run_id, event.step, event.call) if several else None)
            if event.call in run.approved:
                span.set_attribute("jsonagent.approved", run.approved.pop(event.call))
        base = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": event.tool}
        if event.error:
            kind = _error_type(event.observation)
            span.set_attribute("error.type", kind)
            # what the tool said is content: it goes in only on the opt-in
            span.set_status(Status(StatusCode.ERROR,
                                   _short(event.observation) if self.content else None))
            base["error.type"] = kind
        if self.content:
            span.set_attribute("gen_ai.tool.call.result", _json(event.observation))
        span.end(end_time=_ns(event.t))
        self.duration.record(event.duration_s, base)
        self._outgoing(run.in_flight() or run.span)

    def _end_tool(self, run: _Run, t: float | None) -> None:
        """Calls that got no result of their own: the final answer, a pause for a person."""
        for span in [run.tool, *run.calls.values()]:
            if span is not None:
                span.end(end_time=_ns(t) if t is not None else None)
        run.tool, run.calls = None, {}

    def _server(self, name: str) -> str | None:
        tool = self.toolset.get(name) if self.toolset is not None else None
        origin = getattr(getattr(tool, "spec", None), "origin", "") or ""
        return origin[len("mcp:"):] if origin.startswith("mcp:") else None


def _several(event: Any, state: Any) -> bool:
    """The event's step makes several calls (its run's state says so; else its index)."""
    steps = getattr(state, "steps", None)
    if steps and steps[-1].index == event.step:
        return len(steps[-1].calls) > 1
    return event.call > 0


def _headers(span: Any) -> dict[str, str]:
    carrier: dict[str, str] = {}
    inject(carrier, context=trace.set_span_in_context(span))
    return carrier


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _messages(role: str, content: Any, finish: str | None = None) -> str:
    text = content if isinstance(content, str) else _json(content)
    message: dict[str, Any] = {"role": role, "parts": [{"type": "text", "content": text}]}
    if finish:
        message["finish_reason"] = finish
    return _json([message])


def _error_type(observation: Any) -> str:
    """A low-cardinality name for a failed call: the exception's class when the loop wrote
    one (`ValueError: ...`), else tool_error."""
    message = observation.get("error") if isinstance(observation, dict) else None
    match = _EXC_NAME.match(message) if isinstance(message, str) else None
    return match.group(1) if match else "tool_error"


def _short(observation: Any) -> str:
    message = observation.get("error") if isinstance(observation, dict) else observation
    text = message if isinstance(message, str) else _json(message)
    return text[:200]


def _cost(usage: Any) -> dict[str, float]:
    """The cost where it is known, in US dollars. OpenTelemetry's GenAI conventions name no
    cost attribute yet; this is the name the issue settled on. Unknown is left out, not 0."""
    return {} if usage.cost is None else {"gen_ai.usage.cost": usage.cost}
