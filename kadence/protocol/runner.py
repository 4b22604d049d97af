"""Running a service process: uvloop, structured logs, SIGTERM/SIGINT as a clean stop."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable

import uvloop

from kadence.protocol.logs import configure_logging
from kadence.protocol.observability import serve


def run_service(name: str, main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    configure_logging(name)

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        endpoints = await serve(name)
        try:
            await main(stop)
        finally:
            if endpoints is not None:
                await endpoints.cleanup()

    uvloop.run(runner())
