"""The timer service: a history projection into Postgres plus the firing loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from kadence.protocol.kafka import AsyncProducer
from kadence.protocol.postgres import connection_pool
from kadence.protocol.settings import KafkaSettings, env_int
from services.projection import OpenProjection, ProjectionService, run_projections
from services.timer.firing import fire_timers
from services.timer.store import DEFAULT_MEMORY_HORIZON_MS, TimerStore

CONSUMER_GROUP = "kadence.timer"  # when it runs in a process of its own


def timer_projection() -> OpenProjection:
    """The timers projected from kadence.history, fired beside their reader; its settings read
    now, so a bad one is refused before anything starts."""
    memory_horizon_ms = env_int("KADENCE_TIMER_MEMORY_HORIZON_MS", DEFAULT_MEMORY_HORIZON_MS)

    @asynccontextmanager
    async def open_projection(settings: KafkaSettings, dsn: str) -> AsyncIterator[ProjectionService]:
        async with connection_pool(dsn, min_size=2, max_size=4) as pool:
            store = TimerStore(memory_horizon_ms)
            producer = AsyncProducer(settings)
            try:
                yield ProjectionService(store, pool, lambda stop: fire_timers(pool, producer, store, stop))
            finally:
                producer.close()

    return open_projection


async def run_timer_service(stop: asyncio.Event) -> None:
    await run_projections(stop, CONSUMER_GROUP, [timer_projection()])
