"""Task queue records: how a task effect of a history batch becomes a record of its task queue
topic (which topic, which key, within the record limit, not past its schedule-to-start deadline).

Matching owns this format; the history service runs it in its own process and produces the
records itself, right after the batch that dispatches them, as Temporal's history service hands
a task to matching without a queue between them (docs/architecture.md, "Task dispatch")."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from kadence.protocol import topics, tracing
from kadence.protocol.codec import HeaderList, task_codec
from kadence.protocol.events import run_sections
from kadence.protocol.limits import MAX_RECORD_VALUE_BYTES, task_queue_problem
from kadence.protocol.names import EffectType
from kadence.protocol.observability import ERRORS

log = logging.getLogger("kadence.matching")

DISPATCHED = Counter("kadence_tasks_dispatched_total", "Tasks produced to task queue topics", ["task_queue", "kind"])

TASK_KINDS: dict[str, topics.TaskKind] = {
    EffectType.WorkflowTask: "workflow", EffectType.QueryTask: "workflow",
    EffectType.ActivityTask: "activity", EffectType.ActivityCancellation: "activity", EffectType.NexusTask: "nexus",
}

# The tasks whose copies a worker runs only once history accepted their start (`redispatched`).
MAY_BE_COPIES = frozenset({EffectType.WorkflowTask, EffectType.ActivityTask})


@dataclass(frozen=True)
class TaskRecord:
    """One record for a task queue topic."""

    topic: str
    key: bytes
    value: bytes
    headers: HeaderList
    task_queue: str
    kind: topics.TaskKind
    traceparent: str | None


class TaskRecords:
    """The task queue records of history batches."""

    def __init__(self) -> None:
        self.tasks = task_codec()

    def of(self, batch: Mapping[str, Any], traceparent: str | None = None, *, maybe_copies: bool = False) -> Iterator[TaskRecord]:
        """The records of the batch's task effects; `traceparent` is the batch's, the parent of
        each task's span. `maybe_copies`: the batch decides a command again that an earlier owner
        may have decided, so its workflow and activity tasks are marked `redispatched`, as copies a
        worker may be running."""
        for section in run_sections(batch):
            for effect_type, effect in section.effects:
                kind = TASK_KINDS.get(effect_type)
                if maybe_copies and effect_type in MAY_BE_COPIES:
                    effect = {**effect, "redispatched": True}
                if kind is not None and not _expired(batch["workflow_id"], section.run_id, effect_type, effect):
                    # The history a query's answer must see: the run's events up to this batch's last.
                    history_length = section.first_event_id + len(section.events) - 1 if effect_type == EffectType.QueryTask else 0
                    record = self._record(batch["workflow_id"], section.run_id, effect_type, effect, kind, traceparent, history_length)
                    if record is not None:
                        yield record

    def _record(
        self, workflow_id: str, run_id: str, effect_type: str, effect: dict[str, Any], kind: topics.TaskKind,
        traceparent: str | None, history_length: int,
    ) -> TaskRecord | None:
        if problem := task_queue_problem(effect["task_queue"]):  # the machine refuses such names: never a crash loop
            ERRORS.labels("history", "task_queue_invalid").inc()
            log.error("event=task_not_dispatched workflow_id=%s run_id=%s task=%s error=%r", workflow_id, run_id, effect_type, problem)
            return None
        topic = topics.task_queue_topic(effect["task_queue"], kind)
        task = {"workflow_id": workflow_id, "run_id": run_id, "task": (effect_type, effect), "history_length": history_length}
        value = self._within_record_limit(task)
        if value is None:
            return None
        # Workflow tasks by workflow_id: the same worker keeps the same executions (its sticky cache).
        key = workflow_id.encode() if kind == "workflow" else topics.activity_task_key(workflow_id, effect["scheduled_event_id"])
        traced = tracing.later(f"dispatch {effect_type}", traceparent, start_ms=int(time.time() * 1000), attributes={
            "messaging.destination.name": topic, "kadence.workflow_id": workflow_id, "kadence.run_id": run_id,
        }) if traceparent is not None else None
        return TaskRecord(topic, key, value, self.tasks.headers() + tracing.headers_of(traced), effect["task_queue"], kind, traced)

    def _within_record_limit(self, task: dict[str, Any]) -> bytes | None:
        """The encoded task, within a record: a workflow task too large to carry its events goes
        without them (its worker reads them). None, logged, for a task that cannot fit: its
        timeout acts for it, and the partition goes on."""
        value = self.tasks.encode(task)
        effect_type, effect = task["task"]
        if len(value) > MAX_RECORD_VALUE_BYTES and effect_type == EffectType.WorkflowTask:
            events = len(effect["history"])
            effect["history"] = []
            effect["first_event_id"] = effect["scheduled_event_id"] + 1
            value = self.tasks.encode(task)
            log.info("event=workflow_task_events_left_out workflow_id=%s run_id=%s events=%d record_bytes=%d",
                     task["workflow_id"], task["run_id"], events, len(value))
        if len(value) <= MAX_RECORD_VALUE_BYTES:
            return value
        ERRORS.labels("history", "task_too_large").inc()
        log.error("event=task_not_dispatched workflow_id=%s run_id=%s task=%s bytes=%d limit=%d",
                  task["workflow_id"], task["run_id"], effect_type, len(value), MAX_RECORD_VALUE_BYTES)
        return None


def _expired(workflow_id: str, run_id: str, effect_type: str, effect: dict[str, Any]) -> bool:
    """An activity task past its schedule-to-start deadline (a re-dispatch, say) is not sent: that
    timeout fires instead (the timer service has it)."""
    if effect_type == EffectType.ActivityTask and 0 < effect["schedule_to_start_deadline_ms"] < time.time() * 1000:
        log.info("event=activity_task_expired workflow_id=%s run_id=%s scheduled_event_id=%d attempt=%d",
                 workflow_id, run_id, effect["scheduled_event_id"], effect["attempt"])
        return True
    return False


def counted(record: TaskRecord) -> None:
    """Count a task produced, with its trace as the exemplar."""
    DISPATCHED.labels(record.task_queue, record.kind).inc(exemplar=tracing.exemplar(record.traceparent))
