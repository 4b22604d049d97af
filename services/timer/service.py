"""The timer service: a history projection into Postgres plus the firing loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from kadence.protocol.kafka import AsyncProducer
from kadence.protocol.postgres import connection_pool
from kadence.protocol.settings import KafkaSettings, env_int
from services.projection import ProjectionService, run_projections
from services.timer.firing import fire_timers
from services.timer.store import DEFAULT_MEMORY_HORIZON_MS, TimerStore

CONSUMER_GROUP = "kadence.timer"  # when it runs in a process of its own


@asynccontextmanager
async def timer_projection(settings: KafkaSettings, dsn: str) -> AsyncIterator[ProjectionService]:
    """The timers projected from kadence.history, fired beside their reader."""
    async with connection_pool(dsn, min_size=2, max_size=4) as pool:
        store = TimerStore(env_int("KADENCE_TIMER_MEMORY_HORIZON_MS", DEFAULT_MEMORY_HORIZON_MS))
        producer = AsyncProducer(settings)
        try:
            yield ProjectionService(store, pool, lambda stop: fire_timers(pool, producer, store, stop))
        finally:
            producer.close()


async def run_timer_service(stop: asyncio.Event) -> None:
    await run_projections(stop, CONSUMER_GROUP, [timer_projection])
