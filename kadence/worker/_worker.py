"""The worker: polls a task queue's workflow and activity topics and answers with commands (as
temporalio.worker's Worker, which it splits likewise: the workflow side in _workflow.py, the
activity side in _activity.py, an attempt's heartbeats in _heartbeats.py).

Workers on one queue share a consumer group per task kind, so Kafka spreads the partitions
(and the load) over them. Workflow tasks are keyed by workflow_id, so a worker keeps the same
executions while the assignment is stable and serves them from its cache.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import sys
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from confluent_kafka import KafkaException, Message

from kadence import workflow as workflow_module
from kadence.client import Client
from kadence.protocol import topics
from kadence.protocol.codec import Record, UndecodableRecord, codec, task_codec
from kadence.protocol.kafka import ensure_topics, partition_for_key
from kadence.worker._activity import ActivityWorker
from kadence.worker._interceptor import Interceptor, WorkflowInterceptorClassInput
from kadence.worker._shared_state import SharedStateManager
from kadence.worker._workflow import WorkflowWorker
from kadence.workflow._definition import WorkflowDefinition

log = logging.getLogger("kadence.worker")

POLLER_HEARTBEAT_S = 5.0
PARTITION_END_WAIT_S = 5.0  # for the ends of the partitions assigned, on the polling thread



class Worker:
    def __init__(
        self,
        client: Client,
        *,
        task_queue: str,
        workflows: Sequence[type] = (),
        activities: Sequence[Callable[..., Any]] = (),
        activity_executor: concurrent.futures.Executor | None = None,
        max_concurrent_activities: int = 100,
        max_cached_workflows: int = 1000,
        graceful_shutdown_timeout: timedelta = timedelta(),
        max_task_queue_activities_per_second: float | None = None,
        identity: str | None = None,
        shared_state_manager: SharedStateManager | None = None,
        interceptors: Sequence[Interceptor] = (),
        disable_eager_activity_execution: bool = False,
    ) -> None:
        if not workflows and not activities:
            raise ValueError("a Worker needs at least one workflow or activity")
        self.client = client
        # As temporalio: the client's interceptors that are also worker interceptors come first.
        self.interceptors = [i for i in client.interceptors if isinstance(i, Interceptor)] + list(interceptors)
        class_input = WorkflowInterceptorClassInput(unsafe_extern_functions={})
        self.workflow_interceptor_classes = [
            cls for cls in (i.workflow_interceptor_class(class_input) for i in self.interceptors) if cls is not None
        ]
        self.task_queue = task_queue
        self.identity = identity or client.identity
        definitions: dict[str, WorkflowDefinition] = {}
        for cls in workflows:
            definition = workflow_module.definition(cls)
            assert isinstance(definition, WorkflowDefinition)
            definitions[definition.name] = definition
        self._tasks = task_codec()
        self._stop = asyncio.Event()
        self._running: asyncio.Task[None] | None = None
        self._assigned: set[str] = set()
        self._partitions: dict[str, list[int]] = {}  # per kind, this worker's partitions of the queue's topic
        self._partition_counts: dict[str, int] = {}  # per kind, how many partitions the queue's topic has
        # Per kind and partition, the partition's end when it was assigned: a record before it may
        # have been read by the partition's previous owner (see may_be_redelivered).
        self._ends_at_assignment: dict[str, dict[int, int]] = {}
        self._assignment_changed = asyncio.Event()
        self._activity_worker = ActivityWorker(
            self, activities, activity_executor, shared_state_manager, max_concurrent_activities, graceful_shutdown_timeout,
            max_task_queue_activities_per_second, disable_eager_activity_execution,
        )
        self._workflow_worker = WorkflowWorker(self, definitions, self._activity_worker, max_cached_workflows)
        self._kinds: list[topics.TaskKind] = []  # the task kinds this worker polls
        if definitions:
            self._kinds.append("workflow")
        if activities:
            self._kinds.append("activity")
        self.ready = asyncio.Event()
        """Set once every poller of this worker has partitions assigned (useful for tests and probes)."""

    async def run(self) -> None:
        """Poll until shutdown() is called."""
        kinds = self._kinds
        settings = self.client.settings
        await asyncio.get_running_loop().run_in_executor(None, ensure_topics, settings, {
            topics.task_queue_topic(self.task_queue, kind): settings.task_queue_partitions for kind in kinds
        })
        log.info("event=worker_started task_queue=%s identity=%s workflows=%s activities=%s",
                 self.task_queue, self.identity, self._workflow_worker.types, self._activity_worker.types)
        pollers = {"workflow": self._workflow_worker.poll, "activity": self._activity_worker.poll}
        announcing = asyncio.create_task(self._announce())
        try:
            await asyncio.gather(*(pollers[kind]() for kind in kinds))
        finally:
            announcing.cancel()

    async def _announce(self) -> None:
        """Tell `kadence task-queue describe` this worker polls the queue (and which partitions)."""
        heartbeats = codec("PollerHeartbeat")
        while True:
            self._assignment_changed.clear()
            for kind, partitions in self._partitions.items():
                heartbeat = {"task_queue": self.task_queue, "kind": kind, "identity": self.identity,
                             "partitions": partitions, "sent_at_ms": int(time.time() * 1000)}
                self.client.produce(topics.POLLERS, heartbeats.encode(heartbeat), self.task_queue.encode(), heartbeats.headers())
            with contextlib.suppress(TimeoutError):  # every few seconds, and at once when the assignment changes
                await asyncio.wait_for(self._assignment_changed.wait(), POLLER_HEARTBEAT_S)

    async def readiness_problems(self) -> list[str]:
        """Why this worker is not ready (empty once it polls partitions of every task kind, while
        its client hears answers from Postgres): what a worker's /readyz reports."""
        problems = [] if self.ready.is_set() else [f"task queue {self.task_queue!r}: partitions not assigned yet"]
        return problems + self.client.readiness_problems()

    async def shutdown(self) -> None:
        self._stop.set()
        if self._running is not None:
            await self._running

    async def __aenter__(self) -> "Worker":
        self._running = asyncio.create_task(self.run())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    async def _subscribe(self, consumer: Any, kind: topics.TaskKind) -> None:
        loop = asyncio.get_running_loop()
        topic = topics.task_queue_topic(self.task_queue, kind)
        metadata = await loop.run_in_executor(None, lambda: consumer.list_topics(topic, timeout=30))
        total = len(metadata.topics[topic].partitions)

        def assigned(consumer: Any, partitions: list[Any]) -> None:
            # Here, on the polling thread, before the first record of these partitions is handed over.
            ends = _partition_ends(consumer, partitions, self.task_queue)
            self._ends_at_assignment[kind] = {**self._ends_at_assignment.get(kind, {}), **ends}  # a new dict: the loop reads it
            log.info("event=worker_partitions_assigned task_queue=%s kind=%s identity=%s partitions=%s ends=%s",
                     self.task_queue, kind, self.identity, [tp.partition for tp in partitions], ends)
            loop.call_soon_threadsafe(self._mark_assigned, kind, sorted(tp.partition for tp in partitions), total)

        def revoked(consumer: Any, partitions: list[Any]) -> None:
            revoked_now = {tp.partition for tp in partitions}
            self._ends_at_assignment[kind] = {p: end for p, end in self._ends_at_assignment.get(kind, {}).items() if p not in revoked_now}
            loop.call_soon_threadsafe(self._partitions.__setitem__, kind, [])

        consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)

    def _mark_assigned(self, kind: str, partitions: list[int], total: int) -> None:
        self._partitions[kind] = partitions
        self._partition_counts[kind] = total
        self._assignment_changed.set()
        if kind == "activity":
            self._activity_worker.rate.share = len(partitions) / total
        self._assigned.add(kind)
        if self._assigned >= set(self._kinds):
            self.ready.set()

    def may_be_redelivered(self, kind: str, msg: Message, task: Record) -> bool:
        """Whether this task may have reached a worker before: its record was in its partition when
        the partition was assigned here, so the previous owner may have read it and run its task,
        without committing past it (killed, or cut off from the broker); or history marked it as a
        possible copy, which a worker may be running: dispatched again because no start was
        recorded in time (its start held up by a backlog), or decided again after history
        recovered its partition. A record appended since, not re-dispatched, is read here first
        (docs/architecture.md, "Exactly once")."""
        if task["task"][1].get("redispatched", False):
            return True
        offset = msg.offset()
        return offset is None or offset < self._ends_at_assignment.get(kind, {}).get(msg.partition() or 0, sys.maxsize)

    def _owns_partition(self, kind: str, key: bytes) -> bool:
        """Whether a task record with this key would come to this worker (as the assignment stands)."""
        total = self._partition_counts.get(kind)
        return total is not None and partition_for_key(key, total) in self._partitions.get(kind, ())

    def _send(self, workflow_id: str, kind: str, body: Record, *, until_delivered: bool = True) -> asyncio.Future[Message]:
        """A task's result (or start) goes to history however long the broker is away: a failed
        delivery is tried again until it succeeds (a repeat is rejected as stale; a loss would leave
        the task to its timeout, or for ever when it has none)."""
        return self.client.send_command(workflow_id, kind, body, identity=self.identity, until_delivered=until_delivered)

    def _send_all(
        self, workflow_id: str, commands: list[tuple[str, Record]], loop: asyncio.AbstractEventLoop | None = None,
    ) -> list[asyncio.Future[Message]]:
        """Commands of one task sent as `_send` sends one, back to back (Client.send_commands); `loop`:
        sent from another thread on its behalf."""
        return self.client.send_commands(workflow_id, commands, identity=self.identity, until_delivered=True, loop=loop)

    async def _decode(self, msg: Message) -> tuple[Record, Exception | None] | None:
        """The task, its payloads through the payload codec, and why the codec could not decode
        them (the task then fails with that reason); None (logged) for bytes that are no task."""
        try:
            task = self._tasks.decode(msg.value(), msg.headers())
        except UndecodableRecord as exc:
            log.error("event=task_undecodable topic=%s partition=%d offset=%d error=%s", msg.topic(), msg.partition(), msg.offset(), exc)
            return None
        try:
            await self.client.data_converter.decode_payloads(task)
        except Exception as exc:
            log.error("event=task_payloads_undecodable workflow_id=%s run_id=%s error=%r", task["workflow_id"], task["run_id"], str(exc))
            return task, exc
        return task, None


def _partition_ends(consumer: Any, partitions: list[Any], task_queue: str) -> dict[int, int]:
    """Each assigned partition's end (its high watermark) now, asked again for a while where the
    broker cannot tell yet (a topic just created has no leader for a moment); a partition whose end
    stays unknown is left out, so every record of it counts as one that may be a redelivery."""
    ends: dict[int, int] = {}
    deadline = time.monotonic() + PARTITION_END_WAIT_S
    for tp in partitions:
        while tp.partition not in ends:
            try:
                ends[tp.partition] = consumer.get_watermark_offsets(tp, timeout=max(0.1, deadline - time.monotonic()), cached=False)[1]
            except KafkaException as exc:
                if time.monotonic() + 0.1 < deadline:
                    time.sleep(0.1)
                    continue
                log.warning("event=worker_partition_end_unknown task_queue=%s topic=%s partition=%d error=%r consequence=%r",
                            task_queue, tp.topic, tp.partition, str(exc), "its tasks start only once history accepts their start")
                break
    return ends
