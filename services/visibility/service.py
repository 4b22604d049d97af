"""The visibility service: the history projection into the read model, and the expiry of outcomes
past their retention."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from kadence.protocol.postgres import connection_pool
from kadence.protocol.settings import KafkaSettings
from services.projection import OpenProjection, ProjectionService, run_projections
from services.visibility.projector import VisibilityProjector
from services.visibility.retention import expire_outcomes, outcome_retention

CONSUMER_GROUP = "kadence.visibility"  # when it runs in a process of its own


def visibility_projection() -> OpenProjection:
    """The read model projected from kadence.history, and outcomes expired beside its reader; its
    settings read now, so a bad one is refused before anything starts."""
    retention = outcome_retention()

    @asynccontextmanager
    async def open_projection(settings: KafkaSettings, dsn: str) -> AsyncIterator[ProjectionService]:
        async with connection_pool(dsn, min_size=1, max_size=2) as pool:
            yield ProjectionService(VisibilityProjector(), pool, lambda stop: expire_outcomes(pool, retention, stop))

    return open_projection


async def run_visibility_service(stop: asyncio.Event) -> None:
    await run_projections(stop, CONSUMER_GROUP, [visibility_projection()])
