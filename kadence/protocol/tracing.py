"""W3C trace context in Kafka record headers, and a span for each hop a record makes
(docs/operations.md, "Tracing").

Each record a traced hop produces carries `traceparent` (W3C) in its headers; the next hop's span
is its child, started when the record was produced, so the span shows how long the record waited
in its topic (also its attribute `kadence.queue_ms`) as well as its handling. Applying several
records at once (a projection's transaction) gets a span linked to each.

Tracing is off unless OpenTelemetry is configured: a service turns it on at start when the
standard OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set and the
opentelemetry extra is installed, and exports by OTLP/HTTP; a client or worker traces when its
application set a tracer provider. Only records that carry a traceparent are traced (a workflow
started by a traced client). Off, a hop costs one module lookup."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from kadence.protocol.codec import HeaderList, Headers, header_pairs, header_text

TRACEPARENT = "traceparent"

log = logging.getLogger("kadence.tracing")

_tracer: Any = None  # a service's, once configure() turned tracing on


def configure(service: str) -> bool:
    """Export this service's spans by OTLP/HTTP if the standard OTEL_* variables ask for it."""
    global _tracer
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not endpoint or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("event=tracing_off reason=%r", "OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry is not installed: "
                    "install kadence[opentelemetry]")
        return False
    named = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: f"kadence-{service}"}
    provider = TracerProvider(resource=Resource.create(named))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _tracer = provider.get_tracer("kadence")
    log.info("event=tracing_on endpoint=%s", endpoint)
    return True


def _active_tracer() -> Any:
    """The service's tracer, else the application's (a client's or worker's) once it set a provider."""
    if _tracer is not None:
        return _tracer
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None or isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None
    return trace.get_tracer("kadence")


def enabled() -> bool:
    """Whether this process traces (a service's check before it looks at records' headers)."""
    return _active_tracer() is not None


def traceparent(headers: Headers | None) -> str | None:
    """The record's traceparent as it came, for a later hop to continue (say, a timer's firing)."""
    for key, value in header_pairs(headers):
        if key == TRACEPARENT and value:
            return header_text(value)
    return None


def exemplar(traceparent: str | None) -> dict[str, str] | None:
    """The trace id of a hop's span as a Prometheus exemplar, linking a metric's sample to its trace
    (served by /metrics in the OpenMetrics format); None for an untraced hop."""
    return {"trace_id": traceparent[3:35]} if traceparent else None


def headers_of(traceparent: str | None) -> HeaderList:
    """The record headers that carry `traceparent` (none when there is none: the record is untraced)."""
    return [(TRACEPARENT, traceparent.encode())] if traceparent else []


def current_headers() -> HeaderList:
    """`traceparent` of the span current here, for a record produced within it (none outside a span)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return []
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return []
    return headers_of(_format(context))


@contextlib.contextmanager
def hop(name: str, headers: Headers | None, *, timestamp_ms: int | None, attributes: dict[str, Any]) -> Iterator[str | None]:
    """A span for handling one record, the child of its traceparent and current within the
    block; yields the traceparent for what the block produces (None when not traced)."""
    tracer = _active_tracer()
    parent = _parent(headers) if tracer is not None else None
    if parent is None:
        yield None
        return
    from opentelemetry import trace

    start_ns = timestamp_ms * 1_000_000 if timestamp_ms and timestamp_ms > 0 else None
    with tracer.start_as_current_span(name, context=parent, kind=trace.SpanKind.CONSUMER, start_time=start_ns) as span:
        span.set_attributes({"messaging.system": "kafka", **attributes})
        if start_ns is not None:
            span.set_attribute("kadence.queue_ms", max(0, _now_ms() - timestamp_ms))  # type: ignore[operator]
        yield _format(span.get_span_context())


@contextlib.contextmanager
def child(name: str, attributes: dict[str, Any]) -> Iterator[str | None]:
    """A span within the current one (one record of several a hop produces), current within the
    block; yields its traceparent (None outside a traced hop)."""
    tracer = _active_tracer()
    trace = sys.modules.get("opentelemetry.trace")
    if tracer is None or trace is None or not trace.get_current_span().get_span_context().is_valid:
        yield None
        return
    with tracer.start_as_current_span(name, kind=trace.SpanKind.PRODUCER, attributes=attributes) as span:
        yield _format(span.get_span_context())


def later(name: str, parent: str, *, start_ms: int, attributes: dict[str, Any]) -> str | None:
    """A span, the child of `parent`, from `start_ms` to now: a hop that acts long after the record
    that asked for it (a timer firing); the traceparent for what it produces."""
    tracer = _active_tracer()
    context = _parent(headers_of(parent)) if tracer is not None else None
    if context is None:
        return None
    from opentelemetry import trace

    span = tracer.start_span(name, context=context, kind=trace.SpanKind.PRODUCER, start_time=start_ms * 1_000_000,
                             attributes=attributes)
    span.end()
    return _format(span.get_span_context())


@contextlib.contextmanager
def applied(name: str, traceparents: Sequence[str], attributes: dict[str, Any]) -> Iterator[None]:
    """A span for applying several records at once (a projection's transaction): the child of the
    only traced one, else linked to each, as OpenTelemetry's messaging conventions do a batch."""
    tracer = _active_tracer()
    if tracer is None or not traceparents:
        yield
        return
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    parent = _extract(traceparents[0]) if len(traceparents) == 1 else otel_context.Context()
    contexts = [trace.get_current_span(_extract(tp)).get_span_context() for tp in traceparents] if len(traceparents) > 1 else []
    links = [trace.Link(context) for context in contexts if context.is_valid]
    with tracer.start_as_current_span(name, context=parent, kind=trace.SpanKind.CONSUMER, links=links, attributes=attributes):
        yield


def _parent(headers: Headers | None) -> Any:
    """The context of the record's traceparent; None without one (or with one that does not parse)."""
    from opentelemetry import trace

    for key, value in header_pairs(headers):
        if key == TRACEPARENT and value:
            context = _extract(header_text(value))
            return context if trace.get_current_span(context).get_span_context().is_valid else None
    return None


def _extract(traceparent: str) -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({TRACEPARENT: traceparent})


def _format(context: Any) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _now_ms() -> int:
    return int(time.time() * 1000)
