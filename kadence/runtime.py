"""The runtime of clients and workers (as temporalio.runtime): where metrics go. A `Runtime` made
with `TelemetryConfig(metrics=PrometheusConfig(bind_address=...))` serves them for Prometheus to
scrape; with `OpenTelemetryConfig(url=...)` it exports them to an OpenTelemetry collector (the
`opentelemetry` extra). A client takes one (`Client.connect(..., runtime=...)`, else
`Runtime.default()`, which exports nothing) and its workers record into it.

The SDK's own metrics carry temporalio's names (`temporal_workflow_completed`,
`temporal_activity_execution_latency`, ...: `SdkMetrics`) and attributes (`namespace`,
`task_queue`, `workflow_type`, `activity_type`, `operation`), so a dashboard made for temporalio's
workers reads Kadence's. Which of temporalio's Kadence lacks is in docs/temporal-differences.md,
"Metrics"."""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Protocol

from kadence.common import (
    MetricAttributes,
    MetricCounter,
    MetricGauge,
    MetricHistogramTimedelta,
    MetricKind,
    MetricMeter,
    MetricSink,
)

if TYPE_CHECKING:  # the opentelemetry extra, imported where an exporter is made
    from opentelemetry.sdk.metrics.export import MetricExporter

_default_runtime: Runtime | None = None
_default_prevented = False  # Runtime.prevent_default(): default() makes none, set_default() must

SERVICE_NAME = "kadence"  # the `service_name` attribute of every metric (temporalio's Core writes temporal-core)

# Bucket bounds in milliseconds, by metric (without the prefix): close to what temporalio's Core uses.
_TASK_LATENCY_BUCKETS_MS = (1, 10, 20, 50, 100, 200, 500, 1000)
_SCHEDULE_TO_START_BUCKETS_MS = (1, 10, 20, 50, 100, 200, 500, 1000, 5000, 10_000, 60_000)
_ACTIVITY_BUCKETS_MS = (50, 100, 500, 1000, 5000, 10_000, 60_000)
_END_TO_END_BUCKETS_MS = (100, 500, 1000, 1500, 2000, 5000, 10_000, 30_000, 60_000, 120_000, 300_000, 600_000, 1_800_000, 3_600_000)
_DEFAULT_BUCKETS_MS = (50, 100, 500, 1000, 2500, 10_000)
_BUCKETS_MS = {
    "workflow_task_execution_latency": _TASK_LATENCY_BUCKETS_MS,
    "workflow_task_schedule_to_start_latency": _SCHEDULE_TO_START_BUCKETS_MS,
    "activity_schedule_to_start_latency": _SCHEDULE_TO_START_BUCKETS_MS,
    "activity_execution_latency": _ACTIVITY_BUCKETS_MS,
    "local_activity_execution_latency": _ACTIVITY_BUCKETS_MS,
    "local_activity_succeeded_endtoend_latency": _ACTIVITY_BUCKETS_MS,
    "activity_succeed_endtoend_latency": _END_TO_END_BUCKETS_MS,
    "workflow_endtoend_latency": _END_TO_END_BUCKETS_MS,
    "request_latency": _TASK_LATENCY_BUCKETS_MS,
}


