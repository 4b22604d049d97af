"""Where one workflow's time goes, hop by hop: its trace, and the records it made in each topic.

    python -m bench.trace_workflow [--workload one-activity|ten-activities|timer] [--broker kafka|tansu] [--processes one|separate]

Starts a local stack whose services export their spans by OTLP/HTTP to a receiver in this process
(kadence/dev/otlp.py), runs 20 workflows of the bench.bench_workflows workload one at a time to
warm up (client and worker in this process, as bench_workflows --worker-in-process), then one
more, traced from its client (kadence.contrib.opentelemetry.TracingInterceptor). It prints the
trace's spans by start time: when each began after the client's StartWorkflow span did, how long
it took, and how long its record waited in its topic (kadence.queue_ms: a hop's span starts when
its record was produced); then the start-to-result total; then every record the workflow made,
read back from the topics, with the time it was produced (and since the one before), which shows
hops that make no span. A record's timestamp has millisecond resolution, so a hop's span may
seem to start up to 1 ms before the span that produced its record.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import uvloop
from confluent_kafka.admin import AdminClient
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bench.bench_workflows import TASK_QUEUE, WORKLOADS, bench_worker, run_workflows
from bench.local import add_broker_option, describe_broker
from kadence.client import Client
from kadence.contrib.opentelemetry import TracingInterceptor
from kadence.dev.local_stack import PROCESS_LAYOUTS, LocalStack
from kadence.dev.otlp import EXPORT_DELAY_MS, OtlpReceiver, Span, exporting_to, otlp_receiver
from kadence.protocol import topics
from kadence.protocol.codec import UndecodableRecord, command_codec, history_batch_codec, task_codec
from kadence.protocol.kafka import base_config, offsets_for_time, position, read_to_end
from kadence.protocol.settings import KafkaSettings

WARM_UP = 20
QUIET_S = 1.0  # the trace is complete once no span of it came for this long (services export every EXPORT_DELAY_MS)
CLIENT_PROCESS = "client+worker"  # the service column of this process's spans


@dataclass(frozen=True)
class TopicRecord:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int  # when it was produced (CreateTime)
    what: str


def trace_of(spans: list[Span], trace_id: str) -> list[Span]:
    """The trace's spans, and those linked to one of them (a projection applying
    the records of several workflows at once), by start time."""
    ids = {span.span_id for span in spans if span.trace_id == trace_id}
    return sorted((span for span in spans if span.trace_id == trace_id or ids & set(span.links)), key=lambda span: span.start_ns)


def hop_table(spans: list[Span], origin_ns: int) -> list[str]:
    """A line per span, in the order given: its start in ms after `origin_ns`, duration, and queue time."""
    lines = [f"{'at ms':>8} {'took ms':>8} {'queued ms':>9}  {'service':<18} span"]
    for span in spans:
        queued = span.attributes.get("kadence.queue_ms", "")
        lines.append(f"{(span.start_ns - origin_ns) / 1e6:8.1f} {(span.end_ns - span.start_ns) / 1e6:8.1f} {queued:>9}  "
                     f"{span.service:<18} {span.name}")
    return lines


def describe(topic: str, value: bytes, headers: list[tuple[str, bytes]] | None) -> str:
    """What a record says, in brief: a command's kind, a history batch's events and effects, a task's kind."""
    try:
        if topic == topics.COMMANDS:
            return str(command_codec().decode(value, headers)["command"][0])
        if topic == topics.HISTORY:
            batch = history_batch_codec().decode(value, headers)
            events = ", ".join(event["attributes"][0] for event in batch["events"]) or "none"
            effects = ", ".join(effect[0] for effect in batch["effects"]) or "none"
            return f"events {events}; effects {effects}"
        if topic.startswith("kadence.tq."):
            return str(task_codec().decode(value, headers)["task"][0])
    except UndecodableRecord as exc:
        return f"undecodable: {exc}"
    return f"{len(value)} bytes"


