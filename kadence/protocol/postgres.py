"""Postgres helpers shared by the services and the client: schema setup (the services'), and riding out an outage.

A Postgres outage (a restart, a switchover, the network) stops nothing for good: an operation
that finds Postgres unreachable (psycopg's OperationalError: no connection, the connection lost,
the pool out of connections) waits and tries again with backoff until it answers, and meanwhile
the process says it is not ready. Any other error (bad SQL, a constraint, a value past one of
Postgres's limits) is raised: the caller's bug, or the record's fault, which trying again would
only repeat.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import psycopg
from prometheus_client import Counter
from psycopg_pool import AsyncConnectionPool

from kadence.protocol.stopping import give_up_if_stopping

log = logging.getLogger("kadence.postgres")

_DDL_LOCK = 0x6B6164656E6365  # any constant: serializes schema setup across processes

RETRY_FIRST_S = 0.2
RETRY_MAX_S = 2.0
CONNECT_TIMEOUT_S = 5  # a connect to an address that does not answer fails in time instead of hanging
PROBE_INTERVAL_S = 1.0
PROBE_TIMEOUT_S = 2.0

OUTAGES = Counter("kadence_postgres_outages_total", "Times this process found Postgres unreachable (an outage began)")
RETRIES = Counter("kadence_postgres_retries_total", "Operations tried again because Postgres was unreachable, by operation", ["operation"])

T = TypeVar("T")



async def apply_ddl(conn: psycopg.AsyncConnection[Any], statements: Sequence[str]) -> None:
    """Run idempotent DDL under a session advisory lock (concurrent CREATE ... IF NOT EXISTS races
    in Postgres), each statement in its own transaction: even a no-op ALTER TABLE or CREATE INDEX
    locks its table, and one transaction holding several tables' locks deadlocks with a writer that
    touches the same tables in another order (a projector writing, while another sets up)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_lock(%s)", (_DDL_LOCK,))
    try:
        for statement in statements:
            async with conn.transaction():
                await conn.execute(statement)
    finally:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_DDL_LOCK,))


def connection_pool(dsn: str, *, min_size: int, max_size: int, timeout_s: float = RETRY_MAX_S,
                    statement_timeout_s: float | None = None) -> AsyncConnectionPool:
    """A pool (opened by the caller) that serves again soon after an outage. psycopg_pool tries
    to replace a lost connection with doubling delays for 5 minutes, so after a minute's outage
    its next try may be a minute away; here each try gives up after RETRY_MAX_S, and the next
    request for a connection (an operation tried again) starts a fresh one. A request waits
    `timeout_s` for a connection, then fails (PoolTimeout, an OperationalError). With
    `statement_timeout_s`, Postgres cancels a statement that runs longer (QueryCanceled, an
    OperationalError too)."""
    options = {"options": f"-c statement_timeout={int(statement_timeout_s * 1000)}"} if statement_timeout_s else {}
    return AsyncConnectionPool(
        dsn, min_size=min_size, max_size=max_size, open=False, timeout=timeout_s, reconnect_timeout=RETRY_MAX_S,
        kwargs={"connect_timeout": CONNECT_TIMEOUT_S, **options},
    )


