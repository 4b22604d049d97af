"""The client's side of the Postgres read model: one LISTEN connection for command outcomes and
run closes, the lookups that settle what was awaited before it was announced, and the lookups of
single rows the handles ask. The read model's tables are the services' (the visibility projector
creates them when it starts): a client that starts first waits for them, as for Postgres away."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg

from kadence.protocol.postgres import CONNECT_TIMEOUT_S, RETRY_MAX_S, Backoff, Reachability, connection_pool, until_answered
from kadence.protocol.read_model import CLOSED_CHANNEL, OUTCOME_CHANNEL, CommandOutcome
from kadence.protocol.stopping import give_up_if_stopping

log = logging.getLogger("kadence.client")
# How long result() of a workflow the read model does not hold waits before WorkflowNotFoundError:
# a start produced to the topic by another process is recorded within milliseconds.
NOT_FOUND_AFTER_S = 5.0
TABLES_MISSING = "the read model's tables do not exist yet: start the kadence services; they create the read model's tables"

T = TypeVar("T")


async def until_created(operation: str, attempt: Callable[[], Awaitable[T]]) -> T:
    """until_answered (tried again while Postgres is unreachable), also tried again with backoff
    while the read model's tables do not exist yet: a client may start before the services."""
    backoff = Backoff(operation, until="the services create the read model's tables (start the kadence services)")
    while True:
        try:
            result = await until_answered(operation, attempt)
        except psycopg.errors.UndefinedTable as exc:
            give_up_if_stopping(operation, TABLES_MISSING)
            await asyncio.sleep(backoff.failed(exc))
            continue
        backoff.succeeded()
        return result


async def run_row(pool: Any, workflow_id: str, run_id: str) -> tuple[str, str | None] | None:
    """A run's status and the run it continued as (None when the read model does not hold it)."""
    async with pool.connection() as conn:
        return await (await conn.execute(
            "SELECT status, next_run_id FROM kadence_executions WHERE workflow_id = %s AND run_id = %s", (workflow_id, run_id),
        )).fetchone()


