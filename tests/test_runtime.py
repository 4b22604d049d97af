"""kadence.runtime as temporalio.runtime: a Runtime's metrics served for Prometheus or exported to
an OpenTelemetry collector (over OTLP/gRPC by default, OTLP/HTTP with http=True), the SDK's own
under temporalio's names, and a workflow with an activity run under a Runtime whose endpoint the
test scrapes, or whose collector receives them."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import urllib.request
import uuid
from datetime import timedelta

import pytest

from kadence import activity, workflow
from kadence.client import Client
from kadence.common import MetricMeter, RetryPolicy
from kadence.dev.local_stack import LocalStack, free_port
from kadence.dev.otlp import MetricPoint, OtlpGrpcReceiver, otlp_grpc_receiver, otlp_receiver
from kadence.runtime import OpenTelemetryConfig, PrometheusConfig, Runtime, TelemetryConfig
from kadence.worker import Worker

Scraped = dict[tuple[str, frozenset[tuple[str, str]]], float]

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(port: int) -> tuple[str, Scraped]:
    """The endpoint's text, and each sample by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples: Scraped = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line of Prometheus' text format: {line!r}"
        labels = frozenset(_LABEL.findall(match.group(2) or ""))
        samples[(match.group(1), labels)] = float(match.group(3))
    return text, samples