class Runtime:
    """Where the metrics of the clients (and their workers) made with it go."""

    @staticmethod
    def default() -> Runtime:
        """The runtime of clients not given one: made at first use, exporting nothing, unless
        `set_default` set another before."""
        global _default_runtime
        if _default_runtime is None:
            if _default_prevented:
                raise RuntimeError(
                    "no default Runtime: Runtime.prevent_default() was called, so give this process one with "
                    "Runtime.set_default(Runtime(telemetry=...)) before it makes a client"
                )
            _default_runtime = Runtime(telemetry=TelemetryConfig())
        return _default_runtime

    @staticmethod
    def prevent_default() -> None:
        """Keep `default()` from making a runtime (as temporalio's): each process, say each one a
        process pool forks, then sets its own with `set_default`. Raises RuntimeError when a
        default was made already."""
        global _default_prevented
        if _default_runtime is not None:
            raise RuntimeError("Runtime default already set: call Runtime.prevent_default() before any client is made")
        _default_prevented = True

    @staticmethod
    def set_default(runtime: Runtime, *, error_if_already_set: bool = True) -> None:
        """The runtime of clients made from now on without one (those made before keep theirs)."""
        global _default_runtime
        if _default_runtime is not None and error_if_already_set:
            raise RuntimeError("Runtime default already set")
        _default_runtime = runtime

    def __init__(self, *, telemetry: TelemetryConfig) -> None:
        self.telemetry = telemetry
        sink = _sink(telemetry.metrics)
        attributes: dict[str, str | int | float | bool] = dict(telemetry.global_tags)
        if telemetry.attach_service_name:
            attributes["service_name"] = SERVICE_NAME
        self._sink = sink
        self._metric_meter = MetricMeter.noop if sink is None else MetricMeter(sink, attributes)
        prefix = "temporal_" if telemetry.metric_prefix is None else telemetry.metric_prefix
        self.sdk_metrics = SdkMetrics(self._metric_meter, prefix)

    @property
    def metric_meter(self) -> MetricMeter:
        """The meter of this runtime's exporter (records nothing when the runtime exports nothing)."""
        return self._metric_meter

    def shutdown(self) -> None:
        """Export what is left and stop exporting (Kadence's: temporalio's runtime lives as long as
        its process). An OpenTelemetry exporter otherwise flushes when the process exits."""
        if self._sink is not None:
            self._sink.shutdown()


class OpenTelemetryMetricTemporality(Enum):
    CUMULATIVE = 1
    DELTA = 2


@dataclass(frozen=True)
class OpenTelemetryConfig:
    """Export to an OpenTelemetry collector (the `opentelemetry` extra) every `metric_periodicity`
    (1 s by default), as temporalio's: over OTLP/gRPC to `url` such as http://localhost:4317 (an
    https:// url is TLS), or with `http` over OTLP/HTTP to the metrics endpoint, such as
    http://localhost:4318/v1/metrics."""

    url: str
    headers: Mapping[str, str] | None = None
    metric_periodicity: timedelta | None = None
    metric_temporality: OpenTelemetryMetricTemporality = OpenTelemetryMetricTemporality.CUMULATIVE
    durations_as_seconds: bool = False
    http: bool = False


@dataclass(frozen=True)
class PrometheusConfig:
    """Serve the metrics for Prometheus to scrape, on `bind_address` ("host:port"), any path.
    Counters are named without `_total` unless `counters_total_suffix`; durations are in
    milliseconds unless `durations_as_seconds`; `unit_suffix` appends the unit to their names;
    `histogram_bucket_overrides` sets a histogram's bucket bounds by its name as created (the
    SDK's with their prefix, such as temporal_activity_execution_latency), in its unit."""

    bind_address: str
    counters_total_suffix: bool = False
    unit_suffix: bool = False
    durations_as_seconds: bool = False
    histogram_bucket_overrides: Mapping[str, Sequence[float]] | None = None


@dataclass(frozen=True)
class TelemetryConfig:
    """`metrics`: where metrics go (none without). `global_tags`: attributes of every metric.
    `attach_service_name`: every metric has a `service_name` attribute. `metric_prefix`: the SDK's
    metrics' prefix, `temporal_` without one (a meter's own metrics are named as created)."""

    metrics: OpenTelemetryConfig | PrometheusConfig | None = None
    global_tags: Mapping[str, str] = field(default_factory=dict)
    attach_service_name: bool = True
    metric_prefix: str | None = None


