"""One reader of kadence.history feeds several projections (`kadence server`: the timer and the read
model): it starts each partition at the earliest of their positions, and each projection applies
only the records past its own, storing its own position with them in Postgres."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from kadence.dev.local_stack import LocalStack
from kadence.protocol.postgres import connection_pool
from services.projection import DeadLetters, LogRecord, Projection, ProjectionApplier


class OffsetsSeen(Projection):
    """A projection that stores the offsets of the records it applies."""

    ddl = ["CREATE TABLE IF NOT EXISTS offsets_seen (projection text NOT NULL, partition int NOT NULL, log_offset bigint NOT NULL)"]

    def __init__(self, name: str) -> None:
        self.name = name

    async def apply(self, conn: psycopg.AsyncConnection, records: list[LogRecord]) -> None:
        async with conn.cursor() as cur:
            await cur.executemany("INSERT INTO offsets_seen VALUES (%s, %s, %s)", [(self.name, r.partition, r.offset) for r in records])



@pytest.fixture
async def dsn(stack: LocalStack) -> AsyncIterator[str]:
    database = f"projections_{uuid.uuid4().hex}"
    with psycopg.connect(stack.postgres_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {database}")
    try:
        yield make_conninfo(stack.postgres_dsn, dbname=database)
    finally:
        with psycopg.connect(stack.postgres_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {database} WITH (FORCE)")


async def test_each_projection_applies_only_the_records_past_its_own_position(stack: LocalStack, dsn: str) -> None:
    async with connection_pool(dsn, min_size=1, max_size=2) as pool:
        dead_letters = DeadLetters(stack.settings)
        behind = ProjectionApplier(pool, dsn, OffsetsSeen("behind"), dead_letters)
        ahead = ProjectionApplier(pool, dsn, OffsetsSeen("ahead"), dead_letters)
        for applier in (behind, ahead):
            await applier.setup()
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute("INSERT INTO kadence_consumer_offsets VALUES ('ahead', 0, 5), ('ahead', 1, 2)")
        try:
            # What the reader does on an assignment: each projection's positions, and the reader's start.
            positions = [applier.positions([0, 1]) for applier in (behind, ahead)]
            assert positions == [{0: 0, 1: 0}, {0: 5, 1: 2}]
            for applier, stored in zip((behind, ahead), positions, strict=True):
                applier.assigned(stored)

            batch: dict[str, Any] = {"workflow_id": "wf", "run_id": "run"}
            records = [LogRecord(0, offset, batch) for offset in range(7)] + [LogRecord(1, 0, batch)]
            for applier in (behind, ahead):
                await applier.apply(records, {0: 7, 1: 1}, {})

            async with await psycopg.AsyncConnection.connect(dsn) as conn:
                seen = await (await conn.execute("SELECT projection, partition, log_offset FROM offsets_seen ORDER BY 1, 2, 3")).fetchall()
                positions = await conn.execute("SELECT consumer, partition, next_offset FROM kadence_consumer_offsets ORDER BY 1, 2")
                stored = await positions.fetchall()
            assert seen == [("ahead", 0, 5), ("ahead", 0, 6), *(("behind", 0, offset) for offset in range(7)), ("behind", 1, 0)]
            # A position never moves back: partition 1 of `ahead` was past what this chunk read.
            assert stored == [("ahead", 0, 7), ("ahead", 1, 2), ("behind", 0, 7), ("behind", 1, 1)]
        finally:
            for applier in (behind, ahead):
                applier.close()
