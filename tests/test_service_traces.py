"""Spans in every hop, linked by W3C trace context in Kafka record headers: a workflow with two
activities and a child, started by a traced client, makes one trace through the commands topic,
history, matching, the task queues, the worker and back. The services export by OTLP/HTTP to a
receiver this test runs (decoding the real protobuf); the client's and worker's spans go to the
OpenTelemetry SDK's in-memory exporter in this process."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from kadence import activity, workflow
from kadence.client import Client
from kadence.contrib.opentelemetry import TracingInterceptor
from kadence.worker import Worker
from tests.conftest import local_stack


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, object]


class OtlpReceiver(ThreadingHTTPServer):
    """A small OTLP/HTTP trace receiver: what the services export, decoded."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _OtlpHandler)
        self.spans: list[Span] = []
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _OtlpHandler(BaseHTTPRequestHandler):
    server: OtlpReceiver

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        request = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
        found = []
        for resource in request.resource_spans:
            service = next(a.value.string_value for a in resource.resource.attributes if a.key == "service.name")
            for scope in resource.scope_spans:
                for span in scope.spans:
                    attributes = {a.key: a.value.string_value or a.value.int_value for a in span.attributes}
                    found.append(Span(service, span.name, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(), attributes))
        with self.server.lock:
            self.server.spans += found
        body = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


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


async def test_one_trace_covers_every_hop_in_order(task_queue: str) -> None:
    exporter = in_memory_spans()
    saved = dict(os.environ)
    with otlp_receiver() as receiver:
        os.environ.update({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"})
        try:
            with local_stack(services=("history", "matching", "visibility")) as stack:
                client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn, interceptors=[TracingInterceptor()])
                workflow_id = f"fulfil-{uuid.uuid4()}"
                try:
                    async with Worker(client, task_queue=task_queue, workflows=[Fulfil, Notify], activities=[pack, label]):
                        assert await client.execute_workflow(Fulfil.run, "book", id=workflow_id, task_queue=task_queue) == [
                            "packed book", "labelled book", "notified book",
                        ]
                finally:
                    await client.close()
                for _ in range(100):  # the services export every 100 ms
                    with receiver.lock:
                        if any(span.name == "history RecordChildExecutionClosed" for span in receiver.spans):
                            break
                    await asyncio.sleep(0.1)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        with receiver.lock:
            services = list(receiver.spans)

    local = [Span("test", s.name, f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}",
                  f"{s.parent.span_id:016x}" if s.parent else "", dict(s.attributes or {})) for s in exporter.get_finished_spans()]
    start = next(span for span in local if span.name == "StartWorkflow:Fulfil")
    spans = [span for span in local + services if span.trace_id == start.trace_id]
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
    queued = [span for span in services if span.trace_id == start.trace_id and span.name != "history batch"]
    assert all("kadence.queue_ms" in span.attributes for span in queued), "each hop says how long its record waited"