class SdkMetrics:
    """The SDK's own metrics, named and described as temporalio's; the client and the worker
    add the attributes (namespace, task queue, workflow or activity type, operation)."""

    def __init__(self, meter: MetricMeter, prefix: str) -> None:
        def counter(name: str, description: str) -> MetricCounter:
            return meter.create_counter(prefix + name, description)

        def duration(name: str, description: str) -> MetricHistogramTimedelta:
            return meter.create_histogram_timedelta(prefix + name, description, "ms")

        self.request = counter("request", "Count of client request successes by rpc name")
        self.request_failure = counter("request_failure", "Count of client request failures by rpc name")
        self.request_latency = duration("request_latency", "Histogram of client request latencies")
        self.worker_start = counter("worker_start", "Count of the number of initialized workers")
        self.workflow_task_queue_poll_succeed = counter(
            "workflow_task_queue_poll_succeed", "Count of workflow task queue poll successes")
        self.sticky_cache_hit = counter("sticky_cache_hit", "Count of workflow tasks whose run the worker had in its cache")
        self.sticky_cache_miss = counter("sticky_cache_miss", "Count of workflow tasks whose run the worker replayed from its history")
        self.sticky_cache_size: MetricGauge = meter.create_gauge(prefix + "sticky_cache_size", "Current number of runs in the cache")
        self.sticky_cache_total_forced_eviction = counter(
            "sticky_cache_total_forced_eviction", "Count of runs evicted from the cache to make room for others")
        self.workflow_task_schedule_to_start_latency = duration(
            "workflow_task_schedule_to_start_latency", "Histogram of workflow task schedule-to-start latencies")
        self.workflow_task_execution_latency = duration(
            "workflow_task_execution_latency", "Histogram of workflow task execution (not replay) latencies")
        self.workflow_task_execution_failed = counter("workflow_task_execution_failed", "Count of workflow task execution failures")
        self.workflow_completed = counter("workflow_completed", "Count of successfully completed workflows")
        self.workflow_failed = counter("workflow_failed", "Count of failed workflows")
        self.workflow_canceled = counter("workflow_canceled", "Count of canceled workflows")
        self.workflow_continue_as_new = counter("workflow_continue_as_new", "Count of continued-as-new workflows")
        self.workflow_endtoend_latency = duration(
            "workflow_endtoend_latency", "Histogram of total workflow execution latencies")
        self.activity_schedule_to_start_latency = duration(
            "activity_schedule_to_start_latency", "Histogram of activity schedule-to-start latencies")
        self.activity_execution_latency = duration("activity_execution_latency", "Histogram of activity execution latencies")
        self.activity_succeed_endtoend_latency = duration(
            "activity_succeed_endtoend_latency", "Histogram of activity execution latencies from first scheduled to success")
        self.activity_execution_failed = counter("activity_execution_failed", "Count of activity task execution failures")
        self.activity_execution_cancelled = counter("activity_execution_cancelled", "Count of activity task executions cancelled")
        self.local_activity_total = counter("local_activity_total", "Count of local activities executed")
        self.local_activity_execution_latency = duration(
            "local_activity_execution_latency", "Histogram of local activity execution latencies")
        self.local_activity_execution_failed = counter("local_activity_execution_failed", "Count of local activity executions that failed")
        self.local_activity_succeeded_endtoend_latency = duration(
            "local_activity_succeeded_endtoend_latency", "Histogram of local activity execution latencies from first attempt to success")
        self.worker_task_slots_available: MetricGauge = meter.create_gauge(
            prefix + "worker_task_slots_available", "Current number of available slots per task type")
        self.worker_task_slots_used: MetricGauge = meter.create_gauge(
            prefix + "worker_task_slots_used", "Current number of used slots per task type")


class _Exporter(MetricSink, Protocol):
    def shutdown(self) -> None: ...


def _sink(metrics: OpenTelemetryConfig | PrometheusConfig | None) -> _Exporter | None:
    if metrics is None:
        return None
    if isinstance(metrics, PrometheusConfig):
        return _PrometheusEndpoint(metrics)
    if isinstance(metrics, OpenTelemetryConfig):
        return _OpenTelemetryExporter(metrics)
    raise TypeError(f"TelemetryConfig.metrics is a {type(metrics).__name__}: give a PrometheusConfig or an OpenTelemetryConfig")


def _buckets_ms(name: str) -> Sequence[float]:
    for base, buckets in _BUCKETS_MS.items():
        if name.endswith(base):
            return buckets
    return _DEFAULT_BUCKETS_MS


