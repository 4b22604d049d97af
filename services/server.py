"""`python -m services.server` (`kadence server`): every service of a host in one process and one
event loop: history, matching, timer and visibility, each still with its own consumer group (the
timer and visibility share one reader of kadence.history, in one group), positions, fences,
readiness and metrics labels, as when each runs in a process of its own (docs/architecture.md,
"Process layouts")."""

from __future__ import annotations

import asyncio

from kadence.protocol.observability import READINESS
from kadence.protocol.runner import run_service
from services.history.service import run_history_service
from services.matching.service import run_matching_service
from services.projection import run_projections
from services.timer.service import timer_projection
from services.visibility.service import visibility_projection

SERVICES = ("history", "matching", "timer", "visibility")  # each with its own readiness
# The consumer group of the one reader of kadence.history that feeds the timer and the read model.
PROJECTIONS_GROUP = "kadence.projections"


async def run_server(stop: asyncio.Event) -> None:
    """Until `stop`, or until one service fails: the others are stopped then, and the process ends
    with the failure (its supervisor starts it again), as a service of its own would."""
    projections = [timer_projection(), visibility_projection()]  # their settings read before anything starts
    READINESS.expect(SERVICES)
    async with asyncio.TaskGroup() as services:
        services.create_task(run_history_service(stop), name="history")
        services.create_task(run_matching_service(stop), name="matching")
        services.create_task(run_projections(stop, PROJECTIONS_GROUP, projections), name="projections")


if __name__ == "__main__":
    run_service("server", run_server)
