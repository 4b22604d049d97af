"""`python -m services.visibility`: run one visibility projector instance."""

import asyncio

from kadence.protocol.postgres import connection_pool
from kadence.protocol.runner import run_service
from kadence.protocol.settings import KafkaSettings, postgres_dsn
from services.projection import ProjectionRunner
from services.visibility.projector import VisibilityProjector
from services.visibility.retention import expire_outcomes, outcome_retention


async def run_projector(stop: asyncio.Event) -> None:
    retention = outcome_retention()
    dsn = postgres_dsn()
    async with connection_pool(dsn, min_size=1, max_size=2) as pool:
        runner = ProjectionRunner(KafkaSettings.from_env(), pool, dsn, VisibilityProjector())
        await runner.setup()
        await asyncio.gather(runner.run(stop), expire_outcomes(pool, retention, stop))


if __name__ == "__main__":
    run_service("visibility", run_projector)
