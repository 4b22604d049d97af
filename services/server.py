"""`python -m services.server` (`kadence server`): every service of a host in one process and one
event loop: history, matching, timer and visibility, each still with its own consumer group,
positions, fences, readiness and metrics labels, as when each runs in a process of its own
(docs/architecture.md, "Process layouts")."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from kadence.protocol.observability import READINESS
from kadence.protocol.runner import run_service
from services.history.service import run_history_service
from services.matching.service import run_matching_service
from services.timer.service import run_timer_service
from services.visibility.service import run_visibility_service

SERVICE_MAINS: dict[str, Callable[[asyncio.Event], Coroutine[Any, Any, None]]] = {
    "history": run_history_service,
    "matching": run_matching_service,
    "timer": run_timer_service,
    "visibility": run_visibility_service,
}


async def run_server(stop: asyncio.Event) -> None:
    """Until `stop`, or until one service fails: the others are stopped then, and the process ends
    with the failure (its supervisor starts it again), as a service of its own would."""
    READINESS.expect(SERVICE_MAINS)
    async with asyncio.TaskGroup() as services:
        for name, main in SERVICE_MAINS.items():
            services.create_task(main(stop), name=name)


if __name__ == "__main__":
    run_service("server", run_server)
