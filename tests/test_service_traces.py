"""Spans in every hop, linked by W3C trace context in Kafka record headers: a workflow with two
activities and a child, started by a traced client, makes one trace through the commands topic,
history, matching, the task queues, the worker and back. The session stack's services export by
OTLP/HTTP to the session's receiver (tests/otlp.py, decoding the real protobuf); the client's and
worker's spans go to the OpenTelemetry SDK's in-memory exporter in this process."""

from __future__ import annotations

import uuid
from datetime import timedelta

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kadence import activity, workflow
from kadence.client import Client
from kadence.contrib.opentelemetry import TracingInterceptor
from kadence.dev.local_stack import LocalStack
from kadence.worker import Worker
from tests.otlp import OtlpReceiver, Span


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
        labelled = await workflow.execute_activity(label, order, start_to_close_timeout=timedelta(seconds=10))
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

    local = [Span("test", s.name, f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}",
                  f"{s.parent.span_id:016x}" if s.parent else "", dict(s.attributes or {})) for s in exporter.get_finished_spans()]
    start = next(span for span in local if span.name == "StartWorkflow:Fulfil")
    services = await otlp.wait_for(start.trace_id, lambda spans: any(span.name == "history RecordChildExecutionClosed" for span in spans))
    spans = [span for span in local if span.trace_id == start.trace_id] + services
    by_id = {span.span_id: span for span in spans}
    names = [span.name for span in spans]
    # Every hop of the path, each the child of the hop that produced its record.
    for hop in ("history StartWorkflowExecution", "matching route", "worker WorkflowTask", "history RespondWorkflowTaskCompleted",
                "worker ActivityTask", "history RespondActivityTaskCompleted", "history RecordChildExecutionClosed"):
        assert hop in names, f"{hop} missing from the trace: {sorted(set(names))}"
    assert {span.service for span in spans} == {"test", "kadence-history", "kadence-matching"}
    for span in spans:
        if span is not start:
            assert span.parent_id in by_id, f"{span.name} ({span.service}) hangs off a span outside the trace"

    def chain(span: Span) -> list[str]:
        names = []
        while span.parent_id:
            names.append(span.name)
            span = by_id[span.parent_id]
        return names[::-1]

    # The first activity's attempt, hop by hop from the client's start (the worker's start and
    # completion of the workflow task may be joined in one batch, whose span links both).
    hops = chain(next(span for span in spans if span.name == "worker ActivityTask"))
    assert hops[:3] == ["history StartWorkflowExecution", "matching route", "worker WorkflowTask"], hops
    assert hops[-2:] == ["matching route", "worker ActivityTask"], hops
    assert {"history RespondWorkflowTaskCompleted", "history batch"} & set(hops[3:-2]), hops
    queued = [span for span in services if span.name != "history batch"]
    assert all("kadence.queue_ms" in span.attributes for span in queued), "each hop says how long its record waited"
