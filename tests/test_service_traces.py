"""Spans in every hop, linked by W3C trace context in Kafka record headers: a workflow with two
activities, a durable timer and a child, started by a traced client, makes one trace through the
commands topic, history, matching, the task queues, the worker, the timer service and back, and
the visibility projector's transactions are linked to it. The session stack's services export by
OTLP/HTTP to the session's receiver (kadence/dev/otlp.py, decoding the real protobuf); the client's and
worker's spans go to the OpenTelemetry SDK's in-memory exporter in this process."""

from __future__ import annotations

import uuid
from datetime import timedelta

import aiohttp
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kadence import activity, workflow
from kadence.client import Client
from kadence.contrib.opentelemetry import TracingInterceptor
from kadence.dev.local_stack import LocalStack
from kadence.dev.otlp import OtlpReceiver, Span
from kadence.worker import Worker


def in_memory_spans() -> InMemorySpanExporter:
    """This process's spans: a provider of the test's, set once for the process."""
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@activity.defn
async def pack(order: str) -> str:
    return f"packed {order}"


@activity.defn
async def label(order: str) -> str:
    return f"labelled {order}"


@workflow.defn
class Notify:
    @workflow.run
    async def run(self, order: str) -> str:
        return f"notified {order}"


@workflow.defn
class Fulfil:
    @workflow.run
    async def run(self, order: str) -> list[str]:
        packed = await workflow.execute_activity(pack, order, start_to_close_timeout=timedelta(seconds=10))
        # The first activity runs eagerly on the worker that scheduled it; this one goes through the queue.
        labelled = await workflow.execute_activity(label, order, start_to_close_timeout=timedelta(seconds=10), disable_eager_execution=True)
        await workflow.sleep(0.2)  # a durable timer: the timer service fires it
        notified = await workflow.execute_child_workflow(Notify.run, order, id=f"{workflow.info().workflow_id}-notify")
        return [packed, labelled, notified]


async def test_one_trace_covers_every_hop_in_order(stack: LocalStack, otlp: OtlpReceiver, task_queue: str) -> None:
    exporter = in_memory_spans()
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn, interceptors=[TracingInterceptor()])
    workflow_id = f"fulfil-{uuid.uuid4()}"
    try:
        async with Worker(client, task_queue=task_queue, workflows=[Fulfil, Notify], activities=[pack, label]):
            assert await client.execute_workflow(Fulfil.run, "book", id=workflow_id, task_queue=task_queue) == [
                "packed book", "labelled book", "notified book",
            ]
    finally:
        await client.close()

    local = [Span.of(span, "test") for span in exporter.get_finished_spans()]
    start = next(span for span in local if span.name == "StartWorkflow:Fulfil")
    expected = {"history StartWorkflowExecution", "dispatch WorkflowTask", "history RespondWorkflowTaskCompleted",
                "dispatch ActivityTask", "history RespondActivityTaskCompleted", "timer fired", "history TimeoutFired",
                "matching relay", "history RecordChildExecutionClosed"}  # the services' (the worker's are this process's)

    def in_trace(received: list[Span]) -> list[Span]:
        return [span for span in received if span.trace_id == start.trace_id]

    def applied(received: list[Span]) -> list[Span]:
        """The read model's transactions: each linked to (or, alone, the child of) the history records it applied."""
        written = {span.span_id for span in in_trace(received) if span.service == "kadence-history"}
        return [span for span in received if span.name == "visibility apply" and {span.parent_id, *span.links} & written]

    local_ids = {span.span_id for span in local if span.trace_id == start.trace_id}

    def missing(received: list[Span]) -> str:
        names = {span.name for span in in_trace(received)}
        if not expected <= names:
            return f"{sorted(expected - names)} missing from the trace, which has {sorted(names)}"
        # Each service exports in batches of its own: a span may come before its parent's.
        known = local_ids | {span.span_id for span in in_trace(received)}
        orphans = [f"{span.name} ({span.service})" for span in in_trace(received) if span.parent_id not in known]
        if orphans:
            return f"the parents of {orphans} not received"
        return "" if applied(received) else "no visibility span for the trace's history records"

    received = await otlp.wait_for(missing)
    services = in_trace(received)
    spans = [span for span in local if span.trace_id == start.trace_id] + services
    by_id = {span.span_id: span for span in spans}
    names = [span.name for span in spans]
    # Every hop of the path, each the child of the hop that produced its record.
    assert expected | {"worker WorkflowTask", "worker eager ActivityTask", "worker ActivityTask"} <= set(names)
    assert {"test", "kadence-history", "kadence-matching", "kadence-timer"} <= {span.service for span in spans}
    for span in spans:
        if span is not start:
            assert span.parent_id in by_id, f"{span.name} ({span.service}) hangs off a span outside the trace"

    def chain(span: Span) -> list[str]:
        names = []
        while span.parent_id:
            names.append(span.name)
            span = by_id[span.parent_id]
        return names[::-1]

    # The first activity's attempt, run by the worker whose workflow task scheduled it; the second,
    # hop by hop from the client's start.
    eager = chain(next(span for span in spans if span.name == "worker eager ActivityTask"))
    assert eager == ["history StartWorkflowExecution", "dispatch WorkflowTask", "worker WorkflowTask", "worker eager ActivityTask"], eager
    hops = chain(next(span for span in spans if span.name == "worker ActivityTask"))
    assert hops[:4] == eager, hops
    assert hops[-2:] == ["dispatch ActivityTask", "worker ActivityTask"], hops
    assert "history RespondWorkflowTaskCompleted" in hops[4:-2], hops
    # Through the timer: set by the batch of the workflow task that started it, fired as a command
    # whose hop in history is the firing's child, and on to the next workflow task.
    fired = next(span for span in spans if span.name == "timer fired")
    assert by_id[fired.parent_id].service == "kadence-history", chain(fired)
    assert fired.attributes["kadence.timer.kind"] == "USER_TIMER"
    timeout = next(span for span in spans if span.name == "history TimeoutFired" and span.parent_id == fired.span_id)
    assert any(chain(span)[:len(chain(timeout))] == chain(timeout) for span in spans if span.name == "worker WorkflowTask"), \
        "the workflow task after the timer continues its chain"
    assert all(span.service == "kadence-visibility" for span in applied(received))
    hop_spans = [span for span in services
                 if span.name == "matching relay" or span.name.startswith("history ")]
    assert all("kadence.queue_ms" in span.attributes for span in hop_spans), "each hop says how long its record waited"

    # The metrics the hops counted link to the trace (exemplars, in OpenMetrics, what Prometheus asks for).
    exemplar = f'# {{trace_id="{start.trace_id}"}}'
    async with aiohttp.ClientSession(headers={"Accept": "application/openmetrics-text; version=1.0.0"}) as http:
        for service, series in (("history", "kadence_history_commands_total"), ("history", "kadence_tasks_dispatched_total"),
                                ("timer", "kadence_timer_firing_lag_seconds_bucket")):
            async with http.get(f"http://127.0.0.1:{stack.http_ports[service]}/metrics") as scraped:
                lines = (await scraped.text()).splitlines()
            assert any(line.startswith(series) and exemplar in line for line in lines), f"no exemplar of the trace on {series}"