def value(samples: Scraped, name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels`."""
    return sum(found for (sample, have), found in samples.items() if sample == name and set(labels.items()) <= have)


def prometheus_runtime(**options: object) -> tuple[Runtime, int]:
    port = free_port()
    return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"127.0.0.1:{port}", **options))), port  # type: ignore[arg-type]


def test_prometheus_endpoint_serves_a_meters_metrics_in_temporalios_shape() -> None:
    runtime, port = prometheus_runtime()
    meter = runtime.metric_meter.with_additional_attributes({"region": "eu"})
    meter.create_counter("orders", "Orders taken").add(2, {"kind": 'a "quoted"\nvalue'})
    meter.create_counter("orders", "Orders taken").add(3, {"kind": 'a "quoted"\nvalue'})
    meter.create_histogram_timedelta("checkout_latency", "Checkout").record(timedelta(milliseconds=75))
    meter.create_gauge("queue_depth").set(7)
    meter.create_histogram_float("basket").record(120.5)

    text, samples = scrape(port)
    # temporalio's defaults: counters without _total, durations in milliseconds, service_name on every metric.
    assert "# TYPE orders counter" in text
    assert value(samples, "orders", region="eu", kind='a \\"quoted\\"\\nvalue', service_name="kadence") == 5
    assert value(samples, "checkout_latency_bucket", le="50") == 0
    assert value(samples, "checkout_latency_bucket", le="100") == 1
    assert value(samples, "checkout_latency_bucket", le="+Inf") == 1
    assert value(samples, "checkout_latency_sum") == 75
    assert value(samples, "queue_depth", region="eu") == 7
    assert value(samples, "basket_count") == 1

    with pytest.raises(ValueError, match="only grows"):
        meter.create_counter("orders").add(-1)
    runtime.shutdown()
    with pytest.raises(OSError):
        scrape(port)


def test_prometheus_options_name_counters_and_durations_as_asked() -> None:
    runtime, port = prometheus_runtime(
        counters_total_suffix=True, unit_suffix=True, durations_as_seconds=True,
        histogram_bucket_overrides={"checkout_latency": [0.01, 0.1]},  # by the name as created
    )
    runtime.metric_meter.create_counter("orders").add(1)
    runtime.metric_meter.create_histogram_timedelta("checkout_latency").record(timedelta(milliseconds=75))
    _, samples = scrape(port)
    assert value(samples, "orders_total") == 1
    assert value(samples, "checkout_latency_seconds_sum") == 0.075
    buckets = {dict(labels)["le"]: found for (name, labels), found in samples.items() if name == "checkout_latency_seconds_bucket"}
    assert buckets == {"0.01": 0, "0.1": 1, "+Inf": 1}
    runtime.shutdown()


def test_runtime_refuses_what_it_cannot_export_with_the_reason() -> None:
    with pytest.raises(ValueError, match="host:port"):
        Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address="9464")))
    _, port = prometheus_runtime()
    with pytest.raises(OSError, match="cannot listen there"):
        Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"127.0.0.1:{port}")))
    # Without metrics, the meter records nothing and costs nothing.
    assert Runtime(telemetry=TelemetryConfig()).metric_meter is MetricMeter.noop
    MetricMeter.noop.create_counter("ignored").add(1)


async def test_opentelemetry_config_exports_to_a_collector() -> None:
    with otlp_receiver() as receiver:
        runtime = Runtime(telemetry=TelemetryConfig(metrics=OpenTelemetryConfig(
            url=f"{receiver.endpoint}/v1/metrics", http=True, metric_periodicity=timedelta(milliseconds=100),
        ), global_tags={"deployment": "test"}))
        runtime.metric_meter.create_counter("orders").add(4, {"kind": "a"})
        runtime.metric_meter.create_histogram_timedelta("checkout_latency").record(timedelta(milliseconds=20))
        runtime.sdk_metrics.workflow_completed.add(1, {"workflow_type": "Order"})
        try:
            for _ in range(100):
                points = {point.name: point for point in receiver.metric_points()}
                if {"orders", "checkout_latency", "temporal_workflow_completed"} <= points.keys():
                    break
                await asyncio.sleep(0.05)
        finally:
            runtime.shutdown()
        assert points["orders"].value == 4
        assert points["orders"].attributes == {"kind": "a", "deployment": "test", "service_name": "kadence"}
        assert points["checkout_latency"].value == 1  # a histogram's count
        assert points["temporal_workflow_completed"].attributes["workflow_type"] == "Order"


async def received(receiver: OtlpGrpcReceiver, names: set[str]) -> dict[str, MetricPoint]:
    """The latest point of each metric received, once every one of `names` arrived."""
    for _ in range(200):
        points = {point.name: point for point in receiver.metric_points()}
        if names <= points.keys():
            return points
        await asyncio.sleep(0.05)
    raise AssertionError(f"after 10 s, of {sorted(names)} the collector has {sorted(points)}")


async def test_opentelemetry_config_exports_over_grpc_by_default() -> None:
    # temporalio's default: OTLP/gRPC to the collector's url, with no path (http=False).
    with otlp_grpc_receiver() as receiver:
        runtime = Runtime(telemetry=TelemetryConfig(metrics=OpenTelemetryConfig(
            url=receiver.endpoint, headers={"X-Team": "payments"}, metric_periodicity=timedelta(milliseconds=100),
        )))
        try:
            runtime.metric_meter.create_gauge("queue_depth").set(7, {"queue": "orders"})
            runtime.sdk_metrics.workflow_completed.add(1, {"workflow_type": "Order"})
            points = await received(receiver, {"queue_depth", "temporal_workflow_completed"})
        finally:
            runtime.shutdown()
        assert points["queue_depth"].value == 7
        assert points["queue_depth"].attributes == {"queue": "orders", "service_name": "kadence"}
        assert receiver.metadata["x-team"] == "payments"  # the headers, as gRPC metadata


# ---- on the stack

ATTEMPTS: dict[str, int] = {}


@activity.defn
async def charge(order: str) -> str:
    ATTEMPTS[order] = ATTEMPTS.get(order, 0) + 1
    activity.metric_meter().create_counter("charges_attempted").add(1)
    if ATTEMPTS[order] == 1:
        raise RuntimeError("the card network timed out")  # the second attempt succeeds
    return f"charged {order}"


@activity.defn
async def fee(order: str) -> int:
    return len(order)


@workflow.defn
class ChargeOrder:
    @workflow.run
    async def run(self, order: str) -> str:
        workflow.metric_meter().create_counter("orders_started").add(1)
        await workflow.execute_local_activity(fee, order, start_to_close_timeout=timedelta(seconds=10))
        return await workflow.execute_activity(
            charge, order, start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100)),
        )


async def test_a_workflow_under_a_prometheus_runtime_moves_temporalios_metrics(stack: LocalStack, task_queue: str) -> None:
    runtime, port = prometheus_runtime()
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn, runtime=runtime)
    order = f"order-{uuid.uuid4()}"
    try:
        async with Worker(client, task_queue=task_queue, workflows=[ChargeOrder], activities=[charge, fee], max_concurrent_activities=7):
            assert await client.execute_workflow(ChargeOrder.run, order, id=order, task_queue=task_queue) == f"charged {order}"
    finally:
        await client.close()

    _, samples = scrape(port)
    queue = {"namespace": "default", "task_queue": task_queue, "service_name": "kadence"}
    of_workflow = {**queue, "workflow_type": "ChargeOrder"}
    of_activity = {**queue, "activity_type": "charge"}
    assert value(samples, "temporal_worker_start", **queue) == 1
    assert value(samples, "temporal_request", operation="StartWorkflowExecution", namespace="default") == 1
    assert value(samples, "temporal_request_latency_count", operation="StartWorkflowExecution") == 1
    assert value(samples, "temporal_workflow_completed", **of_workflow) == 1
    assert value(samples, "temporal_workflow_failed", **of_workflow) == 0
    assert value(samples, "temporal_workflow_endtoend_latency_count", **of_workflow) == 1
    # A task to schedule the activity, one after it completed (and none between its two attempts: the retry is history's).
    tasks = value(samples, "temporal_workflow_task_execution_latency_count", **of_workflow)
    assert tasks >= 2
    assert value(samples, "temporal_workflow_task_schedule_to_start_latency_count", **of_workflow) == tasks
    assert value(samples, "temporal_workflow_task_queue_poll_succeed", **of_workflow) == tasks
    # The first task replays nothing, the next find the run in the worker's cache, which lets it go once it closed.
    assert value(samples, "temporal_sticky_cache_miss", **of_workflow) == 1
    assert value(samples, "temporal_sticky_cache_hit", **of_workflow) == tasks - 1
    assert value(samples, "temporal_sticky_cache_size", **queue) == 0
    assert value(samples, "temporal_sticky_cache_total_forced_eviction", **queue) == 0
    assert value(samples, "temporal_activity_execution_latency_count", **of_activity) == 2
    assert value(samples, "temporal_activity_execution_failed", **of_activity) == 1
    assert value(samples, "temporal_activity_succeed_endtoend_latency_count", **of_activity) == 1
    assert value(samples, "temporal_activity_schedule_to_start_latency_count", **of_activity) == 1  # the first attempt's
    of_local_activity = {**queue, "activity_type": "fee"}
    assert value(samples, "temporal_local_activity_total", **of_local_activity) == 1
    assert value(samples, "temporal_local_activity_execution_latency_count", **of_local_activity) == 1
    assert value(samples, "temporal_local_activity_execution_failed", **of_local_activity) == 0
    assert value(samples, "temporal_local_activity_succeeded_endtoend_latency_count", **of_local_activity) == 1
    assert value(samples, "temporal_worker_task_slots_available", worker_type="ActivityWorker", **queue) == 7
    assert value(samples, "temporal_worker_task_slots_used", worker_type="ActivityWorker", **queue) == 0
    # The code's own metrics, with the attributes temporalio gives them; the workflow's once, though its code ran on two tasks.
    assert value(samples, "charges_attempted", **of_activity) == 2
    assert value(samples, "orders_started", **of_workflow) == 1


@activity.defn
async def compose_greeting(name: str) -> str:
    return f"Hello, {name}!"


@workflow.defn
class GreetingWorkflow:
    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(compose_greeting, name, start_to_close_timeout=timedelta(seconds=10))


async def test_a_worker_exports_temporalios_metrics_to_a_grpc_collector(stack: LocalStack, task_queue: str) -> None:
    # As temporalio's open_telemetry sample: a worker whose Runtime exports to a collector on its gRPC port.
    with otlp_grpc_receiver() as collector:
        runtime = Runtime(telemetry=TelemetryConfig(metrics=OpenTelemetryConfig(
            url=collector.endpoint, metric_periodicity=timedelta(milliseconds=100),
        )))
        client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn, runtime=runtime)
        greeting = f"greeting-{uuid.uuid4()}"
        try:
            async with Worker(client, task_queue=task_queue, workflows=[GreetingWorkflow], activities=[compose_greeting]):
                assert await client.execute_workflow(GreetingWorkflow.run, "Kafka", id=greeting, task_queue=task_queue) == "Hello, Kafka!"
            points = await received(collector, {
                "temporal_workflow_completed", "temporal_activity_execution_latency", "temporal_request",
            })
        finally:
            await client.close()
            runtime.shutdown()
    assert points["temporal_workflow_completed"].value == 1
    assert points["temporal_workflow_completed"].attributes == {
        "namespace": "default", "task_queue": task_queue, "workflow_type": "GreetingWorkflow", "service_name": "kadence",
    }
    assert points["temporal_activity_execution_latency"].value == 1  # a histogram's count
    assert points["temporal_activity_execution_latency"].attributes["activity_type"] == "compose_greeting"


def test_prevent_default_leaves_each_process_to_set_its_own_runtime() -> None:
    """As temporalio's worker_multiprocessing sample: the parent prevents the default, each worker
    process sets its own; a default asked for before one is set is refused with the fix. (A fresh
    interpreter: the default is the process's.)"""
    program = (
        "from kadence.runtime import Runtime, TelemetryConfig\n"
        "Runtime.prevent_default()\n"
        "try:\n"
        "    Runtime.default()\n"
        "except RuntimeError as refused:\n"
        "    print(refused)\n"
        "mine = Runtime(telemetry=TelemetryConfig())\n"
        "Runtime.set_default(mine)\n"
        "print(Runtime.default() is mine)\n"
    )
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True)
    refusal, same = ran.stdout.strip().splitlines()
    assert "Runtime.prevent_default() was called" in refusal and "Runtime.set_default" in refusal
    assert same == "True"