def records_of(settings: KafkaSettings, workflow_id: str, since_ms: int) -> list[TopicRecord]:
    """Every record of every Kadence topic produced since `since_ms` whose key names the workflow
    (an activity task's key is the workflow id, a slash and the activity's scheduled event id)."""
    found = []
    listed = AdminClient(base_config(settings)).list_topics(timeout=30).topics
    for topic, metadata in sorted(listed.items()):
        if not topic.startswith("kadence."):
            continue
        starts = offsets_for_time(settings, topic, list(metadata.partitions), since_ms)
        for msg in read_to_end(settings, topic, starts):
            key = (msg.key() or b"").decode(errors="replace")
            if key == workflow_id or key.startswith(f"{workflow_id}/"):
                partition, offset = position(msg)
                found.append(TopicRecord(topic, partition, offset, msg.timestamp()[1], describe(topic, msg.value() or b"", msg.headers())))
    return sorted(found, key=lambda record: (record.timestamp_ms, record.topic, record.offset))


async def settled(receiver: OtlpReceiver, local: list[Span], trace_id: str) -> list[Span]:
    """The trace once the services' spans of it stopped coming for QUIET_S."""
    count, quiet_since = -1, time.monotonic()
    while True:
        spans = trace_of(local + receiver.spans(), trace_id)
        if len(spans) != count:
            count, quiet_since = len(spans), time.monotonic()
        elif time.monotonic() - quiet_since >= QUIET_S:
            return spans
        await asyncio.sleep(EXPORT_DELAY_MS / 1000)


async def trace_one(stack: LocalStack, receiver: OtlpReceiver, workload: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn, interceptors=[TracingInterceptor()])
    workflow_id = f"trace-{uuid.uuid4().hex[:8]}"
    try:
        async with bench_worker(client):
            await run_workflows(client, workload, WARM_UP, 1)
            handle = await client.start_workflow(WORKLOADS[workload].run, workflow_id, id=workflow_id, task_queue=TASK_QUEUE)
            assert await handle.result() == workflow_id
            result_ns = time.time_ns()
    finally:
        await client.close()
    local = [Span.of(span, CLIENT_PROCESS) for span in exporter.get_finished_spans()]
    start = next(span for span in local if span.name.startswith("StartWorkflow:") and span.attributes["temporalWorkflowID"] == workflow_id)
    spans = await settled(receiver, local, start.trace_id)
    print(describe_broker(stack))
    print(f"workflow:             {workflow_id} ({workload}), after {WARM_UP} warm-up workflows, client and worker in one process\n")
    print("\n".join(hop_table(spans, start.start_ns)))
    print(f"\nstart-to-result:      {(result_ns - start.start_ns) / 1e6:.1f} ms (the StartWorkflow span's start to the result in hand)\n")
    records = records_of(stack.settings, workflow_id, start.start_ns // 1_000_000)
    print(f"{'at ms':>8} {'+ms':>5}  {'topic':<28} {'partition@offset':>16}  record")
    origin_ms = previous_ms = start.start_ns / 1e6
    for record in records:
        at, since, where = record.timestamp_ms - origin_ms, record.timestamp_ms - previous_ms, f"{record.partition}@{record.offset}"
        print(f"{at:8.1f} {since:5.0f}  {record.topic:<28} {where:>16}  {record.what}")
        previous_ms = record.timestamp_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=list(WORKLOADS), default="one-activity")
    parser.add_argument("--processes", choices=list(PROCESS_LAYOUTS), default="one",
                        help="the services in one process (`kadence server`, the default) or each in its own")
    add_broker_option(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with otlp_receiver() as receiver, tempfile.TemporaryDirectory(prefix="kadence-trace-") as data_dir:
        stack = LocalStack(Path(data_dir), broker_kind=args.broker, service_env=exporting_to(receiver))
        stack.start(PROCESS_LAYOUTS[args.processes])
        try:
            uvloop.run(trace_one(stack, receiver, args.workload))
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