@dataclass
class _Histogram:
    bounds: Sequence[float]
    counts: list[int]  # per bound, not cumulative
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        for index, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[index] += 1
                break
        self.total += value
        self.count += 1


@dataclass
class _Family:
    kind: MetricKind
    name: str  # as exposed
    description: str
    series: dict[tuple[tuple[str, str], ...], Any] = field(default_factory=dict)  # a value, or a _Histogram


class _PrometheusEndpoint:
    """Holds every metric's values in memory and serves them in Prometheus' text format from a
    thread of its own (as temporalio's Core does), so a scrape never waits on the event loop.
    Written by hand rather than with prometheus_client, which cannot name a counter without
    `_total` (temporalio's default)."""

    def __init__(self, config: PrometheusConfig) -> None:
        self.config = config
        self._families: dict[str, _Family] = {}
        self._lock = threading.Lock()
        host, _, port = config.bind_address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"PrometheusConfig(bind_address={config.bind_address!r}): give host:port, such as 0.0.0.0:9464")
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = endpoint.exposition().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        try:
            self._server = ThreadingHTTPServer((host.strip("[]"), int(port)), Handler)
        except OSError as exc:
            raise OSError(f"PrometheusConfig(bind_address={config.bind_address!r}): cannot listen there: {exc}") from exc
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="kadence-prometheus", daemon=True).start()

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def record(
        self, kind: MetricKind, name: str, description: str | None, unit: str | None, value: float, attributes: MetricAttributes,
    ) -> None:
        labels = tuple(sorted((key, str(item).lower() if isinstance(item, bool) else str(item)) for key, item in attributes.items()))
        with self._lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = _Family(kind, self._exposed_name(kind, name, unit), description or "")
            if kind == MetricKind.COUNTER:
                family.series[labels] = family.series.get(labels, 0) + value
            elif kind == MetricKind.GAUGE:
                family.series[labels] = value
            else:
                histogram = family.series.get(labels)
                if histogram is None:
                    bounds = self._bounds(kind, name)
                    histogram = family.series[labels] = _Histogram(bounds, [0] * len(bounds))
                histogram.observe(value / 1000 if kind == MetricKind.DURATION and self.config.durations_as_seconds else value)

    def _exposed_name(self, kind: MetricKind, name: str, unit: str | None) -> str:
        if kind == MetricKind.DURATION:
            unit = "s" if self.config.durations_as_seconds else "ms"
        if self.config.unit_suffix and unit:
            name += "_" + {"ms": "milliseconds", "s": "seconds"}.get(unit, unit)
        if kind == MetricKind.COUNTER and self.config.counters_total_suffix:
            name += "_total"
        return name

    def _bounds(self, kind: MetricKind, name: str) -> Sequence[float]:
        overrides = self.config.histogram_bucket_overrides or {}
        if name in overrides:
            return sorted(overrides[name])
        bounds = _buckets_ms(name) if kind == MetricKind.DURATION else _DEFAULT_BUCKETS_MS
        return [bound / 1000 for bound in bounds] if kind == MetricKind.DURATION and self.config.durations_as_seconds else bounds

    def exposition(self) -> str:
        lines: list[str] = []
        with self._lock:
            for family in self._families.values():
                kind = "histogram" if family.kind == MetricKind.DURATION else family.kind.value
                lines += [f"# HELP {family.name} {_escape_help(family.description)}", f"# TYPE {family.name} {kind}"]
                for labels, value in family.series.items():
                    if not isinstance(value, _Histogram):
                        lines.append(f"{family.name}{_labels(labels)} {_number(value)}")
                        continue
                    cumulative = 0
                    for bound, count in zip(value.bounds, value.counts, strict=True):
                        cumulative += count
                        lines.append(f"{family.name}_bucket{_labels(labels + (('le', _number(bound)),))} {cumulative}")
                    lines.append(f"{family.name}_bucket{_labels(labels + (('le', '+Inf'),))} {value.count}")
                    lines.append(f"{family.name}_sum{_labels(labels)} {_number(value.total)}")
                    lines.append(f"{family.name}_count{_labels(labels)} {value.count}")
        return "\n".join(lines) + "\n"


