"""Routing of the effects of one history batch: tasks to task queue topics, outbound commands
(child starts, signals and cancel requests between workflows, a child's answers to its parent)
to kadence.commands."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import Counter

from kadence.protocol import topics, tracing
from kadence.protocol.codec import SCHEMA_HEADER, HeaderList, NewerSchemaVersion, history_batch_codec, task_codec
from kadence.protocol.dead_letters import headers_for_dead_letter
from kadence.protocol.events import run_sections
from kadence.protocol.fence import PartitionFences
from kadence.protocol.kafka import ensure_topics
from kadence.protocol.limits import MAX_RECORD_VALUE_BYTES
from kadence.protocol.names import EffectType
from kadence.protocol.observability import ERRORS
from kadence.protocol.settings import KafkaSettings

log = logging.getLogger("kadence.matching")

ROUTED = Counter("kadence_matching_tasks_routed_total", "Tasks routed to task queue topics", ["task_queue", "kind"])
RELAYED = Counter("kadence_matching_commands_relayed_total", "Outbound commands relayed to kadence.commands")

Send = Callable[[str, bytes | None, bytes, HeaderList], Awaitable[Any]]

_TASK_KINDS: dict[str, topics.TaskKind] = {
    EffectType.WorkflowTask: "workflow", EffectType.QueryTask: "workflow",
    EffectType.ActivityTask: "activity", EffectType.ActivityCancellation: "activity",
}


class TaskRouter:
    def __init__(self, settings: KafkaSettings, send: Send) -> None:
        self.settings = settings
        self.send = send
        self.fences = PartitionFences()
        self.batches = history_batch_codec()
        self.tasks = task_codec()
        self.known_topics: set[str] = set()
        self._traced: HeaderList = []  # the traceparent of the record being routed, for what it produces

    async def route(
        self, partition: int, offset: int, key: bytes | None, value: bytes, headers: HeaderList,
        timestamp_ms: int | None = None,
    ) -> None:
        """Route one record's effects; a record that cannot be routed goes to the DLQ with the reason."""
        try:
            with tracing.hop("matching route", headers, timestamp_ms=timestamp_ms, attributes={
                "messaging.destination.name": topics.HISTORY, "messaging.kafka.destination.partition": partition,
                "messaging.kafka.message.offset": offset,
            }) as traceparent:
                self._traced = tracing.headers_of(traceparent)
                await self._route(partition, offset, value, headers)
        except NewerSchemaVersion:
            raise
        except Exception as exc:  # bad input must not stop the partition: the reason goes with the record
            reason = f"matching: {type(exc).__name__}: {exc}"
            ERRORS.labels("dead_lettered_history_record").inc()
            log.error("event=history_record_dead_lettered partition=%d offset=%d error=%r", partition, offset, reason)
            await self.send(topics.DLQ, key, value, headers_for_dead_letter(headers, topics.HISTORY, partition, offset, reason))

    async def _route(self, partition: int, offset: int, value: bytes, headers: HeaderList) -> None:
        batch = self.batches.decode(value, headers)  # UndecodableRecord: dead-lettered by route
        if not self.fences.admit(partition, offset, batch):
            # Within one read of the partition: a history instance that just lost it repeating the owner.
            log.info("event=repeated_history_batch_skipped workflow_id=%s run_id=%s partition=%d offset=%d source_offset=%d",
                     batch["workflow_id"], batch["run_id"], partition, offset, batch["source_offset"])
            return
        for section in run_sections(batch):
            for effect_type, effect in section.effects:
                await self._dispatch(batch["workflow_id"], section.run_id, effect_type, effect)

    async def _dispatch(self, workflow_id: str, run_id: str, effect_type: str, effect: dict[str, Any]) -> None:
        if effect_type == EffectType.OutboundCommand:
            # Keyed by the target's workflow id; the producer's default partitioner is Kafka's murmur2.
            headers = [(SCHEMA_HEADER, effect["schema_fingerprint"].encode()), *self._traced]
            await self.send(topics.COMMANDS, effect["workflow_id"].encode(), effect["command"], headers)
            RELAYED.inc()
            return
        kind = _TASK_KINDS.get(effect_type)
        if effect_type == EffectType.ActivityTask and 0 < effect["schedule_to_start_deadline_ms"] < time.time() * 1000:
            # Its schedule-to-start timeout fires instead (the timer service has it).
            log.info("event=activity_task_expired workflow_id=%s run_id=%s scheduled_event_id=%d attempt=%d",
                     workflow_id, run_id, effect["scheduled_event_id"], effect["attempt"])
            return
        if kind is not None:
            topic = topics.task_queue_topic(effect["task_queue"], kind)
            await self._ensure_topic(topic)
            task = {"workflow_id": workflow_id, "run_id": run_id, "task": (effect_type, effect)}
            # Workflow tasks keyed by workflow_id: the same worker keeps the same executions (sticky
            # cache). Activity tasks keyed by the activity: spread over all workers, and a
            # cancellation lands on the partition (so the worker) that holds the attempt.
            key = (workflow_id if kind == "workflow" else f"{workflow_id}/{effect['scheduled_event_id']}").encode()
            value = self._within_record_limit(task)
            if value is None:
                return
            if self._traced:  # a span per task, under the record's: the worker's hop is its child
                with tracing.child(f"matching {effect_type}", {
                    "messaging.destination.name": topic, "kadence.workflow_id": workflow_id, "kadence.run_id": run_id,
                }) as traceparent:
                    await self.send(topic, key, value, self.tasks.headers() + tracing.headers_of(traceparent))
                ROUTED.labels(effect["task_queue"], kind).inc(exemplar=tracing.exemplar(traceparent))
            else:
                await self.send(topic, key, value, self.tasks.headers())
                ROUTED.labels(effect["task_queue"], kind).inc()

    def _within_record_limit(self, task: dict[str, Any]) -> bytes | None:
        """The encoded task, within a record: a workflow task too large to carry its events goes
        without them (its worker reads them). None, logged, for a task that cannot fit: its
        timeout acts for it, and the partition goes on."""
        value = self.tasks.encode(task)
        effect_type, effect = task["task"]
        if len(value) > MAX_RECORD_VALUE_BYTES and effect_type == EffectType.WorkflowTask:
            effect["history"] = []
            effect["first_event_id"] = effect["scheduled_event_id"] + 1
            value = self.tasks.encode(task)
        if len(value) <= MAX_RECORD_VALUE_BYTES:
            return value
        ERRORS.labels("task_too_large").inc()
        log.error("event=task_not_routed workflow_id=%s run_id=%s task=%s bytes=%d limit=%d",
                  task["workflow_id"], task["run_id"], effect_type, len(value), MAX_RECORD_VALUE_BYTES)
        return None

    async def _ensure_topic(self, topic: str) -> None:
        if topic in self.known_topics:
            return
        await asyncio.get_running_loop().run_in_executor(
            None, ensure_topics, self.settings, {topic: self.settings.task_queue_partitions},
        )
        self.known_topics.add(topic)
