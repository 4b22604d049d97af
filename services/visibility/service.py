"""The visibility service: the history projection into the read model, and the expiry of outcomes
past their retention."""

from __future__ import annotations

import asyncio

from kadence.protocol.postgres import connection_pool
from kadence.protocol.settings import KafkaSettings, postgres_dsn
from services.projection import ProjectionRunner
from services.visibility.projector import VisibilityProjector
from services.visibility.retention import expire_outcomes, outcome_retention


async def run_visibility_service(stop: asyncio.Event) -> None:
    retention = outcome_retention()
    dsn = postgres_dsn()
    async with connection_pool(dsn, min_size=1, max_size=2) as pool:
        runner = ProjectionRunner(KafkaSettings.from_env(), pool, dsn, VisibilityProjector())
        await runner.setup()
        await asyncio.gather(runner.run(stop), expire_outcomes(pool, retention, stop))