def _otlp_exporter(config: OpenTelemetryConfig, temporality: dict[type, Any]) -> MetricExporter:
    """The OTLP exporter temporalio's `http` chooses: gRPC by default, as temporalio's Core."""
    transport = "http" if config.http else "grpc"
    try:
        if config.http:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpExporter
            return HttpExporter(endpoint=config.url, headers=dict(config.headers or {}), preferred_temporality=temporality)
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcExporter
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            f"OpenTelemetryConfig(http={config.http}) needs opentelemetry-exporter-otlp-proto-{transport}, "
            "of the opentelemetry extra: pip install 'kadence[opentelemetry]'"
        ) from err
    # The gRPC exporter takes the url's scheme for TLS or not (https, http) and gRPC metadata keys lowercase.
    return GrpcExporter(endpoint=config.url, headers={key.lower(): value for key, value in (config.headers or {}).items()},
                        preferred_temporality=temporality)


def _labels(labels: tuple[tuple[str, str], ...]) -> str:
    if not labels:
        return ""
    escaped = (value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for _, value in labels)
    return "{" + ",".join(f'{key}="{value}"' for (key, _), value in zip(labels, escaped, strict=True)) + "}"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class _OpenTelemetryExporter:
    """The OpenTelemetry SDK's meter, exporting over OTLP/gRPC (or OTLP/HTTP with `http`) every
    `metric_periodicity`."""

    def __init__(self, config: OpenTelemetryConfig) -> None:
        try:
            from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
            from opentelemetry.sdk.metrics.export import AggregationTemporality, PeriodicExportingMetricReader
        except ModuleNotFoundError as err:
            raise ModuleNotFoundError(
                "OpenTelemetryConfig needs the opentelemetry extra: pip install 'kadence[opentelemetry]'"
            ) from err
        self.config = config
        temporality: dict[type, AggregationTemporality] = {}
        if config.metric_temporality == OpenTelemetryMetricTemporality.DELTA:
            temporality = {Counter: AggregationTemporality.DELTA, Histogram: AggregationTemporality.DELTA}
        periodicity = config.metric_periodicity or timedelta(seconds=1)
        reader = PeriodicExportingMetricReader(
            _otlp_exporter(config, temporality), export_interval_millis=periodicity / timedelta(milliseconds=1),
        )
        self.provider = MeterProvider(metric_readers=[reader])
        self._meter = self.provider.get_meter("kadence")
        self._instruments: dict[str, Any] = {}
        self._lock = threading.Lock()

    def record(
        self, kind: MetricKind, name: str, description: str | None, unit: str | None, value: float, attributes: MetricAttributes,
    ) -> None:
        seconds = kind == MetricKind.DURATION and self.config.durations_as_seconds
        with self._lock:
            instrument = self._instruments.get(name)
            if instrument is None:
                instrument = self._instruments[name] = self._instrument(kind, name, description or "", "s" if seconds else unit or "")
        if kind == MetricKind.COUNTER:
            instrument.add(value, dict(attributes))
        elif kind == MetricKind.GAUGE:
            instrument.set(value, dict(attributes))
        else:
            instrument.record(value / 1000 if seconds else value, dict(attributes))

    def shutdown(self) -> None:
        self.provider.shutdown()

    def _instrument(self, kind: MetricKind, name: str, description: str, unit: str) -> Any:
        if kind == MetricKind.COUNTER:
            return self._meter.create_counter(name, unit, description)
        if kind == MetricKind.GAUGE:
            return self._meter.create_gauge(name, unit, description)
        bounds = _buckets_ms(name) if kind == MetricKind.DURATION else _DEFAULT_BUCKETS_MS
        if unit == "s":
            bounds = [bound / 1000 for bound in bounds]
        return self._meter.create_histogram(name, unit, description, explicit_bucket_boundaries_advisory=list(bounds))