def describe(exc: BaseException) -> str:
    """psycopg's message on one line (libpq's run over several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


class Reachability:
    """Whether Postgres answered a process's probe (a service's watch, a client's LISTEN
    connection): the not-ready reason while it does not, and one log line when an outage begins
    and one when it ends."""

    def __init__(self, probe: str) -> None:
        self.probe = probe
        self.problem: str | None = None
        self._away_since: float | None = None

    def lost(self, exc: BaseException) -> None:
        self.problem = f"Postgres unreachable: {describe(exc)}"
        if self._away_since is None:
            self._away_since = time.monotonic()
            OUTAGES.inc()
            log.warning("event=postgres_unreachable probe=%s error=%r", self.probe, describe(exc))

    def answered(self) -> None:
        self.problem = None
        if self._away_since is not None:
            log.info("event=postgres_reachable_again probe=%s unreachable_seconds=%.1f", self.probe, time.monotonic() - self._away_since)
            self._away_since = None


async def watch(dsn: str, reachability: Reachability) -> None:
    """Ask Postgres `SELECT 1` every PROBE_INTERVAL_S on one connection of its own (opened again
    after a failure), so /readyz answers at once from the last answer and a flood of probes costs
    Postgres nothing."""
    conn: psycopg.AsyncConnection[Any] | None = None
    try:
        while True:
            try:
                if conn is None or conn.closed:
                    # libpq's connect_timeout is whole seconds.
                    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, connect_timeout=int(PROBE_TIMEOUT_S))
                await asyncio.wait_for(conn.execute("SELECT 1"), PROBE_TIMEOUT_S)
                reachability.answered()
            except (psycopg.OperationalError, TimeoutError) as exc:
                reachability.lost(exc)
                if conn is not None:
                    await conn.close()
                    conn = None
            await asyncio.sleep(PROBE_INTERVAL_S)
    finally:
        if conn is not None:
            await conn.close()


class Backoff:
    """Waits between attempts of an operation Postgres did not answer: RETRY_FIRST_S, doubling up
    to RETRY_MAX_S. Logs the first failure and, once it succeeds, how long it waited."""

    def __init__(self, operation: str, *, until: str = "Postgres answers") -> None:
        self.operation = operation
        self.until = until  # what the attempts wait for, as the warning says
        self.attempts = 0
        self._delay = RETRY_FIRST_S
        self._since = 0.0

    def failed(self, exc: psycopg.Error) -> float:
        """The seconds to wait before the next attempt."""
        if self.attempts == 0:
            self._since = time.monotonic()
            log.warning("event=postgres_operation_waiting operation=%s error=%r retry=%r",
                        self.operation, describe(exc), f"with backoff until {self.until}")
        self.attempts += 1
        RETRIES.labels(self.operation).inc()
        delay, self._delay = self._delay, min(self._delay * 2, RETRY_MAX_S)
        return delay

    def succeeded(self) -> None:
        """The operation went through: the next failure starts from the first delay again."""
        if self.attempts:
            log.info("event=postgres_operation_resumed operation=%s attempts=%d waited_seconds=%.1f",
                     self.operation, self.attempts + 1, time.monotonic() - self._since)
        self.attempts = 0
        self._delay = RETRY_FIRST_S


# SQLSTATE classes psycopg raises as OperationalError that say what was asked cannot be done
# (54: program limit exceeded, say an index row over its size), not that Postgres is away.
_NOT_AN_OUTAGE = ("54",)


def is_outage(exc: psycopg.OperationalError) -> bool:
    """Whether trying again may succeed: no answer (no SQLSTATE), the connection lost, resources
    short, a deadlock or an operator's shutdown; not a statement that breaks a limit."""
    return exc.sqlstate is None or not exc.sqlstate.startswith(_NOT_AN_OUTAGE)


async def until_answered(operation: str, attempt: Callable[[], Awaitable[T]]) -> T:
    """`attempt()`, tried again with backoff for as long as Postgres is unreachable."""
    backoff = Backoff(operation)
    while True:
        try:
            result = await attempt()
        except psycopg.OperationalError as exc:
            if not is_outage(exc):
                raise
            give_up_if_stopping(operation, f"Postgres does not answer ({describe(exc)})")
            await asyncio.sleep(backoff.failed(exc))
            continue
        backoff.succeeded()
        return result


def until_answered_blocking(operation: str, attempt: Callable[[], T]) -> T:
    """until_answered for code on a thread of its own (a consumer's rebalance callback)."""
    backoff = Backoff(operation)
    while True:
        try:
            result = attempt()
        except psycopg.OperationalError as exc:
            if not is_outage(exc):
                raise
            give_up_if_stopping(operation, f"Postgres does not answer ({describe(exc)})")
            time.sleep(backoff.failed(exc))
            continue
        backoff.succeeded()
        return result
