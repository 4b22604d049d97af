"""Folding kadence.history into Postgres, exactly as far as the stored position says.

The timer service and the visibility projector are both projections: each consumed batch of
records is applied in one Postgres transaction together with the partitions' next offsets, so
the position never passes a record whose effect is not stored. Positions live in Postgres,
not in Kafka's committed offsets.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import Counter
from psycopg_pool import AsyncConnectionPool

from kadence.protocol import topics
from kadence.protocol.codec import NewerSchemaVersion, UndecodableRecord, history_batch_codec
from kadence.protocol.fence import LogFence
from kadence.protocol.kafka import consume_batches, core_topics, ensure_topics, make_consumer
from kadence.protocol.observability import ERRORS, READINESS
from kadence.protocol.postgres import apply_ddl
from kadence.protocol.settings import KafkaSettings

log = logging.getLogger("kadence.projection")

APPLIED = Counter("kadence_projection_records_total", "History records folded into Postgres, by projection", ["projection"])

# Records applied in one transaction, at most: bounds the memory of decoding a consumed batch.
MAX_CHUNK_RECORDS = 2000
MAX_CHUNK_BYTES = 1024 * 1024

OFFSETS_DDL = """
CREATE TABLE IF NOT EXISTS kadence_consumer_offsets (
    consumer text NOT NULL,
    partition int NOT NULL,
    next_offset bigint NOT NULL,
    PRIMARY KEY (consumer, partition)
)
"""


@dataclass
class LogRecord:
    partition: int
    offset: int
    batch: dict[str, Any]


class Projection(Protocol):
    name: str
    ddl: list[str]

    async def apply(self, conn: psycopg.AsyncConnection, records: list[LogRecord]) -> None:
        """Apply admitted batches inside the caller's transaction."""

    def on_commit(self) -> None:
        """Called once what `apply` wrote is committed."""

    def resume_offset(self, partition: int, next_offset: int) -> int:
        """The position to store: `next_offset`, or earlier if state held only in memory needs the
        records from there to be read again after a restart."""

    def on_assign(self, partitions: set[int]) -> None: ...

    def on_revoke(self, partitions: set[int]) -> None: ...


class ProjectionRunner:
    def __init__(self, settings: KafkaSettings, pool: AsyncConnectionPool, dsn: str, projection: Projection) -> None:
        self.settings = settings
        self.pool = pool
        self.dsn = dsn
        self.projection = projection
        self.codec = history_batch_codec()
        # One fence per partition, new on each assignment: the log is read again from the stored
        # position then (after a rebalance, or the group session lost while the broker was away),
        # and a fence that remembered the runs would skip what it reads again as zombie repeats,
        # with the timers those records set (released from memory on the revoke) never held again.
        self.fences: dict[int, LogFence] = {}
        # A static member with KADENCE_INSTANCE_ID: a restart keeps its partitions and leaves the others alone.
        self.consumer: Consumer = make_consumer(
            settings, f"kadence.{projection.name}", static_member=True, **{"enable.auto.commit": False},
        )

    async def setup(self) -> None:
        READINESS.postgres_dsn = self.dsn
        ensure_topics(self.settings, core_topics(self.settings))
        async with self.pool.connection() as conn:
            await apply_ddl(conn, [OFFSETS_DDL, *self.projection.ddl])

    async def run(self, stop: asyncio.Event) -> None:
        self.consumer.subscribe([topics.HISTORY], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke)
        try:
            async for messages in consume_batches(self.consumer, stop, max_messages=MAX_CHUNK_RECORDS, on_end=READINESS.reached_end):
                for chunk in _chunks(messages):
                    await self._apply(chunk)
        finally:
            self.consumer.close()

    async def _apply(self, messages: list[Any]) -> None:
        records = []
        next_offsets: dict[int, int] = {}
        for msg in messages:
            next_offsets[msg.partition()] = msg.offset() + 1
            try:
                batch = self.codec.decode(msg.value(), msg.headers())
            except NewerSchemaVersion:
                raise  # before this batch's transaction: the stored position stays before the record
            except UndecodableRecord as exc:
                ERRORS.labels("undecodable_history_record").inc()
                log.error("event=history_record_undecodable partition=%d offset=%d error=%s", msg.partition(), msg.offset(), exc)
                continue
            if self.fences.setdefault(msg.partition(), LogFence(strict=False)).admit(msg.partition(), batch):
                records.append(LogRecord(msg.partition(), msg.offset(), batch))
        async with self.pool.connection() as conn, conn.transaction():
            if records:
                await self.projection.apply(conn, records)
            async with conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO kadence_consumer_offsets (consumer, partition, next_offset) VALUES (%s, %s, %s) "
                    "ON CONFLICT (consumer, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset",
                    [(self.projection.name, p, self.projection.resume_offset(p, o)) for p, o in next_offsets.items()],
                )
        self.projection.on_commit()
        APPLIED.labels(self.projection.name).inc(len(records))

    # Rebalance callbacks run on the polling thread while the loop waits in consume().
    def _on_assign(self, consumer: Consumer, assigned: list[TopicPartition]) -> None:
        partitions = [tp.partition for tp in assigned]
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(
                "SELECT partition, next_offset FROM kadence_consumer_offsets WHERE consumer = %s AND partition = ANY(%s)",
                (self.projection.name, partitions),
            ).fetchall()
        stored = dict(rows)
        for tp in assigned:
            tp.offset = stored.get(tp.partition, 0)
            self.fences[tp.partition] = LogFence(strict=False)
        consumer.assign(assigned)
        self.projection.on_assign(set(partitions))
        READINESS.assign(set(partitions))
        log.info("event=partitions_assigned consumer=%s positions=%s", self.projection.name, {tp.partition: tp.offset for tp in assigned})

    def _on_revoke(self, consumer: Consumer, revoked: list[TopicPartition]) -> None:
        self.projection.on_revoke({tp.partition for tp in revoked})
        READINESS.revoke()
        log.info("event=partitions_revoked consumer=%s partitions=%s", self.projection.name, sorted(tp.partition for tp in revoked))


def _chunks(messages: list[Any]) -> list[list[Any]]:
    """Consecutive runs of messages of at most MAX_CHUNK_BYTES each (a larger message alone)."""
    chunks: list[list[Any]] = []
    size = MAX_CHUNK_BYTES
    for msg in messages:
        length = len(msg.value() or b"")
        if size + length > MAX_CHUNK_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(msg)
        size += length
    return chunks
