"""Timer effects folded into Postgres: set is an upsert by timer_id, cancel is a delete."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from kadence.protocol.events import run_sections
from kadence.protocol.projection import LogRecord

TIMERS_DDL = [
    """
    CREATE TABLE IF NOT EXISTS kadence_timers (
        timer_id text PRIMARY KEY,
        partition int NOT NULL,
        workflow_id text NOT NULL,
        run_id text NOT NULL,
        kind text NOT NULL,
        fire_at_ms bigint NOT NULL,
        scheduled_event_id bigint NOT NULL,
        attempt int NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS kadence_timers_due ON kadence_timers (partition, fire_at_ms)",
]


class TimerStore:
    name = "timer"
    ddl = TIMERS_DDL

    def __init__(self) -> None:
        self.owned: frozenset[int] = frozenset()
        self.wake = asyncio.Event()
        self._stored_new_timers = False
        self._loop = asyncio.get_running_loop()

    async def apply(self, conn: psycopg.AsyncConnection, records: list[LogRecord]) -> None:
        # Last word per timer wins, so a timer set and cancelled in the same chunk is just deleted.
        final: dict[str, tuple[Any, ...] | None] = {}
        for record in records:
            batch = record.batch
            for section in run_sections(batch):
                for effect_type, effect in section.effects:
                    if effect_type == "Timer":
                        final[effect["timer_id"]] = (
                            effect["timer_id"], record.partition, batch["workflow_id"], section.run_id, effect["kind"],
                            effect["fire_at_ms"], effect["scheduled_event_id"], effect["attempt"],
                        )
                    elif effect_type == "DropTimer":
                        final[effect["timer_id"]] = None
        cancelled = [timer_id for timer_id, row in final.items() if row is None]
        timers = [row for row in final.values() if row is not None]
        async with conn.cursor() as cur:
            if cancelled:
                await cur.execute("DELETE FROM kadence_timers WHERE timer_id = ANY(%s)", (cancelled,))
            if timers:
                await cur.executemany(
                    "INSERT INTO kadence_timers (timer_id, partition, workflow_id, run_id, kind, fire_at_ms, scheduled_event_id, attempt) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (timer_id) DO UPDATE SET fire_at_ms = EXCLUDED.fire_at_ms",
                    timers,
                )
        self._stored_new_timers = bool(timers)

    def on_commit(self) -> None:
        # Only now can the firing loop see the new timers; waking it earlier makes it miss them.
        if self._stored_new_timers:
            self.wake.set()

    def on_assign(self, partitions: set[int]) -> None:
        self.owned = self.owned | partitions
        self._loop.call_soon_threadsafe(self.wake.set)

    def on_revoke(self, partitions: set[int]) -> None:
        self.owned = self.owned - partitions
