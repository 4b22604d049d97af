"""A workflow task's start leaves with its answer, or, while the task is still running after
HOLD_S, from the worker's thread for held starts (docs/architecture.md, "Workflow task start")."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

from kadence import workflow
from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.protocol import topics
from kadence.protocol.codec import build_codec, command_codec, history_batch_codec, writes_field
from kadence.protocol.kafka import partition_for_key, read_to_end, topic_partitions
from kadence.worker import Worker
from kadence.worker._task_starts import HOLD_S, HeldStarts

QUICK_S = HOLD_S / 2
BLOCKED_S = HOLD_S * 5


@workflow.defn
class BusyFirstTaskWorkflow:
    """Its first workflow task takes `seconds` of the event loop (deliberately outside the workflow API)."""

    @workflow.run
    async def run(self, seconds: float) -> str:
        if not workflow.unsafe.is_replaying():
            time.sleep(seconds)
        return "done"


def first_task_and_start(stack: LocalStack, task_queue: str, workflow_id: str) -> tuple[int, int, str]:
    """When the workflow's first task was produced, when the command that started it was, and
    which command that was (a RecordWorkflowTaskStarted, or an answer carrying the start)."""
    tasks = topics.task_queue_topic(task_queue, "workflow")
    every_partition = dict.fromkeys(range(topic_partitions(stack.settings, tasks)), 0)
    task_ms = min(msg.timestamp()[1] for msg in read_to_end(stack.settings, tasks, every_partition) if msg.key() == workflow_id.encode())
    commands = command_codec()
    partition = partition_for_key(workflow_id.encode(), stack.partitions)
    starts = []
    for msg in read_to_end(stack.settings, topics.COMMANDS, {partition: 0}):
        if msg.key() != workflow_id.encode():
            continue
        kind, body = commands.decode(msg.value(), msg.headers())["command"]
        if kind == "RecordWorkflowTaskStarted" or body.get("started_time_ms") is not None:
            starts.append((msg.timestamp()[1], kind))
    return task_ms, *starts[0]


def batches_with(stack: LocalStack, workflow_id: str, event_type: str) -> list[list[str]]:
    """The event types of each of the workflow's history records that holds an event of `event_type`."""
    batches = history_batch_codec()
    found = []
    for msg in read_to_end(stack.settings, topics.HISTORY, {partition_for_key(workflow_id.encode(), stack.partitions): 0}):
        batch = batches.decode(msg.value(), msg.headers())
        kinds = [event["attributes"][0] for event in batch["events"]]
        if batch["workflow_id"] == workflow_id and event_type in kinds:
            found.append(kinds)
    return found


async def test_a_start_leaves_with_the_answer_and_a_task_still_running_is_started_meanwhile(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    """A task done within HOLD_S records its start only once its code has run; one that blocks the
    event loop longer has its start sent by the thread while it is still blocked, so history
    records the start (and would time the task out) before the task's answer comes."""
    async with Worker(client, task_queue=task_queue, workflows=[BusyFirstTaskWorkflow]) as worker:
        await asyncio.wait_for(worker.ready.wait(), 30)
        quick = await client.start_workflow(BusyFirstTaskWorkflow.run, QUICK_S, id=f"quick-{uuid.uuid4()}", task_queue=task_queue)
        assert await asyncio.wait_for(quick.result(), 30) == "done"
        blocked = await client.start_workflow(BusyFirstTaskWorkflow.run, BLOCKED_S, id=f"blocked-{uuid.uuid4()}", task_queue=task_queue)
        assert await asyncio.wait_for(blocked.result(), 30) == "done"

    task_ms, start_ms, kind = await asyncio.to_thread(first_task_and_start, stack, task_queue, quick.id)
    assert start_ms - task_ms >= QUICK_S * 1000, "the start of a quick task leaves after its code ran, with the answer"
    assert kind == "RespondWorkflowTaskCompleted", "the answer carries the start"
    task_ms, start_ms, kind = await asyncio.to_thread(first_task_and_start, stack, task_queue, blocked.id)
    assert HOLD_S * 1000 <= start_ms - task_ms < BLOCKED_S * 1000, "a blocked task's start leaves while it is still blocked"
    assert kind == "RecordWorkflowTaskStarted"
    for handle in (quick, blocked):
        kinds = [e["attributes"][0] for e in (await handle.fetch_history()).events]
        assert kinds == ["WorkflowExecutionStarted", "WorkflowTaskScheduled", "WorkflowTaskStarted", "WorkflowTaskCompleted",
                         "WorkflowExecutionCompleted"]
    # The quick task's start and answer were written together; the blocked one's start alone, long before.
    assert await asyncio.to_thread(batches_with, stack, quick.id, "WorkflowTaskStarted") == [
        ["WorkflowTaskStarted", "WorkflowTaskCompleted", "WorkflowExecutionCompleted"]]
    assert await asyncio.to_thread(batches_with, stack, blocked.id, "WorkflowTaskStarted") == [["WorkflowTaskStarted"]]


async def test_held_starts_are_sent_once_by_the_caller_or_by_the_thread() -> None:
    loop = asyncio.get_running_loop()
    sent: list[tuple[str, bool]] = []  # (workflow id, sent from the thread)

    def send(workflow_id: str, commands: list[tuple[str, Any]], on_behalf_of: asyncio.AbstractEventLoop | None) -> list[Any]:
        assert on_behalf_of in (None, loop) and len(commands) == 1
        sent.append((workflow_id, threading.current_thread() is not threading.main_thread()))
        return []

    starts = HeldStarts(send, hold_s=0.05)
    try:
        taken = starts.hold("taken", ("RecordWorkflowTaskStarted", {}))
        late = starts.hold("late", ("RecordWorkflowTaskStarted", {}))
        assert starts.take(taken)
        assert not starts.take(taken), "taken once"
        await asyncio.sleep(0.2)
        assert sent == [("late", True)]
        assert not starts.take(late), "the thread sent it"
    finally:
        starts.close()


def test_a_worker_pinned_to_a_command_version_without_carried_starts_sends_the_start_before_its_answer() -> None:
    """What the worker checks (`_with_start`): Command d16539dc, the version before answers carried
    their start, has no started_time_ms, so a build pinned to it (KADENCE_SCHEMA_PIN) sends
    RecordWorkflowTaskStarted first, which that release's history service reads."""
    current = command_codec()
    before = build_codec(current.name, current.schema, current.versions, pinned={"d16539dcb234b48f"})
    for answer in ("RespondWorkflowTaskCompleted", "RespondWorkflowTaskFailed"):
        assert writes_field(current, answer, "started_time_ms")
        assert not writes_field(before, answer, "started_time_ms")
