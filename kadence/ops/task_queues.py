"""What a task queue looks like now, read from Kafka alone: its pollers, backlog and dispatch rate.

- Pollers: the workers heard from on kadence.pollers within the last POLLER_WINDOW_S seconds.
- Backlog: tasks routed to the queue's topic that its workers have not taken yet: per partition,
  its end (ListOffsets) minus the worker group's committed offset (or the partition's first
  offset, before any commit), as Kafka's consumer lag. Workers commit about every second, so the
  count can include tasks taken just before; a cancellation notice for an activity counts as one.
- Dispatch rate: tasks routed to the queue in the last RATE_WINDOW_S seconds, per second: per
  partition, its end minus its first offset at or after then.
Both are offsets subtracted, not records read, so they cost the same for any backlog. On Tansu,
whose ListOffsets answers short of the end, they read low (kadence.protocol.kafka.is_tansu).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, get_args

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from kadence.protocol import topics
from kadence.protocol.codec import UndecodableRecord, codec
from kadence.protocol.kafka import base_config, offsets_for_time, read_to_end, watermarks
from kadence.protocol.settings import KafkaSettings

POLLER_WINDOW_S = 30
RATE_WINDOW_S = 60


@dataclass
class Poller:
    identity: str
    kind: str
    partitions: list[int]
    last_seen_s_ago: float


@dataclass
class TaskQueueKind:
    kind: str
    topic: str
    partitions: int
    backlog: int
    dispatch_rate_per_s: float


@dataclass
class TaskQueueDescription:
    task_queue: str
    kinds: list[TaskQueueKind] = field(default_factory=list)
    pollers: list[Poller] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def describe_task_queue(settings: KafkaSettings, task_queue: str) -> TaskQueueDescription:
    now_ms = int(time.time() * 1000)
    described = TaskQueueDescription(task_queue, pollers=_pollers(settings, task_queue, now_ms))
    existing = AdminClient(base_config(settings)).list_topics(timeout=30).topics
    for kind in get_args(topics.TaskKind):
        topic = topics.task_queue_topic(task_queue, kind)
        if topic in existing:
            described.kinds.append(_kind(settings, task_queue, kind, topic, len(existing[topic].partitions), now_ms))
    return described


def _pollers(settings: KafkaSettings, task_queue: str, now_ms: int) -> list[Poller]:
    heartbeats = codec("PollerHeartbeat")
    since = offsets_for_time(settings, topics.POLLERS, [0], now_ms - POLLER_WINDOW_S * 1000)
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for msg in read_to_end(settings, topics.POLLERS, since):
        try:
            heartbeat = heartbeats.decode(msg.value(), msg.headers())
        except UndecodableRecord:
            continue
        if heartbeat["task_queue"] == task_queue:
            latest[(heartbeat["identity"], heartbeat["kind"])] = heartbeat
    return [
        Poller(h["identity"], h["kind"], h["partitions"], round((now_ms - h["sent_at_ms"]) / 1000, 1))
        for h in sorted(latest.values(), key=lambda h: (h["kind"], h["identity"]))
    ]


def _kind(settings: KafkaSettings, task_queue: str, kind: topics.TaskKind, topic: str, partitions: int, now_ms: int) -> TaskQueueKind:
    # The group's offsets are fetched by a consumer that never joins it (OffsetFetch): the
    # workers' group is not disturbed.
    consumer = Consumer({**base_config(settings), "group.id": topics.worker_group(task_queue, kind), "enable.auto.commit": False})
    try:
        stored = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        committed = {tp.partition: tp.offset for tp in stored}  # OFFSET_INVALID (< 0) where none
        offsets = watermarks(consumer, topic, range(partitions))
    finally:
        consumer.close()
    recent = offsets_for_time(settings, topic, list(range(partitions)), now_ms - RATE_WINDOW_S * 1000)
    backlog = sum(max(0, end - max(first, committed[p])) for p, (first, end) in offsets.items())
    routed_recently = sum(max(0, offsets[p][1] - offset) for p, offset in recent.items())
    return TaskQueueKind(kind, topic, partitions, backlog, round(routed_recently / RATE_WINDOW_S, 2))
