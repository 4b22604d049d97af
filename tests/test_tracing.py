"""kadence.contrib.opentelemetry.TracingInterceptor, as temporalio's: a workflow with two activities
and a child makes one trace, from the client's start through the workflow, its activities and its
child, each span the child of what sent it, and workflow spans are not emitted again on replay; an
update-with-start is one trace from its span."""

from __future__ import annotations

import io
import logging
import uuid
from datetime import timedelta

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kadence import activity, workflow
from kadence.client import Client, WithStartWorkflowOperation
from kadence.common import WorkflowIDConflictPolicy
from kadence.contrib.opentelemetry import TracingInterceptor
from kadence.dev.local_stack import LocalStack
from kadence.protocol.logs import TraceIds
from kadence.worker import Worker


@activity.defn
async def reserve(item: str) -> str:
    return f"reserved {item}"


@activity.defn
async def charge(amount: int) -> str:
    return f"charged {amount}"


@workflow.defn
class ShipOrder:
    @workflow.run
    async def run(self, order: str) -> str:
        return f"shipped {order}"


@workflow.defn
class PlaceOrder:
    @workflow.run
    async def run(self, order: str) -> list[str]:
        reserved = await workflow.execute_activity(reserve, order, start_to_close_timeout=timedelta(seconds=10))
        charged = await workflow.execute_activity(charge, 42, start_to_close_timeout=timedelta(seconds=10))
        shipped = await workflow.execute_child_workflow(ShipOrder.run, order, id=f"{workflow.info().workflow_id}-ship")
        return [reserved, charged, shipped]


async def test_one_trace_from_the_start_through_activities_and_child(stack: LocalStack, task_queue: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = TracingInterceptor(provider.get_tracer("test"))
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn, interceptors=[tracing])
    workflow_id = f"traced-{uuid.uuid4()}"
    try:
        # No cache: every workflow task replays the run from its history, so a span emitted again
        # on replay would show as a duplicate.
        async with Worker(client, task_queue=task_queue, workflows=[PlaceOrder, ShipOrder], activities=[reserve, charge],
                          max_cached_workflows=0):
            assert await client.execute_workflow(PlaceOrder.run, "book", id=workflow_id, task_queue=task_queue) == [
                "reserved book", "charged 42", "shipped book",
            ]
    finally:
        await client.close()

    spans = exporter.get_finished_spans()
    assert len({span.context.trace_id for span in spans}) == 1, "one trace"
    by_name = {span.name: span for span in spans}
    assert sorted(span.name for span in spans) == sorted([
        "StartWorkflow:PlaceOrder", "RunWorkflow:PlaceOrder",
        "StartActivity:reserve", "RunActivity:reserve", "StartActivity:charge", "RunActivity:charge",
        "StartChildWorkflow:ShipOrder", "RunWorkflow:ShipOrder", "CompleteWorkflow:ShipOrder", "CompleteWorkflow:PlaceOrder",
    ]), "each span once: none emitted again on replay"

    def parent(name: str) -> str:
        span: ReadableSpan = by_name[name]
        assert span.parent is not None, f"{name} has no parent"
        return next(other.name for other in spans if other.context.span_id == span.parent.span_id)

    start = "StartWorkflow:PlaceOrder"
    assert by_name[start].parent is None
    assert {name: parent(name) for name in by_name if name != start} == {
        "RunWorkflow:PlaceOrder": start, "StartActivity:reserve": start, "StartActivity:charge": start,
        "StartChildWorkflow:ShipOrder": start, "CompleteWorkflow:PlaceOrder": start,
        "RunActivity:reserve": "StartActivity:reserve", "RunActivity:charge": "StartActivity:charge",
        "RunWorkflow:ShipOrder": "StartChildWorkflow:ShipOrder", "CompleteWorkflow:ShipOrder": "StartChildWorkflow:ShipOrder",
    }
    assert by_name["RunActivity:reserve"].attributes["temporalWorkflowID"] == workflow_id
    # In the order the workflow ran them.
    ordered = [span.name for span in sorted(spans, key=lambda span: span.start_time or 0) if span.name.startswith(("Start", "Run"))]
    assert ordered.index("RunActivity:reserve") < ordered.index("StartActivity:charge") < ordered.index("StartChildWorkflow:ShipOrder")


def test_log_lines_inside_a_span_carry_its_trace_and_span_ids() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s%(trace)s"))
    handler.addFilter(TraceIds())
    log = logging.getLogger("kadence.test_tracing")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("event=outside")
        with TracerProvider().get_tracer("test").start_as_current_span("hop") as span:
            log.warning("event=inside")
    finally:
        log.removeHandler(handler)
    context = span.get_span_context()
    assert stream.getvalue().splitlines() == [
        "event=outside", f"event=inside trace_id={context.trace_id:032x} span_id={context.span_id:016x}",
    ]


@workflow.defn
class Counter:
    def __init__(self) -> None:
        self.count = 0

    @workflow.update
    async def add(self, amount: int) -> int:
        self.count += amount
        return self.count

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.count > 0)
        return self.count


async def test_an_update_with_start_is_one_trace_from_its_span(stack: LocalStack, task_queue: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn,
                                  interceptors=[TracingInterceptor(provider.get_tracer("test"))])
    try:
        async with Worker(client, task_queue=task_queue, workflows=[Counter]):
            operation = WithStartWorkflowOperation(Counter.run, id=f"traced-{uuid.uuid4()}", task_queue=task_queue,
                                                   id_conflict_policy=WorkflowIDConflictPolicy.FAIL)
            assert await client.execute_update_with_start_workflow(Counter.add, 2, start_workflow_operation=operation) == 2
            assert await (await operation.workflow_handle()).result() == 2
    finally:
        await client.close()

    spans = exporter.get_finished_spans()
    assert len({span.context.trace_id for span in spans}) == 1, "one trace"
    start = next(span for span in spans if span.name == "StartUpdateWithStartWorkflow:Counter")
    assert start.parent is None
    children = {span.name for span in spans if span.parent is not None and span.parent.span_id == start.context.span_id}
    assert {"RunWorkflow:Counter", "HandleUpdate:add", "CompleteWorkflow:Counter"} <= children
