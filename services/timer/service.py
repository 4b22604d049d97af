"""The timer service: a history projection into Postgres plus the firing loop."""

from __future__ import annotations

import asyncio

from kadence.protocol.kafka import AsyncProducer
from kadence.protocol.postgres import connection_pool
from kadence.protocol.settings import KafkaSettings, env_int, postgres_dsn
from services.projection import ProjectionRunner
from services.timer.firing import fire_timers
from services.timer.store import DEFAULT_MEMORY_HORIZON_MS, TimerStore


async def run_timer_service(stop: asyncio.Event) -> None:
    settings = KafkaSettings.from_env()
    dsn = postgres_dsn()
    async with connection_pool(dsn, min_size=2, max_size=4) as pool:
        store = TimerStore(env_int("KADENCE_TIMER_MEMORY_HORIZON_MS", DEFAULT_MEMORY_HORIZON_MS))
        runner = ProjectionRunner(settings, pool, dsn, store)
        await runner.setup()
        producer = AsyncProducer(settings)
        try:
            await asyncio.gather(runner.run(stop), fire_timers(pool, producer, store, stop))
        finally:
            producer.close()
