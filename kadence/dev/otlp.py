"""A small OTLP/HTTP receiver of traces and metrics: what the services (spans) and a
kadence.runtime.OpenTelemetryConfig (metrics, on /v1/metrics) export, decoded from the real
protobuf. The tests' session stack exports to one (conftest's `otlp` fixture), and so does the
stack of `python -m bench.trace_workflow`. And an OTLP/gRPC receiver of metrics, where
OpenTelemetryConfig exports by default (otlp_grpc_receiver). Needs the opentelemetry extra."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

try:
    import grpc
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest, ExportMetricsServiceResponse
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc import (
        MetricsServiceServicer,
        add_MetricsServiceServicer_to_server,
    )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse
    from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric
    from opentelemetry.sdk.trace import ReadableSpan
except ModuleNotFoundError as err:
    raise ModuleNotFoundError("kadence.dev.otlp needs the opentelemetry extra: pip install 'kadence[opentelemetry]'") from err

# How often the services export (the SDK's default waits 5 s): a test waits that long for its spans.
EXPORT_DELAY_MS = 100


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, object]
    links: tuple[str, ...]  # span ids
    start_ns: int  # Unix time
    end_ns: int

    @classmethod
    def of(cls, span: ReadableSpan, service: str) -> Span:
        """A span of this process's OpenTelemetry SDK (say, from its in-memory exporter)."""
        return cls(service, span.name, f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}",
                   f"{span.parent.span_id:016x}" if span.parent else "", dict(span.attributes or {}),
                   tuple(f"{link.context.span_id:016x}" for link in span.links), span.start_time or 0, span.end_time or 0)


@dataclass(frozen=True)
class MetricPoint:
    """One data point of an exported metric: a sum's or gauge's value, a histogram's count."""

    name: str
    attributes: dict[str, object]
    value: float


class OtlpReceiver(ThreadingHTTPServer):
    """Receives the spans exported to `endpoint` (OTEL_EXPORTER_OTLP_ENDPOINT), and the metrics
    exported to `endpoint`/v1/metrics."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _OtlpHandler)
        self._spans: list[Span] = []
        self._metric_points: list[MetricPoint] = []
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def received(self, found: list[Span]) -> None:
        with self._lock:
            self._spans += found

    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    def received_metrics(self, found: list[MetricPoint]) -> None:
        with self._lock:
            self._metric_points += found

    def metric_points(self) -> list[MetricPoint]:
        """Every data point received, the latest export last."""
        with self._lock:
            return list(self._metric_points)

    async def wait_for(self, missing: Callable[[list[Span]], str], timeout_s: float = 10.0) -> list[Span]:
        """Every span received, once `missing` finds nothing missing (says what is, else ""); an
        AssertionError saying what is missing otherwise."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while lacking := missing(spans := self.spans()):
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"after {timeout_s} s, of {len(spans)} spans received: {lacking}")
            await asyncio.sleep(EXPORT_DELAY_MS / 1000)
        return spans


class _OtlpHandler(BaseHTTPRequestHandler):
    server: OtlpReceiver

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path.endswith("/v1/metrics"):
            self._metrics(ExportMetricsServiceRequest.FromString(body))
            self._answer(ExportMetricsServiceResponse().SerializeToString())
            return
        request = ExportTraceServiceRequest.FromString(body)
        found = []
        for resource in request.resource_spans:
            service = next(a.value.string_value for a in resource.resource.attributes if a.key == "service.name")
            for scope in resource.scope_spans:
                for span in scope.spans:
                    attributes: dict[str, object] = {a.key: a.value.string_value or a.value.int_value for a in span.attributes}
                    found.append(Span(service, span.name, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(),
                                      attributes, tuple(link.span_id.hex() for link in span.links),
                                      span.start_time_unix_nano, span.end_time_unix_nano))
        self.server.received(found)
        self._answer(ExportTraceServiceResponse().SerializeToString())

    def _metrics(self, request: ExportMetricsServiceRequest) -> None:
        self.server.received_metrics(_metric_points(request))

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _metric_points(request: ExportMetricsServiceRequest) -> list[MetricPoint]:
    return [
        MetricPoint(metric.name, {a.key: a.value.string_value or a.value.int_value for a in point.attributes}, value)
        for resource in request.resource_metrics for scope in resource.scope_metrics for metric in scope.metrics
        for point, value in _points(metric)
    ]


def _points(metric: Metric) -> list[tuple[Any, float]]:
    kind = metric.WhichOneof("data")
    if kind == "histogram":
        return [(point, point.count) for point in metric.histogram.data_points]
    points = metric.sum.data_points if kind == "sum" else metric.gauge.data_points
    return [(point, point.as_double if point.WhichOneof("value") == "as_double" else point.as_int) for point in points]


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.shutdown()
        receiver.server_close()


def exporting_to(receiver: OtlpReceiver) -> dict[str, str]:
    """The settings that make a service export its spans to `receiver`."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": str(EXPORT_DELAY_MS)}


class OtlpGrpcReceiver(MetricsServiceServicer):
    """Receives the metrics exported over OTLP/gRPC to `endpoint`: the collector's MetricsService,
    served by grpcio from opentelemetry-proto's generated stubs."""

    def __init__(self) -> None:
        self._server = grpc.server(ThreadPoolExecutor(max_workers=2))
        add_MetricsServiceServicer_to_server(self, self._server)  # type: ignore[no-untyped-call]  # generated, unannotated
        self._port: int = self._server.add_insecure_port("127.0.0.1:0")
        self._metric_points: list[MetricPoint] = []
        self.metadata: dict[str, str] = {}  # the last export's gRPC metadata (OpenTelemetryConfig's headers)
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        """OpenTelemetryConfig's url: its http scheme makes the exporter's channel insecure."""
        return f"http://127.0.0.1:{self._port}"

    def Export(self, request: ExportMetricsServiceRequest, context: grpc.ServicerContext) -> ExportMetricsServiceResponse:  # noqa: N802 (the service's method)
        found = _metric_points(request)
        with self._lock:
            self._metric_points += found
            self.metadata = {key: value for key, value in context.invocation_metadata() if isinstance(value, str)}
        return ExportMetricsServiceResponse()

    def metric_points(self) -> list[MetricPoint]:
        """Every data point received, the latest export last."""
        with self._lock:
            return list(self._metric_points)


@contextmanager
def otlp_grpc_receiver() -> Iterator[OtlpGrpcReceiver]:
    receiver = OtlpGrpcReceiver()
    receiver._server.start()
    try:
        yield receiver
    finally:
        receiver._server.stop(grace=None)
