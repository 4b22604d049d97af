"""Eager activity execution: the worker that completes a workflow task runs the activities it
schedules on its own queue itself, with no task on the queue's topic (docs/architecture.md,
"Task dispatch")."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from kadence import workflow
from kadence.client import Client, WorkflowHandle
from kadence.dev.local_stack import LocalStack
from kadence.protocol import topics
from kadence.protocol.codec import build_codec, command_codec, writes_field
from kadence.protocol.kafka import read_to_end, topic_partitions
from kadence.worker import Worker
from tests.workflows import FanOutWorkflow, HeartbeatWorkflow, count_with_heartbeats, echo


@workflow.defn
class NotEagerWorkflow:
    @workflow.run
    async def run(self, value: str) -> str:
        return await workflow.execute_activity(echo, value, start_to_close_timeout=timedelta(seconds=10), disable_eager_execution=True)


def dispatched_activity_tasks(stack: LocalStack, task_queue: str, workflow_id: str) -> int:
    """How many activity tasks of the workflow went through the queue's topic."""
    topic = topics.task_queue_topic(task_queue, "activity")
    starts = {p: 0 for p in range(topic_partitions(stack.settings, topic))}
    return sum(1 for msg in read_to_end(stack.settings, topic, starts) if (msg.key() or b"").startswith(f"{workflow_id}/".encode()))


def commands_sent(stack: LocalStack, workflow_id: str) -> list[str]:
    """The kinds of the commands on kadence.commands for the workflow, in order."""
    commands = command_codec()
    starts = {p: 0 for p in range(topic_partitions(stack.settings, topics.COMMANDS))}
    return [commands.decode(msg.value(), msg.headers())["command"][0]
            for msg in read_to_end(stack.settings, topics.COMMANDS, starts) if msg.key() == workflow_id.encode()]


async def started_by(handle: WorkflowHandle) -> list[str]:
    """The identity each ActivityTaskStarted event of the run records."""
    events = (await handle.fetch_history()).events
    return [attrs["identity"] for kind, attrs in (e["attributes"] for e in events) if kind == "ActivityTaskStarted"]


async def test_the_completing_worker_runs_the_activities_it_schedules_with_no_task_on_the_queue(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    """Three activities at once: each runs once on the worker that scheduled them, started by the
    workflow task's completion itself (no RecordActivityTaskStarted), and none went through the
    activity topic. An eager attempt that times out (here its heartbeat) is retried as any attempt
    is: through the queue."""
    async with Worker(client, task_queue=task_queue, workflows=[FanOutWorkflow, HeartbeatWorkflow],
                      activities=[echo, count_with_heartbeats]) as worker:
        await asyncio.wait_for(worker.ready.wait(), 30)
        fan_out = await client.start_workflow(FanOutWorkflow.run, args=[task_queue, 3], id=f"eager-{uuid.uuid4()}", task_queue=task_queue)
        assert await asyncio.wait_for(fan_out.result(), 60) == 3
        heartbeats = await client.start_workflow(HeartbeatWorkflow.run, 3, id=f"eager-{uuid.uuid4()}", task_queue=task_queue)
        assert (await asyncio.wait_for(heartbeats.result(), 60)).startswith("attempt 2 resumed")
    assert await started_by(fan_out) == [worker.identity] * 3
    assert await asyncio.to_thread(dispatched_activity_tasks, stack, task_queue, fan_out.id) == 0
    assert "RecordActivityTaskStarted" not in await asyncio.to_thread(commands_sent, stack, fan_out.id)
    assert await started_by(heartbeats) == [worker.identity] * 2
    assert await asyncio.to_thread(dispatched_activity_tasks, stack, task_queue, heartbeats.id) == 1


async def test_eager_execution_is_off_per_activity_or_per_worker(stack: LocalStack, client: Client, task_queue: str) -> None:
    """temporalio's switches: `disable_eager_execution` on the call, `disable_eager_activity_execution`
    on the worker; either sends the activity through the task queue."""
    async with Worker(client, task_queue=task_queue, workflows=[NotEagerWorkflow, FanOutWorkflow], activities=[echo]) as worker:
        await asyncio.wait_for(worker.ready.wait(), 30)
        per_call = await client.start_workflow(NotEagerWorkflow.run, "hi", id=f"not-eager-{uuid.uuid4()}", task_queue=task_queue)
        assert await asyncio.wait_for(per_call.result(), 60) == "hi"
    async with Worker(client, task_queue=task_queue, workflows=[FanOutWorkflow], activities=[echo],
                      disable_eager_activity_execution=True) as worker:
        await asyncio.wait_for(worker.ready.wait(), 30)
        per_worker = await client.start_workflow(FanOutWorkflow.run, args=[task_queue, 2], id=f"not-eager-{uuid.uuid4()}",
                                                 task_queue=task_queue)
        assert await asyncio.wait_for(per_worker.result(), 60) == 2
    assert await asyncio.to_thread(dispatched_activity_tasks, stack, task_queue, per_call.id) == 1
    assert await asyncio.to_thread(dispatched_activity_tasks, stack, task_queue, per_worker.id) == 2


def test_a_worker_pinned_to_a_command_version_without_eager_request_id_runs_no_activity_eagerly() -> None:
    """Command 51c80d57, the version before completions started their eager activities, has no
    eager_request_id: a build pinned to it (KADENCE_SCHEMA_PIN, during a roll) sends every attempt
    through the queue, where that release's history service starts it."""
    current = command_codec()
    before = build_codec(current.name, current.schema, current.versions, pinned={"51c80d57350e9cf4"})
    assert writes_field(current, "RespondWorkflowTaskCompleted", "eager_request_id")
    assert not writes_field(before, "RespondWorkflowTaskCompleted", "eager_request_id")
