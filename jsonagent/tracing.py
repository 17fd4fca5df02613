"""OpenTelemetry traces and metrics of runs, in the GenAI semantic conventions.

Tracing is one more consumer of the event stream (spans.py builds the spans); the loop knows
nothing of it. It is on when

- the standard variables ask for it: `OTEL_EXPORTER_OTLP_ENDPOINT`,
  `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_TRACES_EXPORTER` (not `none`);
- the application has set a tracer provider of its own (`trace.set_tracer_provider`);
- or `instrument()` was called (the CLI's `--otel`).

This module imports no OpenTelemetry module until one of those holds, so that a run without
tracing costs what it did before (a test pins it, bench/overhead.py measures it).
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from .spans import SpanBuilder

__all__ = ["instrument", "enabled", "capture_content", "flush"]
"""What an application calls; the rest serves the other modules."""

CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

_instrumented = False
_warned = False
_providers: tuple[Any, Any] | None = None
"""The tracer and meter providers this module set up itself (to flush at a run's end)."""

_outgoing: ContextVar[Any] = ContextVar("jsonagent_trace_span", default=None)


def outgoing_headers() -> dict[str, str]:
    """What an HTTP call made by a tool sends on (a W3C `traceparent`), so that the API it
    calls joins the trace; empty when tracing is off. The span builder sets the span when a
    tool starts, in the run's context, which the tool's thread copies; the header is made
    only here, since few tools call out."""
    span = _outgoing.get()
    if span is None:
        return {}
    ctx = span.get_span_context()
    return {"traceparent": f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"}


def set_outgoing(span: Any) -> None:
    """The span an HTTP call of a tool belongs under, or None."""
    _outgoing.set(span)


def inherited() -> str | None:
    """The trace a new run joins: the tool call it runs inside (an agent used as a tool: its
    span is the sub-run's parent), else the one its process was started in (`TRACEPARENT`,
    as a batch sets it for its workers)."""
    return outgoing_headers().get("traceparent") or os.environ.get("TRACEPARENT") or None


def capture_content() -> bool:
    """Prompts, replies, arguments and results go into spans only on this opt-in."""
    return os.environ.get(CAPTURE, "").strip().lower() == "true"


def enabled() -> bool:
    """Whether runs are traced now: `instrument()` was called, a standard variable asks
    for it, or the application set a tracer provider of its own."""
    if _instrumented:
        return True
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    if exporter or any(os.environ.get(k) for k in _ENDPOINTS):
        return True
    # an application that set its own provider has OpenTelemetry loaded already; looking at
    # the module it loaded imports nothing
    trace = sys.modules.get("opentelemetry.trace")
    return trace is not None and getattr(trace, "_TRACER_PROVIDER", None) is not None


def instrument(tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Turn tracing on for every run in this process. Without providers, the application's
    own are used if it set them, else an SDK exporting over OTLP/HTTP (endpoint from the
    standard variables, by default http://localhost:4318)."""
    global _instrumented, _providers
    try:
        from opentelemetry import metrics, trace
    except ImportError:
        raise _missing() from None

    if tracer_provider is not None:
        trace.set_tracer_provider(tracer_provider)
    if meter_provider is not None:
        metrics.set_meter_provider(meter_provider)
    if tracer_provider is None and not _provider_set(trace):
        _providers = _sdk_providers()
    _instrumented = True


def switch_on() -> None:
    """The CLI's --otel: on here, and in the processes this one starts (a batch's
    workers), through the standard variable."""
    os.environ.setdefault("OTEL_TRACES_EXPORTER", "otlp")
    if not _instrumented:
        instrument()


def builder(toolset: Any = None, model: str = "") -> SpanBuilder | None:
    """The consumer a session hands its events to, or None when tracing is off."""
    global _warned
    if not enabled():
        return None
    try:
        from opentelemetry import trace
    except ImportError:  # the deployment's variables ask for it, this install cannot: say so
        if not _warned:
            _warned = True
            logging.getLogger("jsonagent").warning("%s; running without tracing", _missing())
        return None
    if not _instrumented and not _provider_set(trace):
        instrument()  # the variables asked for it: set up the SDK from them
    from .spans import SpanBuilder

    return SpanBuilder(toolset=toolset, model=model, content=capture_content(),
                       outgoing=set_outgoing, flush=flush)


@contextmanager
def batch_span(tasks: int) -> Iterator[None]:
    """A batch's span, whose trace its tasks' runs share: the worker processes it starts
    inherit it as `TRACEPARENT`. Nothing at all when tracing is off."""
    if not enabled():
        yield
        return
    from opentelemetry import trace
    from opentelemetry.propagate import inject

    if not _instrumented and not _provider_set(trace):
        instrument()
    span = trace.get_tracer("jsonagent").start_span(
        "batch", attributes={"jsonagent.batch.tasks": tasks})
    carrier: dict[str, str] = {}
    inject(carrier, context=trace.set_span_in_context(span))
    before = os.environ.get("TRACEPARENT")
    os.environ["TRACEPARENT"] = carrier["traceparent"]
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TRACEPARENT", None)
        else:
            os.environ["TRACEPARENT"] = before
        span.end()
        flush()


def flush() -> None:
    """Export what is buffered now: at the end of a run, since a worker process may end
    without running atexit handlers."""
    if _providers is not None:
        for provider in _providers:
            provider.force_flush()


def _missing() -> Exception:
    from .errors import ConfigError

    return ConfigError("tracing needs the otel extra: pip install 'jsonagent[otel]'")


def _provider_set(trace: Any) -> bool:
    return getattr(trace, "_TRACER_PROVIDER", None) is not None


def _sdk_providers() -> tuple[Any, Any]:
    import atexit

    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise _missing() from None
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME",
                                                               "jsonagent")})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    # Jaeger and Phoenix take traces only: OTEL_METRICS_EXPORTER=none spares them the metrics
    readers = [] if os.environ.get("OTEL_METRICS_EXPORTER", "").lower() == "none" else \
        [PeriodicExportingMetricReader(OTLPMetricExporter())]
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    atexit.register(meter_provider.shutdown)
    atexit.register(tracer_provider.shutdown)
    return tracer_provider, meter_provider
