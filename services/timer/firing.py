"""Firing due timers: produce TimeoutFired to the timer's command partition, then delete it.

A timer never fires before fire_at_ms; one that fires twice (crash between produce and delete,
or a rebalance) is rejected by the history service as stale.
"""

from __future__ import annotations

import asyncio
import logging
import time

from psycopg_pool import AsyncConnectionPool

from kadence.protocol import topics
from kadence.protocol.codec import command_codec
from kadence.protocol.kafka import AsyncProducer
from services.timer.store import TimerStore

log = logging.getLogger("kadence.timer")

FIRE_BATCH = 1000
MAX_SLEEP_S = 1.0


async def fire_timers(pool: AsyncConnectionPool, producer: AsyncProducer, store: TimerStore, stop: asyncio.Event) -> None:
    codec = command_codec()
    while not stop.is_set():
        store.wake.clear()
        now_ms = int(time.time() * 1000)
        owned = list(store.owned)
        async with pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT timer_id, partition, workflow_id, run_id, kind, scheduled_event_id, attempt, fire_at_ms "
                "FROM kadence_timers WHERE partition = ANY(%s) AND fire_at_ms <= %s ORDER BY fire_at_ms LIMIT %s",
                (owned, now_ms, FIRE_BATCH),
            )).fetchall()
            if not rows:
                next_due = (await (await conn.execute(
                    "SELECT min(fire_at_ms) FROM kadence_timers WHERE partition = ANY(%s)", (owned,),
                )).fetchone())[0]
        if rows:
            deliveries = [
                producer.produce(
                    topics.COMMANDS,
                    codec.encode({"workflow_id": workflow_id, "identity": "kadence-timer", "command": ("TimeoutFired", {
                        "run_id": run_id, "timer_id": timer_id, "kind": kind,
                        "scheduled_event_id": scheduled_event_id, "attempt": attempt,
                    })}),
                    workflow_id.encode(), partition=partition, headers=codec.headers(),
                )
                for timer_id, partition, workflow_id, run_id, kind, scheduled_event_id, attempt, _ in rows
            ]
            await asyncio.gather(*deliveries)
            async with pool.connection() as conn:
                await conn.execute("DELETE FROM kadence_timers WHERE timer_id = ANY(%s)", ([row[0] for row in rows],))
            for timer_id, _, workflow_id, run_id, kind, _, _, fire_at_ms in rows:
                log.info("event=timer_fired workflow_id=%s run_id=%s timer_id=%s kind=%s lag_ms=%d",
                         workflow_id, run_id, timer_id, kind, now_ms - fire_at_ms)
            continue
        sleep_s = MAX_SLEEP_S if next_due is None else min(MAX_SLEEP_S, max(0.0, (next_due - now_ms) / 1000))
        try:
            await asyncio.wait_for(store.wake.wait(), timeout=sleep_s)
        except TimeoutError:
            pass
