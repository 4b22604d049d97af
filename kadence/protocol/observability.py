"""Every service's HTTP endpoints: /healthz (the process is alive), /readyz (its partitions are
assigned and caught up, Postgres answers) and /metrics (Prometheus text).

The port is KADENCE_HTTP_PORT (0, the default, serves nothing: `kadence dev` runs several
services on one machine). Readiness is this process's `READINESS`, which the service's consumer
loop keeps up to date.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import psycopg
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, generate_latest

from kadence.protocol.settings import env_int

log = logging.getLogger("kadence.observability")

ERRORS = Counter("kadence_errors_total", "Errors by kind (undecodable records, rejected commands, dead letters ...)", ["kind"])


@dataclass
class Readiness:
    """Assigned partitions, and which of them the consumer has read to the end at least once."""

    assigned: set[int] | None = None  # None: no assignment yet
    caught_up: set[int] = field(default_factory=set)
    postgres_dsn: str = ""

    def assign(self, partitions: set[int]) -> None:
        self.assigned = set(partitions)
        self.caught_up &= self.assigned

    def reached_end(self, partition: int) -> None:
        self.caught_up.add(partition)

    async def problems(self) -> list[str]:
        found = []
        if self.assigned is None:
            found.append("no partitions assigned yet")
        elif not self.assigned <= self.caught_up:
            found.append(f"partitions {sorted(self.assigned - self.caught_up)} not caught up yet")
        if self.postgres_dsn:
            try:
                async with await psycopg.AsyncConnection.connect(self.postgres_dsn, connect_timeout=2) as conn:
                    await conn.execute("SELECT 1")
            except psycopg.Error as exc:
                found.append(f"Postgres unreachable: {exc}")
        return found


READINESS = Readiness()


async def serve(service: str, problems: Callable[[], Awaitable[list[str]]] = READINESS.problems) -> web.AppRunner | None:
    """Start the endpoints on KADENCE_HTTP_PORT; None when the port is 0. `problems` says why the
    process is not ready (a worker passes its own: it has no single partition set)."""
    port = env_int("KADENCE_HTTP_PORT", 0)
    if not port:
        return None

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        found = await problems()
        return web.Response(status=503 if found else 200, text="\n".join(found or ["ready"]) + "\n")

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.add_routes([web.get("/healthz", healthz), web.get("/readyz", readyz), web.get("/metrics", metrics)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    log.info("event=http_endpoints_started service=%s port=%d", service, port)
    return runner
