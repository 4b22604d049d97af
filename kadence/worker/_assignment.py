"""The partitions of a task queue's topics the consumer groups assign a worker, per task kind: which
task records come to it, and which of them may have reached another worker before."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaException, Message

from kadence.protocol import topics
from kadence.protocol.kafka import partition_for_key
from kadence.protocol.records import Task

log = logging.getLogger("kadence.worker")

PARTITION_END_WAIT_S = 5.0  # for the ends of the partitions assigned, on the polling thread


class PartitionAssignment:
    """The partitions a worker polls, as its consumers' rebalances assign and revoke them."""

    def __init__(self, task_queue: str, identity: str, kinds: Sequence[topics.TaskKind]) -> None:
        self._task_queue = task_queue
        self._identity = identity
        self._kinds = set(kinds)
        self.partitions: dict[str, list[int]] = {}  # per kind, this worker's partitions of the queue's topic
        self._counts: dict[str, int] = {}  # per kind, how many partitions the queue's topic has
        self._shares: dict[str, float] = {}  # per kind, the part of the partitions assigned here at the last assignment
        # Per kind and partition, the partition's end when it was assigned: a record before it may
        # have been read by the partition's previous owner (see may_be_redelivered).
        self._ends_at_assignment: dict[str, dict[int, int]] = {}
        self._assigned: set[str] = set()
        self.changed = asyncio.Event()
        """Set when partitions are assigned or revoked (cleared by whoever announces them)."""
        self.complete = asyncio.Event()
        """Set once every task kind the worker polls has had partitions assigned."""

    async def subscribe(self, consumer: Any, kind: topics.TaskKind) -> None:
        """Subscribe `consumer` to the queue's topic of `kind`, its rebalances kept here."""
        loop = asyncio.get_running_loop()
        topic = topics.task_queue_topic(self._task_queue, kind)
        metadata = await loop.run_in_executor(None, lambda: consumer.list_topics(topic, timeout=30))
        total = len(metadata.topics[topic].partitions)

        def assigned(consumer: Any, partitions: list[Any]) -> None:
            # Here, on the polling thread, before the first record of these partitions is handed over.
            ends = _partition_ends(consumer, partitions, self._task_queue)
            self._ends_at_assignment[kind] = {**self._ends_at_assignment.get(kind, {}), **ends}  # a new dict: the loop reads it
            log.info("event=worker_partitions_assigned task_queue=%s kind=%s identity=%s partitions=%s ends=%s",
                     self._task_queue, kind, self._identity, [tp.partition for tp in partitions], ends)
            loop.call_soon_threadsafe(self._mark_assigned, kind, sorted(tp.partition for tp in partitions), total)

        def revoked(consumer: Any, partitions: list[Any]) -> None:
            revoked_now = {tp.partition for tp in partitions}
            self._ends_at_assignment[kind] = {p: end for p, end in self._ends_at_assignment.get(kind, {}).items() if p not in revoked_now}
            loop.call_soon_threadsafe(self.partitions.__setitem__, kind, [])

        consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)

    def _mark_assigned(self, kind: str, partitions: list[int], total: int) -> None:
        self.partitions[kind] = partitions
        self._counts[kind] = total
        self._shares[kind] = len(partitions) / total
        self.changed.set()
        self._assigned.add(kind)
        if self._assigned >= self._kinds:
            self.complete.set()

    def share(self, kind: str) -> float:
        """The part of the queue's partitions of `kind` this worker was assigned last (all of them
        before any assignment; kept while a rebalance revokes them)."""
        return self._shares.get(kind, 1.0)

    def may_be_redelivered(self, kind: str, msg: Message, task: Task) -> bool:
        """Whether this task may have reached a worker before: its record was in its partition when
        the partition was assigned here, so the previous owner may have read it and run its task,
        without committing past it (killed, or cut off from the broker); or history marked it as a
        possible copy, which a worker may be running: dispatched again because no start was
        recorded in time (its start held up by a backlog), or decided again after history
        recovered its partition. A record appended since, not re-dispatched, is read here first
        (docs/architecture.md, "Exactly once")."""
        match task["task"]:
            case ("WorkflowTask" | "ActivityTask", body) if body.get("redispatched", False):
                return True
        offset = msg.offset()
        return offset is None or offset < self._ends_at_assignment.get(kind, {}).get(msg.partition() or 0, sys.maxsize)

    def owns(self, kind: str, key: bytes) -> bool:
        """Whether a task record with this key would come to this worker (as the assignment stands)."""
        total = self._counts.get(kind)
        return total is not None and partition_for_key(key, total) in self.partitions.get(kind, ())

    def assigned_elsewhere(self, kind: str, key: bytes) -> bool:
        """Whether a task record with this key would go to another worker of the queue: this one has
        had partitions of `kind` assigned, and not that one now (none, while a rebalance runs)."""
        return kind in self._counts and not self.owns(kind, key)


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
