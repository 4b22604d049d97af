"""Timer effects written straight to kadence.history, and the TimeoutFired commands read back:
load for a timer service running without a history service (its benchmark and kill tests).

Never point this at a stack whose history service runs: the synthetic batches carry source
offsets of their own, which that service would take for its commands' positions.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, TopicPartition

from kadence.protocol import topics
from kadence.protocol.codec import command_codec, history_batch_codec
from kadence.protocol.kafka import base_config, make_producer
from kadence.protocol.settings import KafkaSettings

WORKFLOW_ID = "synthetic-timers-{partition}"


class TimerLoad:
    """Writes Timer and DropTimer effects, one history batch per call, to one history partition.

    Each batch continues one run per partition by an event, as a real batch that sets or drops a
    timer does: so a reader's fence checks each run's event ids, not only the source offsets.
    """

    def __init__(self, settings: KafkaSettings) -> None:
        self.producer = make_producer(settings)
        self.codec = history_batch_codec()
        self.source_offsets: collections.Counter[int] = collections.Counter()
        self.next_event_ids: collections.Counter[int] = collections.Counter()

    def set(self, partition: int, timers: Iterable[tuple[str, int]]) -> None:
        """Set timers given as (timer_id, fire_at_ms)."""
        self._write(partition, [("Timer", {
            "timer_id": timer_id, "kind": "USER_TIMER", "fire_at_ms": fire_at_ms, "scheduled_event_id": 1, "attempt": 1,
        }) for timer_id, fire_at_ms in timers])

    def drop(self, partition: int, timer_ids: Iterable[str]) -> None:
        self._write(partition, [("DropTimer", {"timer_id": timer_id}) for timer_id in timer_ids])

    def _write(self, partition: int, effects: list[tuple[str, dict[str, object]]]) -> None:
        event_id = self.next_event_ids[partition] + 1
        self.next_event_ids[partition] = event_id
        marker = ("MarkerRecorded", {"marker_name": "timer-load", "details": {}, "workflow_task_completed_event_id": 0})
        batch = {
            "workflow_id": WORKFLOW_ID.format(partition=partition), "run_id": f"synthetic-{partition}", "first_event_id": event_id,
            "events": [{"event_id": event_id, "event_time_ms": 0, "attributes": marker}],
            "buffered": [], "effects": effects, "heartbeats": [], "next_run": None, "request_ids": [],
            "rejection": None, "source_partition": partition, "source_offset": self.source_offsets[partition],
        }
        self.source_offsets[partition] += 1
        while True:
            try:
                self.producer.produce(topics.HISTORY, self.codec.encode(batch), batch["workflow_id"].encode(),
                                      partition=partition, headers=self.codec.headers())
                break
            except BufferError:
                self.producer.poll(0.1)
        self.producer.poll(0)

    def flush(self) -> None:
        left = self.producer.flush(60)
        assert left == 0, f"{left} timer records not delivered in 60 s"


@dataclass
class Firing:
    timer_id: str
    partition: int
    produced_at_ms: int  # the record's CreateTime: when the timer service produced it
    identity: str


@dataclass
class FiredTimers:
    """Reads TimeoutFired commands from kadence.commands, from the offsets it starts at."""

    settings: KafkaSettings
    start_offsets: dict[int, int]
    firings: dict[str, list[Firing]] = field(default_factory=lambda: collections.defaultdict(list))

    def __post_init__(self) -> None:
        self.consumer = Consumer({
            **base_config(self.settings), "group.id": "kadence-timer-load", "enable.auto.commit": False,
            "fetch.wait.max.ms": self.settings.fetch_wait_max_ms,
        })
        self.consumer.assign([TopicPartition(topics.COMMANDS, p, o) for p, o in self.start_offsets.items()])
        self.codec = command_codec()

    def poll(self, timeout_s: float = 0.2) -> list[Firing]:
        new = []
        for msg in self.consumer.consume(10_000, timeout_s):
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"consume error: {msg.error()}")
                continue
            command = self.codec.decode(msg.value(), msg.headers())
            kind, body = command["command"]
            if kind == "TimeoutFired":
                firing = Firing(body["timer_id"], msg.partition(), msg.timestamp()[1], command["identity"])
                self.firings[firing.timer_id].append(firing)
                new.append(firing)
        return new

    def close(self) -> None:
        self.consumer.close()
