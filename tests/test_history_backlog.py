"""A history service working through a backlog is not fed stale timeouts (services/timer/progress.py):
the re-dispatch and timeout timers of a workflow task whose start waits in the backlog wait for
history to decide that far, see the task's start drop them, and never fire."""

from __future__ import annotations

import asyncio
import urllib.request
import uuid

from confluent_kafka import Producer

from kadence.client import Client
from kadence.protocol import topics
from kadence.protocol.codec import command_codec
from kadence.protocol.kafka import partition_for_key
from kadence.worker import Worker
from tests.conftest import local_stack, workflow_id_on
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, TwoStepWorkflow

BACKLOG = 60_000  # refused signals: at a few thousand a second, history is behind past the 10 s re-dispatch


def _counter(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as scraped:
        return sum(float(line.split()[-1]) for line in scraped.read().decode().splitlines() if line.startswith(f"{name} "))


async def test_timeouts_wait_for_a_history_working_through_a_backlog_and_never_fire_stale(task_queue: str) -> None:
    with local_stack() as stack:
        client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
        try:
            async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
                workflow_id = f"backlog-{uuid.uuid4()}"
                partition = partition_for_key(workflow_id.encode(), stack.partitions)
                handle = await client.start_workflow(TwoStepWorkflow.run, "x", id=workflow_id, task_queue=task_queue)
                # Right behind the start: signals to a workflow that does not exist, each refused in a batch of its own.
                await asyncio.to_thread(_flood, stack.bootstrap_servers, workflow_id_on(partition, stack.partitions, "nobody"), partition)
                assert await handle.result() == "x!"
                waited = _counter(stack.http_ports["timer"], "kadence_timer_waited_for_history_total")
        finally:
            await client.close()
        history_log = (stack.data_dir / "logs" / "history.log").read_text()
    stale = [line for line in history_log.splitlines() if f"workflow_id={workflow_id} " in line and "stale" in line]
    assert stale == [], stale
    assert waited > 0, "no timeout waited for history: the backlog was not long enough to show it"


def _flood(bootstrap_servers: str, nobody: str, partition: int) -> None:
    codec = command_codec()
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 50, "compression.type": "lz4"})
    for i in range(BACKLOG):
        command = {"workflow_id": nobody, "identity": "test", "command": ("SignalWorkflowExecution", {
            "run_id": "", "signal_name": "go", "input": [], "request_id": f"flood-{i}"})}
        while True:
            try:
                producer.produce(topics.COMMANDS, codec.encode(command), nobody.encode(), partition=partition, headers=codec.headers())
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