class ReadModel:
    """One LISTEN connection for run closes (row lookups, batched: `_check_soon`) and command
    outcomes (carried in the notification).

    Notifications sent while that connection is down are lost: when it is lost (Postgres
    restarted, the network), it is opened again with backoff, and everything still awaited is
    read again from the tables before waiting on. Meanwhile `reachability` says why this client
    hears nothing (a worker's /readyz reports it)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.closed_waiters: dict[tuple[str, str | None], list[asyncio.Future[Any]]] = {}
        self.outcome_waiters: dict[str, list[asyncio.Future[Any]]] = {}
        # Requests wait as long as psycopg_pool's default: list_workflows and the like run concurrently.
        self.pool = connection_pool(dsn, min_size=1, max_size=4, timeout_s=30.0)
        self.reachability = Reachability("client_listen")
        self._listener: asyncio.Task[None] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._starting: asyncio.Future[None] | None = None
        self._unchecked: set[tuple[str, str | None]] = set()  # awaited closes to look up in the next batch
        self._checking: asyncio.Task[None] | None = None
        self._outcomes_unchecked = False  # awaited outcomes to look up in the next batch

    @property
    def is_started(self) -> bool:
        starting = self._starting
        return starting is not None and starting.done() and not starting.cancelled() and starting.exception() is None

    async def started(self) -> None:
        """Set up once; concurrent first callers all wait for the same setup. If Postgres does not
        answer the first time, the callers hear it, and the next call tries again."""
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        try:
            await asyncio.shield(self._starting)
        except psycopg.OperationalError:
            self._starting = None
            raise

    async def _start(self) -> None:
        await self.pool.open()
        try:
            conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
            try:
                await self._subscribe(conn)  # needs no table: the client may start before the services created them
            except BaseException:
                await conn.close()
                raise
        except asyncio.CancelledError:
            # Only the end of the program cancels a start (its callers shield it): as the
            # listener's end below, for a pool the listener never came to own.
            await self._release()
            raise
        self._conn = conn
        self._listener = asyncio.create_task(self._listen())

    async def _subscribe(self, conn: psycopg.AsyncConnection[Any]) -> None:
        # What arrives while a query runs on it (this LISTEN, the lookups after a reconnect) psycopg reads itself.
        conn.add_notify_handler(lambda notify: self._notified(notify.channel, notify.payload))
        await conn.execute(f"LISTEN {CLOSED_CHANNEL}")
        await conn.execute(f"LISTEN {OUTCOME_CHANNEL}")

    async def _listen(self) -> None:
        backoff = Backoff("client_listen")
        try:
            while True:
                try:
                    if self._conn is None:
                        self._conn = await self._listen_again()
                        backoff.succeeded()
                    await self._serve(self._conn)
                except (psycopg.OperationalError, psycopg.errors.UndefinedTable) as exc:  # an outage, or the tables not created yet
                    await self._lost(exc)
                    await asyncio.sleep(backoff.failed(exc))
                except Exception as exc:  # a bug: listen again all the same
                    log.exception("event=client_listen_failed error=%r", str(exc))
                    await self._lost(exc)
                    await asyncio.sleep(RETRY_MAX_S)
        finally:
            # The listener lives as long as the read model. It ends by close(), or, for a client
            # never closed (temporalio's samples leave theirs open: temporalio needs no close), by
            # asyncio.run cancelling every task as it ends; the pool must be closed then, as its
            # workers swallow a cancellation that finds them connecting (psycopg_pool keeps itself
            # whole so) and would wait on their queue for ever, and asyncio.run with them.
            await self._release()

    async def _lost(self, exc: Exception) -> None:
        self.reachability.lost(exc)
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _listen_again(self) -> psycopg.AsyncConnection[Any]:
        """A new LISTEN connection, then what was awaited read again: answered meanwhile, it was
        notified on no connection."""
        conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        try:
            await self._subscribe(conn)
            outcomes, closes = await self._read_outcomes_again(conn), await self._read_closes_again(conn)
        except BaseException:
            await conn.close()
            raise
        self.reachability.answered()
        log.info("event=postgres_listen_restored outcomes_found=%d closes_found=%d still_awaited=%d",
                 outcomes, closes, len(self.outcome_waiters) + len(self.closed_waiters))
        return conn

    async def _serve(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Settle what each notification says as it comes, read off the connection's socket as
        psycopg's notifies() reads it, but not through that async generator: loop.shutdown_asyncgens()
        (at asyncio.run's end, or a worker program's on Ctrl-C) acloses every async generator alive,
        and one waiting here fails so ("aclose(): asynchronous generator is already running", an ERROR)."""
        loop = asyncio.get_running_loop()
        readable = asyncio.Event()
        fd = conn.fileno()
        loop.add_reader(fd, readable.set)
        try:
            while True:
                conn.pgconn.consume_input()  # an OperationalError once the connection is lost
                while (received := conn.pgconn.notifies()) is not None:
                    self._notified(received.relname.decode(conn.info.encoding), received.extra.decode(conn.info.encoding))
                await readable.wait()
                readable.clear()
        finally:
            loop.remove_reader(fd)

    def _notified(self, channel: str, payload: str) -> None:
        if channel == OUTCOME_CHANNEL:
            outcome = CommandOutcome.from_notification(payload)
            _settle(self.outcome_waiters.pop(outcome.request_id, []), outcome)
            return
        closed = json.loads(payload)
        for key in ((closed["workflow_id"], closed["run_id"]), (closed["workflow_id"], None)):
            if key in self.closed_waiters:
                self._check_soon(key)

    async def recorded(self, outcome: asyncio.Future[CommandOutcome]) -> CommandOutcome:
        """An awaited outcome once the read model holds it: looked up first, for a request answered
        before (sent again), whose answer the read model recorded then and announces no more."""
        if not outcome.done():
            self.look_up_outcomes_soon()
        return await outcome

    def look_up_outcomes_soon(self) -> None:
        """Settle the awaited outcomes the read model holds already (answered before they were
        awaited), with the other lookups asked meanwhile: one query for every outcome awaited then
        (2,000 starts at once, each asking for itself, made 2,000 queries of up to 2,000 ids each)."""
        self._outcomes_unchecked = True
        self._start_checking()

    async def _look_up_outcomes(self) -> None:
        async with self.pool.connection() as conn:
            await self._read_outcomes_again(conn)

    async def _read_outcomes_again(self, conn: psycopg.AsyncConnection[Any]) -> int:
        if not self.outcome_waiters:
            return 0
        rows = await (await conn.execute(
            "SELECT request_id, run_id, accepted, cause, reason FROM kadence_command_outcomes WHERE request_id = ANY(%s)",
            (list(self.outcome_waiters),),
        )).fetchall()
        for row in rows:
            _settle(self.outcome_waiters.pop(row[0], []), CommandOutcome(*row))
        return len(rows)

    async def _read_closes_again(self, conn: psycopg.AsyncConnection[Any]) -> int:
        """Every awaited run that closed meanwhile (one query for them all)."""
        return await self._settle_closed(conn, set(self.closed_waiters))

    async def _settle_closed(self, conn: psycopg.AsyncConnection[Any], keys: set[tuple[str, str | None]]) -> int:
        """Settle the waiters of each of `keys` whose run is closed, in one query; how many were."""
        if not keys:
            return 0
        rows = await (await conn.execute(
            "SELECT workflow_id, run_id, status, result, failure, next_run_id FROM kadence_executions "
            "WHERE workflow_id = ANY(%s) ORDER BY workflow_id, start_time",
            (sorted({workflow_id for workflow_id, _ in keys}),),
        )).fetchall()
        runs = {(row[0], row[1]): row[2:] for row in rows}
        latest = {row[0]: row[2:] for row in rows}  # ordered by start time: the last one stays
        found = 0
        for key in keys:
            row = runs.get(key) if key[1] is not None else latest.get(key[0])
            if row is not None and row[0] != "Running":
                _settle(self.closed_waiters.pop(key, []), row)
                found += 1
        return found

    def _check_soon(self, key: tuple[str, str | None]) -> None:
        """Look up whether `key`'s run is closed, with the other lookups asked meanwhile: one query
        for all the closes notified or awaited while the previous one ran (under load, hundreds)."""
        self._unchecked.add(key)
        self._start_checking()

    def _start_checking(self) -> None:
        if self._checking is None:
            self._checking = asyncio.create_task(self._check_unchecked())

    async def _check_unchecked(self) -> None:
        """Until nothing is left to look up: the awaited outcomes, then the closes."""
        try:
            while self._unchecked or self._outcomes_unchecked:
                await asyncio.sleep(0)  # the lookups asked in this turn of the loop join the batch
                if self._outcomes_unchecked:
                    self._outcomes_unchecked = False
                    if self.outcome_waiters:  # else settled meanwhile
                        await self._look_up("client_outcome_lookup", self._look_up_outcomes, self.outcome_waiters,
                                            set(self.outcome_waiters))
                keys = {key for key in self._unchecked if key in self.closed_waiters}
                self._unchecked.clear()
                if keys:  # else settled meanwhile (a reply, or the lookup before): nothing to ask
                    await self._look_up("client_result_lookup", functools.partial(self._look_up_closed, keys), self.closed_waiters, keys)
        finally:
            self._checking = None

    @staticmethod
    async def _look_up(
        name: str, lookup: Callable[[], Awaitable[Any]], waiters: dict[Any, list[asyncio.Future[Any]]], keys: set[Any],
    ) -> None:
        """One lookup, asked again while Postgres is away or the tables are not created yet; any
        other error reaches the waiters of `keys`."""
        try:
            await until_created(name, lookup)
        except Exception as exc:
            for key in keys:
                for future in waiters.pop(key, []):
                    if not future.done():
                        future.set_exception(exc)

    async def _look_up_closed(self, keys: set[tuple[str, str | None]]) -> None:
        async with self.pool.connection() as conn:
            await self._settle_closed(conn, keys)

    async def wait_closed(self, workflow_id: str, run_id: str | None) -> Any:
        key = (workflow_id, run_id)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.closed_waiters.setdefault(key, []).append(future)
        self._check_soon(key)  # not awaited: a LISTEN connection restored may answer first
        try:
            return await future
        finally:
            _forget(self.closed_waiters, key, future)  # given up on (a reply came first), or settled

    async def any_outcome(self, request_ids: list[str]) -> bool:
        """Whether any of these commands' outcomes is recorded."""

        async def lookup() -> Any:
            async with self.pool.connection() as conn:
                return await (await conn.execute(
                    "SELECT 1 FROM kadence_command_outcomes WHERE request_id = ANY(%s) LIMIT 1", (request_ids,),
                )).fetchone()

        return await until_created("client_update_outcome", lookup) is not None

    async def update_outcome(self, request_id: str) -> tuple[bytes | None, bytes | None] | None:
        """An update's recorded result and failure (Avro Payload, Failure); None before it finished."""

        async def lookup() -> Any:
            async with self.pool.connection() as conn:
                return await (await conn.execute(
                    "SELECT result, failure FROM kadence_command_outcomes WHERE request_id = %s", (request_id,),
                )).fetchone()

        row = await until_created("client_update_outcome", lookup)
        return (row[0], row[1]) if row else None

    def expect_outcome(self, request_id: str) -> asyncio.Future[CommandOutcome]:
        """The answer to a command not sent yet (its outcome is announced once it is recorded)."""
        future: asyncio.Future[CommandOutcome] = asyncio.get_running_loop().create_future()
        self.outcome_waiters.setdefault(request_id, []).append(future)
        return future

    def forget_outcome(self, request_id: str, future: asyncio.Future[CommandOutcome]) -> None:
        """Stop waiting for an outcome (answered on kadence.replies first)."""
        _forget(self.outcome_waiters, request_id, future)

    async def close(self) -> None:
        # Each task is awaited to its end: a query cancelled is cancelled in the server too, a
        # round trip that a second cancellation (asyncio.run's end cancelling what is left) would
        # interrupt, and psycopg would say so ("query cancellation interrupted").
        tasks = {task for task in (self._checking, self._listener) if task is not None}
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)  # the listener's end releases the connections
        await self._release()  # the listener never started (Postgres did not answer the first time)

    async def _release(self) -> None:
        """Close the LISTEN connection and the pool (again: a no-op)."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()
        await self.pool.close()




def _forget(waiters: dict[Any, list[asyncio.Future[Any]]], key: Any, future: asyncio.Future[Any]) -> None:
    futures = waiters.get(key)
    if futures is not None and future in futures:
        futures.remove(future)
        if not futures:
            del waiters[key]


def _settle(futures: list[asyncio.Future[Any]], row: Any) -> None:
    for future in futures:
        if not future.done():
            future.set_result(row)
