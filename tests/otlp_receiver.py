"""A real OTLP/HTTP receiver on 127.0.0.1 for the tracing tests: it decodes the protobuf
export requests (opentelemetry-proto) into plain spans and metric points.

    with OtlpReceiver() as otlp:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp.url
        ...
        otlp.wait_for(lambda spans: ...); print(otlp.tree())

Run as a script, it receives until Ctrl-C and prints each trace as a tree.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start: int
    end: int
    attributes: dict[str, Any]
    status: int
    links: list[tuple[str, str]] = field(default_factory=list)


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _attrs(kvs) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


class OtlpReceiver:
    def __init__(self):
        self.spans: list[Span] = []
        self.metrics: dict[str, list[tuple[dict, Any]]] = {}
        """Metric name -> (attributes, data point) for every point received."""
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.path == "/v1/traces":
                    receiver._traces(body)
                elif self.path == "/v1/metrics":
                    receiver._metrics(body)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)

    def _traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        with self._lock:
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.spans.append(Span(
                            s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                            s.start_time_unix_nano, s.end_time_unix_nano, _attrs(s.attributes),
                            s.status.code, [(l.trace_id.hex(), l.span_id.hex()) for l in s.links]))

    def _metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest.FromString(body)
        with self._lock:
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        points = getattr(m, m.WhichOneof("data")).data_points
                        self.metrics.setdefault(m.name, []).extend(
                            (_attrs(p.attributes), p) for p in points)

    def wait_for(self, ready: Callable[[list[Span]], bool], timeout: float = 20) -> list[Span]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                spans = list(self.spans)
            if ready(spans):
                return spans
            time.sleep(0.05)
        raise AssertionError("the spans never arrived; got:\n" + self.tree())

    def named(self, prefix: str) -> list[Span]:
        return [s for s in self.spans if s.name.startswith(prefix)]

    def children(self, parent: Span) -> list[Span]:
        return sorted((s for s in self.spans if s.parent_id == parent.span_id),
                      key=lambda s: s.start)

    def tree(self, attrs: tuple[str, ...] = ("gen_ai.usage.input_tokens",
                                              "gen_ai.usage.output_tokens", "error.type",
                                              "jsonagent.call", "jsonagent.run.status")) -> str:
        """Every trace, each span under its parent, with a few attributes and its duration."""
        with self._lock:
            spans = list(self.spans)
        ids = {s.span_id for s in spans}
        lines: list[str] = []

        def show(span: Span, depth: int) -> None:
            extra = " ".join(f"{k if k == 'error.type' else k.split('.')[-1]}="
                             f"{span.attributes[k]}"
                             for k in attrs if k in span.attributes)
            ms = (span.end - span.start) / 1e6
            link = "  (links to a paused span)" if span.links else ""
            lines.append(f"{'  ' * depth}{span.name}  [{ms:.1f} ms] {extra}{link}".rstrip())
            for child in sorted((s for s in spans if s.parent_id == span.span_id),
                                key=lambda s: s.start):
                show(child, depth + 1)

        for root in sorted((s for s in spans if s.parent_id not in ids), key=lambda s: s.start):
            lines.append(f"trace {root.trace_id}" + (f" (parent {root.parent_id} not here)"
                                                     if root.parent_id else ""))
            show(root, 1)
        return "\n".join(lines)


if __name__ == "__main__":
    with OtlpReceiver() as otlp:
        print(f"OTLP/HTTP receiver on {otlp.url}; Ctrl-C prints the traces", flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            print(otlp.tree())
