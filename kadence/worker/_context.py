"""What the workflow and activity sides of a worker share: the client and the task queue they poll
as one identity, the partitions assigned to them, the shutdown they stop at, and how they read task
records and send commands to history. The Worker makes one and hands it to each side."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import Message

from kadence.client import Client
from kadence.common import MetricAttributes
from kadence.protocol.codec import RecordCodec, UndecodableRecord, task_codec
from kadence.protocol.records import ActivityCancellation, ActivityTask, QueryTask, Task, WorkflowTask
from kadence.runtime import SdkMetrics
from kadence.worker._assignment import PartitionAssignment

log = logging.getLogger("kadence.worker")


@dataclass
class WorkerContext:
    client: Client
    task_queue: str
    identity: str
    assignment: PartitionAssignment
    shutting_down: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: RecordCodec = field(default_factory=task_codec, init=False, repr=False)

    @property
    def metrics(self) -> SdkMetrics:
        """The SDK's metrics, in the client's runtime."""
        return self.client.runtime.sdk_metrics

    def metric_attributes(self, **more: str) -> MetricAttributes:
        """A metric's attributes, as temporalio's: the namespace and task queue, and `more`."""
        return {"namespace": "default", "task_queue": self.task_queue, **more}

    def send(self, workflow_id: str, kind: str, body: Mapping[str, Any], *, until_delivered: bool = True) -> asyncio.Future[Message]:
        """A task's result (or start) goes to history however long the broker is away: a failed
        delivery is tried again until it succeeds (a repeat is rejected as stale; a loss would leave
        the task to its timeout, or for ever when it has none)."""
        return self.client.send_command(workflow_id, kind, body, identity=self.identity, until_delivered=until_delivered)

    def send_all(
        self, workflow_id: str, commands: Sequence[tuple[str, Mapping[str, Any]]], loop: asyncio.AbstractEventLoop | None = None,
    ) -> list[asyncio.Future[Message]]:
        """Commands of one task sent as `send` sends one, back to back (Client.send_commands); `loop`:
        sent from another thread on its behalf."""
        return self.client.send_commands(workflow_id, commands, identity=self.identity, until_delivered=True, loop=loop)

    async def decode(self, msg: Message) -> tuple[Task, Exception | None] | None:
        """The task, its payloads through the payload codec, and why the codec could not decode
        them (the task then fails with that reason); None (logged) for bytes that are no task."""
        try:
            task = cast(Task, self._tasks.decode(msg.value(), msg.headers()))  # the codec reads plain dicts
        except UndecodableRecord as exc:
            log.error("event=task_undecodable topic=%s partition=%d offset=%d error=%s", msg.topic(), msg.partition(), msg.offset(), exc)
            return None
        try:
            await self.client.data_converter.decode_payloads(task)
        except Exception as exc:
            log.error("event=task_payloads_undecodable workflow_id=%s run_id=%s error=%r", task["workflow_id"], task["run_id"], str(exc))
            return task, exc
        return task, None


# The branch of a task record each side reads, where the record's kind was told apart before.


def workflow_task(task: Task) -> WorkflowTask:
    match task["task"]:
        case ("WorkflowTask", body):
            return body
    raise AssertionError(f"{task['task'][0]} is no WorkflowTask")


def query_task(task: Task) -> QueryTask:
    match task["task"]:
        case ("QueryTask", body):
            return body
    raise AssertionError(f"{task['task'][0]} is no QueryTask")


def activity_task(task: Task) -> ActivityTask:
    match task["task"]:
        case ("ActivityTask", body):
            return body
    raise AssertionError(f"{task['task'][0]} is no ActivityTask")


def activity_cancellation(task: Task) -> ActivityCancellation:
    match task["task"]:
        case ("ActivityCancellation", body):
            return body
    raise AssertionError(f"{task['task'][0]} is no ActivityCancellation")
