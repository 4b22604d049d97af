"""Every service's HTTP endpoints: /healthz (the process is alive), /readyz (its partitions are
assigned and caught up, Postgres answers, the Kafka broker answers: both asked in the background,
so a probe costs neither a connection) and /metrics (Prometheus text, or OpenMetrics with exemplars
linking samples to traces when the scraper asks for it).

The port is KADENCE_HTTP_PORT (0, the default, serves nothing), on the address KADENCE_HTTP_HOST
(default 0.0.0.0, what a container's probes and Prometheus need; `kadence dev` sets 127.0.0.1, so
a laptop's services are not reachable from its network). Readiness is this process's `READINESS`, which the services' consumer
loops keep up to date: one `Readiness` per service it runs (`READINESS.of("history")`), so a
process that runs every service (`kadence server`) is ready when each of them is.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from kadence.protocol import topics
from kadence.protocol.kafka import base_config
from kadence.protocol.postgres import Reachability, watch
from kadence.protocol.settings import KafkaSettings, env_int

log = logging.getLogger("kadence.observability")

# By service too: one process may run them all (`kadence server`), and two count the same kind of error.
ERRORS = Counter("kadence_errors_total", "Errors by service and kind (undecodable records, rejected commands, dead letters ...)",
                 ["service", "kind"])

# Beside process_resident_memory_bytes: tells a process's Python objects from its C heap (librdkafka's
# buffers, the allocator's free pages), so a growth in memory shows which one grew.
ALLOCATED_BLOCKS = Gauge("kadence_python_allocated_blocks", "Memory blocks the Python interpreter holds (sys.getallocatedblocks)")
ALLOCATED_BLOCKS.set_function(sys.getallocatedblocks)

# A collection of the oldest generation walks every object the process holds: with many runs in
# memory it can stop the event loop longer than any batch, and this tells the two apart.
GC_PAUSE = Histogram(
    "kadence_gc_pause_seconds", "How long each garbage collection stopped the process, by generation", ["generation"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)


LONG_GC_PAUSE_S = 0.05  # a collection this long is logged, with what it walked and the CPU it took


def time_collections() -> None:
    """Each garbage collection of this process into GC_PAUSE (a service's, from its runner)."""
    gc.callbacks.append(_collection_timer())


def _collection_timer() -> Callable[[str, dict[str, int]], None]:
    began = began_cpu = 0.0

    def on_collection(phase: str, info: dict[str, int]) -> None:
        nonlocal began, began_cpu
        if phase == "start":
            began, began_cpu = time.perf_counter(), time.thread_time()
            return
        took = time.perf_counter() - began
        GC_PAUSE.labels(str(info["generation"])).observe(took)
        if took >= LONG_GC_PAUSE_S:
            # CPU far below the wall time: the process waited for a core (a busy machine), not for the walk.
            log.warning("event=long_gc_pause generation=%d seconds=%.3f cpu_seconds=%.3f objects=%d frozen=%d",
                        info["generation"], took, time.thread_time() - began_cpu, len(gc.get_objects()), gc.get_freeze_count())

    return on_collection


# The broker is asked for metadata this often, in the background: /readyz answers at once from the
# last answer (a Kubernetes probe gives it a second), and a frozen broker costs no waiting request.
BROKER_PROBE_INTERVAL_S = 1.0
BROKER_PROBE_TIMEOUT_S = 2.0


@dataclass
class Readiness:
    """One service's: its assigned partitions, which of them its consumer has read to the end at
    least once, and Postgres where it uses it."""

    assigned: set[int] | None = None  # None: no assignment yet
    caught_up: set[int] = field(default_factory=set)
    postgres: Reachability | None = None  # a service that uses Postgres watches it (watch_postgres)

    def assign(self, partitions: set[int]) -> None:
        self.assigned = set(partitions)
        self.caught_up &= self.assigned

    def reached_end(self, partition: int) -> None:
        self.caught_up.add(partition)

    def revoke(self) -> None:
        """Partitions taken away (a rebalance, or the group session lost while the broker was
        away): not ready until the next assignment."""
        self.assigned = None

    def watch_postgres(self, dsn: str) -> asyncio.Task[None]:
        """Probe Postgres in the background from now on: while it does not answer, the service is
        not ready. The caller cancels the returned task when it stops."""
        self.postgres = Reachability("readiness")
        return asyncio.get_running_loop().create_task(watch(dsn, self.postgres))

    def problems(self) -> list[str]:
        found = []
        if self.assigned is None:
            found.append("no partitions assigned yet")
        elif not self.assigned <= self.caught_up:
            found.append(f"partitions {sorted(self.assigned - self.caught_up)} not caught up yet")
        if self.postgres is not None and self.postgres.problem is not None:
            found.append(self.postgres.problem)
        return found


class ProcessReadiness:
    """What /readyz answers: every service this process runs is ready, and the broker answers."""

    def __init__(self) -> None:
        self.services: dict[str, Readiness] = {}
        self.broker_problem: str | None = None  # why the broker's last answer (of watch_broker's) was missing
        self._broker_watch: asyncio.Task[None] | None = None

    def expect(self, services: Iterable[str]) -> None:
        """The services this process runs, known before any of them starts: the process is not
        ready while one of them has not taken its partitions, even before it first says so."""
        for service in services:
            self.of(service)

    def of(self, service: str) -> Readiness:
        """The readiness of `service` in this process (made at its first use: a service not yet
        started has no partitions assigned)."""
        return self.services.setdefault(service, Readiness())

    def watch_broker(self, kafka_config: dict[str, Any]) -> None:
        """Ask the broker for metadata every BROKER_PROBE_INTERVAL_S from now on: while it does not
        answer (it is down, frozen, or out of reach), the process is not ready."""
        if self._broker_watch is None:
            probe = _BrokerProbe(kafka_config)
            self._broker_watch = asyncio.get_running_loop().create_task(self._watch_broker(probe))

    async def _watch_broker(self, probe: "_BrokerProbe") -> None:
        loop = asyncio.get_running_loop()
        away_since: float | None = None
        while True:
            problem = await loop.run_in_executor(None, probe.ask)
            if problem is not None and away_since is None:
                away_since = time.monotonic()
                log.warning("event=broker_unreachable problem=%r", problem)
            elif problem is None and away_since is not None:
                log.info("event=broker_reachable_again unreachable_seconds=%.1f", time.monotonic() - away_since)
                away_since = None
            self.broker_problem = problem
            await asyncio.sleep(BROKER_PROBE_INTERVAL_S)

    async def problems(self) -> list[str]:
        """Each service's problems, named by the service when the process runs more than one."""
        found: list[str] = []
        for service, readiness in self.services.items():
            prefix = f"{service}: " if len(self.services) > 1 else ""
            found.extend(prefix + problem for problem in readiness.problems())
        if not self.services:
            found.append("no service started yet")
        if self.broker_problem is not None:
            found.append(self.broker_problem)
        return found


READINESS = ProcessReadiness()


class _BrokerProbe:
    """An admin client that asks the broker for metadata, and remembers the last connection error
    its client met: a metadata request only says "transport failure" where the connection's own
    error says why (a SASL handshake the broker refused, a TLS mismatch)."""

    def __init__(self, kafka_config: dict[str, Any]) -> None:
        self.last_error: str | None = None
        reported = kafka_config.get("error_cb")

        def remember(err: KafkaError) -> None:
            if err.code() in (KafkaError._TRANSPORT, KafkaError._AUTHENTICATION, KafkaError._SSL):
                self.last_error = err.str()
            if reported is not None:
                reported(err)

        config: dict[str, Any] = {**kafka_config, "error_cb": remember}
        self.admin = AdminClient(config)

    def ask(self) -> str | None:
        """None when the broker answers a metadata request in time, else why not."""
        self.last_error = None
        try:
            self.admin.list_topics(topics.HISTORY, timeout=BROKER_PROBE_TIMEOUT_S)
            return None
        except KafkaException as exc:
            self.admin.poll(0)  # the connection errors met meanwhile
            why = f" ({self.last_error})" if self.last_error else ""
            return f"the Kafka broker does not answer: {exc.args[0].str()}{why}"
        finally:
            self.admin.poll(0)  # serves the client's log lines and errors


async def serve(service: str, problems: Callable[[], Awaitable[list[str]]] = READINESS.problems) -> web.AppRunner | None:
    """Start the endpoints on KADENCE_HTTP_HOST:KADENCE_HTTP_PORT; None when the port is 0. `problems` says why the
    process is not ready (a worker passes its own: it has no single partition set); a service's
    (READINESS's) include the broker not answering."""
    port = env_int("KADENCE_HTTP_PORT", 0)
    host = os.environ.get("KADENCE_HTTP_HOST") or "0.0.0.0"
    if not port:
        return None
    if problems == READINESS.problems:
        READINESS.watch_broker(base_config(KafkaSettings.from_env()))

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        found = await problems()
        return web.Response(status=503 if found else 200, text="\n".join(found or ["ready"]) + "\n")

    async def metrics(request: web.Request) -> web.Response:
        # OpenMetrics when the scraper asks for it (Prometheus does): the only format with exemplars.
        encode, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encode(REGISTRY), headers={"Content-Type": content_type})

    app = web.Application()
    app.add_routes([web.get("/healthz", healthz), web.get("/readyz", readyz), web.get("/metrics", metrics)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("event=http_endpoints_started service=%s host=%s port=%d", service, host, port)
    return runner
