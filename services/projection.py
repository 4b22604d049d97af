"""Folding kadence.history into Postgres, exactly as far as the stored position says.

The timer service and the visibility projector are both projections: each consumed batch of
records is applied in one Postgres transaction together with the partitions' next offsets, so
the position never passes a record whose effect is not stored. Positions live in Postgres,
not in Kafka's committed offsets, one per projection and partition.

A reader of kadence.history feeds one projection (a service in a process of its own) or several
(`kadence server`: the timer and the read model share one consumer group, one fetch and one
decode of each record; docs/architecture.md, "Process layouts"). It starts each partition at the
earliest of its projections' positions, and each projection skips what it applied already.

While Postgres is away a transaction is tried again, with backoff, until it commits: the
projection stops consuming meanwhile (well within max.poll.interval.ms for a restart), and
resumes where it stopped, neither skipping nor repeating a record.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from confluent_kafka import Consumer, TopicPartition
from prometheus_client import Counter
from psycopg_pool import AsyncConnectionPool

from kadence.protocol import topics, tracing
from kadence.protocol.codec import NewerSchemaVersion, UndecodableRecord, history_batch_codec
from kadence.protocol.dead_letters import dead_letter_headers
from kadence.protocol.fence import PartitionFences
from kadence.protocol.kafka import (
    batching_fetch,
    consume_batches,
    core_topics,
    ensure_topics,
    make_consumer,
    make_producer,
    until_broker_answers,
)
from kadence.protocol.observability import ERRORS, READINESS
from kadence.protocol.postgres import CONNECT_TIMEOUT_S, apply_ddl, describe, until_answered, until_answered_blocking
from kadence.protocol.settings import KafkaSettings, postgres_dsn

log = logging.getLogger("kadence.projection")

APPLIED = Counter("kadence_projection_records_total", "History records folded into Postgres, by projection", ["projection"])

POSITION_INTERVAL_S = 1.0  # how often positions that moved without a record applied are stored
REVOKE_STORE_TIMEOUT_S = 10.0

# Records applied in one transaction, at most: bounds the memory of decoding a consumed batch.
MAX_CHUNK_RECORDS = 500
MAX_CHUNK_BYTES = 256 * 1024
# What the consumer fetches ahead, at most (KiB). A projection stops taking records while Postgres is
# away, and the fetched records wait in librdkafka meanwhile: its memory keeps that peak after.
# Far more than a chunk, so a catch-up never waits for a fetch.
PREFETCH_KBYTES = 2048

STORE_POSITION = (
    "INSERT INTO kadence_consumer_offsets (consumer, partition, next_offset) VALUES (%s, %s, %s) "
    "ON CONFLICT (consumer, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset"
)

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
    traceparent: str | None = None  # only while the service traces: the span that wrote the record
    decided_ms: int = 0  # the record's timestamp: when history decided its command (0 if not said)


class Projection(Protocol):
    """What a reader feeds. The bodies here are what a projection that keeps all its state in
    Postgres does (a class that subclasses this one explicitly inherits them); one that holds state
    in memory (the timer's) implements them all."""

    name: str
    ddl: list[str]

    async def apply(self, conn: psycopg.AsyncConnection, records: list[LogRecord]) -> None:
        """Apply admitted batches inside the caller's transaction."""

    def on_commit(self) -> None:
        """Called once what `apply` wrote is committed."""
        return None

    def resume_offset(self, partition: int, next_offset: int) -> int:
        """The position to store: `next_offset`, or earlier if state held only in memory needs the
        records from there to be read again after a restart."""
        return next_offset

    async def salvage(self, conn: psycopg.AsyncConnection, record: LogRecord) -> None:
        """Store what still can be of a record `apply` failed on (it goes to the DLQ): say, the
        answers callers wait for."""
        return None

    def on_assign(self, partitions: set[int]) -> None:
        """The partitions are this reader's from now on."""
        return None

    def on_caught_up(self, partition: int) -> None:
        """The partition is read to its end, and applied, since it was (last) assigned."""
        return None

    def on_revoke(self, partitions: set[int]) -> None:
        """The partitions are this reader's no more."""
        return None


class DeadLetters:
    """The kadence.dlq producer of a reader and its projections."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.producer = make_producer(settings)

    def send(self, services: list[str], msg: Any, reason: str) -> None:
        for service in services:
            ERRORS.labels(service, "dead_lettered_history_record").inc()
        self.producer.produce(topics.DLQ, msg.value(), msg.key(), headers=dead_letter_headers(msg, reason))
        self.producer.poll(0)

    def flush(self, service: str) -> None:
        """Wait until the broker holds every dead letter: a position must not pass a record that
        is neither applied nor in the DLQ."""
        while self.producer.flush(10):
            log.warning("event=dead_letters_unacknowledged consumer=%s count=%d", service, len(self.producer))

    def __len__(self) -> int:
        return len(self.producer)


class ProjectionApplier:
    """One projection's side of a reader: its positions, and the records past them applied in
    Postgres transactions that store the positions too."""

    def __init__(self, pool: AsyncConnectionPool, dsn: str, projection: Projection, dead_letters: DeadLetters) -> None:
        self.pool = pool
        self.dsn = dsn
        self.projection = projection
        self.name = projection.name
        self.loop = asyncio.get_running_loop()  # the rebalance callbacks hand work to it from the polling thread
        # Per assigned partition: the position stored when it was assigned (the records before it
        # are applied: a reader that starts earlier for another projection skips them here), the
        # offset after the last record applied, and the position stored.
        self.floor: dict[int, int] = {}
        self.read_to: dict[int, int] = {}
        self.stored: dict[int, int] = {}
        self.dead_letters = dead_letters  # the reader's
        self._postgres_watch: asyncio.Task[None] | None = None
        self.readiness = READINESS.of(projection.name)  # what /readyz says of this service

    async def setup(self) -> None:
        self._postgres_watch = self.readiness.watch_postgres(self.dsn)

        async def create_tables() -> None:
            async with self.pool.connection() as conn:
                await apply_ddl(conn, [OFFSETS_DDL, *self.projection.ddl])

        await until_answered(f"{self.name}_schema_setup", create_tables)

    def close(self) -> None:
        if self._postgres_watch is not None:
            self._postgres_watch.cancel()

    async def apply(self, records: list[LogRecord], next_offsets: dict[int, int], sources: dict[tuple[int, int], Any]) -> None:
        """Apply the admitted records of a chunk read, past this projection's floor, and move its
        positions to `next_offsets`."""
        records = [record for record in records if record.offset >= self.floor.get(record.partition, 0)]
        next_offsets = {p: offset for p, offset in next_offsets.items() if offset > self.floor.get(p, 0)}
        if not records and not next_offsets:
            return
        traced = tracing.enabled()
        try:
            with tracing.applied(f"{self.name} apply", [r.traceparent for r in records if r.traceparent] if traced else [], {
                "messaging.destination.name": topics.HISTORY, "messaging.batch.message_count": len(records),
            }):
                await self._commit(records, next_offsets)
        except Exception as exc:  # not Postgres away (that is tried again): a record it cannot apply
            log.warning("event=projection_chunk_failed consumer=%s records=%d error=%r: applying them one at a time",
                        self.name, len(records), exc)
            await self._apply_one_at_a_time(records, next_offsets, sources)

    def caught_up(self, partition: int) -> None:
        """The partition is read to its end, and what was read before the end applied."""
        self.readiness.reached_end(partition)
        self.projection.on_caught_up(partition)

    async def store_positions(self, partitions: set[int]) -> None:
        """Store the positions that moved without a record applied: the timer service's, when the
        timers that pinned a partition fired. Else a restart or rebalance reads from the old pin
        and fires those timers again."""
        moved = {p: position for p in partitions & self.read_to.keys()
                 if (position := self.projection.resume_offset(p, self.read_to[p])) != self.stored.get(p)}
        if not moved:
            return
        async with self.pool.connection() as conn, conn.cursor() as cur:
            await cur.executemany(
                STORE_POSITION,
                [(self.name, p, position) for p, position in moved.items()],
            )
        self.stored.update(moved)

    async def _commit(self, records: list[LogRecord], next_offsets: dict[int, int]) -> None:
        """Store the records and positions (the DLQ first holds every dead letter of the records
        before the positions); tried again while Postgres is away."""
        if next_offsets and len(self.dead_letters):
            await self.loop.run_in_executor(None, self.dead_letters.flush, self.name)
        positions = await until_answered(f"{self.name}_apply", lambda: self._store(records, next_offsets))
        self.read_to.update(next_offsets)
        self.stored.update(positions)
        self.projection.on_commit()
        APPLIED.labels(self.name).inc(len(records))

    async def _store(self, records: list[LogRecord], next_offsets: dict[int, int]) -> dict[int, int]:
        """One transaction: the records' effects and the partitions' positions (asked after
        `apply`, which may pin them); the positions stored. Tried again as a whole when Postgres
        is away (a projection's `apply` may be repeated before a commit)."""
        async with self.pool.connection() as conn, conn.transaction():
            if records:
                await self.projection.apply(conn, records)
            positions = {p: self.projection.resume_offset(p, o) for p, o in next_offsets.items()}
            async with conn.cursor() as cur:
                await cur.executemany(
                    STORE_POSITION,
                    [(self.name, p, position) for p, position in positions.items()],
                )
        return positions

    async def _apply_one_at_a_time(
        self, records: list[LogRecord], next_offsets: dict[int, int], sources: dict[tuple[int, int], Any],
    ) -> None:
        """Each record in a transaction of its own; one that fails goes to the DLQ with the reason,
        and what the projection can salvage of it is stored, so the partition moves on."""
        for record in records:
            try:
                await self._commit([record], {})
            except Exception as exc:
                reason = f"{self.name}: {type(exc).__name__}: {exc}"
                log.error("event=history_record_dead_lettered consumer=%s workflow_id=%s run_id=%s partition=%d offset=%d error=%r",
                          self.name, ascii(record.batch["workflow_id"][:200]), record.batch["run_id"],
                          record.partition, record.offset, reason)
                self.dead_letters.send([self.name], sources[(record.partition, record.offset)], reason)
                await self._salvage(record)
        await self._commit([], next_offsets)

    async def _salvage(self, record: LogRecord) -> None:
        async def store() -> None:
            async with self.pool.connection() as conn, conn.transaction():
                await self.projection.salvage(conn, record)

        try:
            await until_answered(f"{self.name}_salvage", store)
        except Exception as exc:
            log.error("event=salvage_failed consumer=%s partition=%d offset=%d error=%r",
                      self.name, record.partition, record.offset, exc)

    # Called from the reader's rebalance callbacks, on its polling thread.
    def positions(self, partitions: list[int]) -> dict[int, int]:
        """The stored positions of `partitions` (absent: from the start)."""
        def read() -> dict[int, int]:
            with psycopg.connect(self.dsn, connect_timeout=CONNECT_TIMEOUT_S) as conn:
                rows = conn.execute(
                    "SELECT partition, next_offset FROM kadence_consumer_offsets WHERE consumer = %s AND partition = ANY(%s)",
                    (self.name, partitions),
                ).fetchall()
            return dict(rows)

        stored = until_answered_blocking(f"{self.name}_positions", read)
        return {p: stored.get(p, 0) for p in partitions}

    def assigned(self, stored: dict[int, int]) -> None:
        self.floor.update(stored)
        self.stored.update(stored)
        self.projection.on_assign(set(stored))
        self.readiness.assign(set(stored))

    def revoked(self, partitions: set[int]) -> None:
        # Before the projection lets go of what pins the positions, and before the next owner reads them.
        try:
            asyncio.run_coroutine_threadsafe(self.store_positions(partitions), self.loop).result(REVOKE_STORE_TIMEOUT_S)
        except Exception as exc:  # the stored positions are older, never ahead: the next owner reads more again
            log.warning("event=positions_not_stored_on_revoke consumer=%s partitions=%s error=%r", self.name, sorted(partitions), exc)
        self.let_go(partitions)

    def let_go(self, partitions: set[int]) -> None:
        for partition in partitions:
            self.floor.pop(partition, None)
            self.read_to.pop(partition, None)
            self.stored.pop(partition, None)
        self.projection.on_revoke(partitions)
        self.readiness.revoke()


@dataclass
class ProjectionService:
    """A projection, the pool it writes with, and what runs beside its reader (the timer's firing,
    the read model's expiry)."""

    projection: Projection
    pool: AsyncConnectionPool
    alongside: Callable[[asyncio.Event], Awaitable[None]]


OpenProjection = Callable[[KafkaSettings, str], AbstractAsyncContextManager[ProjectionService]]


class ProjectionReader:
    """One consumer of kadence.history in consumer group `group`, feeding `projections`: each
    record is fetched, decoded and fenced once, and applied by each projection past its own position."""

    def __init__(self, settings: KafkaSettings, dsn: str, group: str, projections: list[ProjectionService]) -> None:
        self.settings = settings
        self.group = group
        self.dead_letters = DeadLetters(settings)
        self.appliers = [ProjectionApplier(service.pool, dsn, service.projection, self.dead_letters) for service in projections]
        self.names = [applier.name for applier in self.appliers]
        self.codec = history_batch_codec()
        self.loop = asyncio.get_running_loop()
        # Forgotten on each assignment and revoke: the log is read again from the stored position
        # then (a rebalance, or the group session lost while the broker was away).
        self.fences = PartitionFences()
        # A static member with KADENCE_INSTANCE_ID: a restart keeps its partitions and leaves the others alone.
        # Off a workflow's critical path, so it reads in batches (`batching_fetch`).
        self.consumer: Consumer = make_consumer(
            settings, group, static_member=True,
            **{"enable.auto.commit": False, "queued.max.messages.kbytes": PREFETCH_KBYTES,
               **batching_fetch(settings.batching_fetch_wait_ms)},
        )

    async def setup(self) -> None:
        await until_broker_answers(f"{self.group}_topic_setup", lambda: ensure_topics(self.settings, core_topics(self.settings)))
        for applier in self.appliers:
            await applier.setup()

    async def run(self, stop: asyncio.Event) -> None:
        self.consumer.subscribe([topics.HISTORY], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
        stored_at = time.monotonic()
        try:
            ended: list[int] = []
            async for messages in consume_batches(self.consumer, stop, max_messages=MAX_CHUNK_RECORDS, on_end=ended.append):
                chunks = _chunks(messages)
                caught_up = _caught_up_by_chunk(chunks, ended)
                ended.clear()
                self._caught_up(caught_up[0])
                for chunk, partitions in zip(chunks, caught_up[1:], strict=True):
                    records, next_offsets, sources = self._decode(chunk)
                    await asyncio.gather(*(applier.apply(records, next_offsets, sources) for applier in self.appliers))
                    self._caught_up(partitions)
                if time.monotonic() - stored_at >= POSITION_INTERVAL_S:
                    await asyncio.gather(*(self._store_positions(applier) for applier in self.appliers))
                    stored_at = time.monotonic()
        finally:
            # Off the loop: the revoke that closing the consumer calls stores positions on the loop.
            await self.loop.run_in_executor(None, self.consumer.close)
            for applier in self.appliers:
                applier.close()
            self.dead_letters.producer.flush(10)

    def _caught_up(self, partitions: list[int]) -> None:
        for partition in partitions:
            for applier in self.appliers:
                applier.caught_up(partition)

    @staticmethod
    async def _store_positions(applier: ProjectionApplier) -> None:
        try:
            await applier.store_positions(set(applier.read_to))
        except psycopg.OperationalError as exc:  # older positions, never ahead: tried again next interval
            log.warning("event=positions_not_stored consumer=%s error=%r", applier.name, describe(exc))

    def _decode(self, messages: list[Any]) -> tuple[list[LogRecord], dict[int, int], dict[tuple[int, int], Any]]:
        """The admitted records of a chunk, the partitions' next offsets, and each record's message;
        a record that cannot be decoded goes to the DLQ."""
        records = []
        next_offsets: dict[int, int] = {}
        sources: dict[tuple[int, int], Any] = {}
        traced = tracing.enabled()  # else no record's headers are looked at
        for msg in messages:
            next_offsets[msg.partition()] = msg.offset() + 1
            try:
                batch = self.codec.decode(msg.value(), msg.headers())
            except NewerSchemaVersion:
                raise  # before this chunk's transactions: the stored positions stay before the record
            except UndecodableRecord as exc:
                log.error("event=history_record_undecodable consumer=%s partition=%d offset=%d error=%s",
                          self.group, msg.partition(), msg.offset(), exc)
                self.dead_letters.send(self.names, msg, f"{', '.join(self.names)}: {exc}")
                continue
            if self.fences.admit(msg.partition(), msg.offset(), batch):
                records.append(LogRecord(msg.partition(), msg.offset(), batch, tracing.traceparent(msg.headers()) if traced else None,
                                         max(0, msg.timestamp()[1])))
                sources[(msg.partition(), msg.offset())] = msg
        return records, next_offsets, sources

    # Rebalance callbacks run on the polling thread while the loop waits in consume().
    def _on_assign(self, consumer: Consumer, assigned: list[TopicPartition]) -> None:
        partitions = [tp.partition for tp in assigned]
        stored = [applier.positions(partitions) for applier in self.appliers]
        for tp in assigned:  # from the earliest position: each projection skips what it applied
            tp.offset = min(positions[tp.partition] for positions in stored)
        self.fences.forget(set(partitions))
        consumer.assign(assigned)
        for applier, positions in zip(self.appliers, stored, strict=True):
            applier.assigned(positions)
        log.info("event=partitions_assigned consumer=%s positions=%s", self.group, {tp.partition: tp.offset for tp in assigned})

    def _on_revoke(self, consumer: Consumer, revoked: list[TopicPartition]) -> None:
        partitions = {tp.partition for tp in revoked}
        for applier in self.appliers:
            applier.revoked(partitions)
        self.fences.forget(partitions)
        log.info("event=partitions_revoked consumer=%s partitions=%s", self.group, sorted(partitions))

    def _on_lost(self, consumer: Consumer, lost: list[TopicPartition]) -> None:
        # Another member may own them already: its positions are not this one's to overwrite.
        partitions = {tp.partition for tp in lost}
        for applier in self.appliers:
            applier.let_go(partitions)
        self.fences.forget(partitions)
        log.info("event=partitions_lost consumer=%s partitions=%s", self.group, sorted(partitions))


async def run_projections(stop: asyncio.Event, group: str, projections: list[OpenProjection]) -> None:
    """`projections` fed by one reader of kadence.history in consumer group `group`, until `stop`."""
    settings = KafkaSettings.from_env()
    dsn = postgres_dsn()
    async with AsyncExitStack() as opened:
        services = [await opened.enter_async_context(open_projection(settings, dsn)) for open_projection in projections]
        reader = ProjectionReader(settings, dsn, group, services)
        await reader.setup()
        await asyncio.gather(reader.run(stop), *(service.alongside(stop) for service in services))


def _caught_up_by_chunk(chunks: list[list[Any]], ended: list[int]) -> list[list[int]]:
    """The partitions read to their end in this poll (`ended`), by when what was read of each
    before its end is applied: at index 0 those with no record in the poll, at index i + 1 those
    whose last record is in chunk i. So a partition's timers wait for its own records, not for the
    rest of the poll's."""
    last_chunk = {msg.partition(): index for index, chunk in enumerate(chunks) for msg in chunk}
    caught_up: list[list[int]] = [[] for _ in range(len(chunks) + 1)]
    for partition in ended:
        caught_up[last_chunk.get(partition, -1) + 1].append(partition)
    return caught_up


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
