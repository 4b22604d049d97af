"""The client: start workflows by producing commands, wait for results on the read model (as temporalio.client)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import socket
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import psycopg
from confluent_kafka import Message
from psycopg_pool import AsyncConnectionPool

from kadence import workflow as workflow_module
from kadence.common import to_ms
from kadence.converter import DataConverter
from kadence.exceptions import WorkflowFailureError
from kadence.protocol import topics
from kadence.protocol.codec import codec, command_codec
from kadence.protocol.ids import run_id_for
from kadence.protocol.kafka import AsyncProducer, make_producer
from kadence.protocol.postgres import apply_ddl
from kadence.protocol.read_model import CLOSED_CHANNEL, VISIBILITY_DDL
from kadence.protocol.settings import KafkaSettings, postgres_dsn

log = logging.getLogger("kadence.client")

_UNSET: Any = object()


def default_identity() -> str:
    return f"{os.getpid()}@{socket.gethostname()}"


class Client:
    """Talks to Kadence through Kafka (commands) and the Postgres read model (results)."""

    def __init__(
        self, settings: KafkaSettings, *, data_converter: DataConverter, identity: str, postgres_dsn: str | None,
    ) -> None:
        self.settings = settings
        self.data_converter = data_converter
        self.identity = identity
        self._postgres_dsn = postgres_dsn
        self._producer = AsyncProducer(make_producer(settings))
        self._commands = command_codec()
        self._results: _ResultWaiter | None = None

    @classmethod
    async def connect(
        cls, bootstrap_servers: str | None = None, *, postgres_dsn: str | None = None,
        data_converter: DataConverter | None = None, identity: str | None = None,
    ) -> "Client":
        """`bootstrap_servers` and `postgres_dsn` default to KADENCE_BOOTSTRAP_SERVERS and KADENCE_POSTGRES_DSN."""
        settings = KafkaSettings.from_env()
        if bootstrap_servers:
            settings = dataclasses.replace(settings, bootstrap_servers=bootstrap_servers)
        return cls(settings, data_converter=data_converter or DataConverter(), identity=identity or default_identity(), postgres_dsn=postgres_dsn)

    async def start_workflow(
        self, workflow: type | Callable[..., Any] | str, arg: Any = _UNSET, *, args: Sequence[Any] = (),
        id: str, task_queue: str, result_type: type | None = None, request_id: str = "",
        task_timeout: timedelta | None = None,
    ) -> "WorkflowHandle":
        """Produce a StartWorkflowExecution command; the handle's run_id follows from where it landed."""
        definition = workflow_module.definition(workflow)
        workflow_type = definition if isinstance(definition, str) else definition.name
        if result_type is None and not isinstance(definition, str):
            result_type = definition.result_type()
        values = ([arg] if arg is not _UNSET else []) + list(args)
        delivered = await self.send_command(id, "StartWorkflowExecution", {
            "workflow_type": workflow_type, "task_queue": task_queue,
            "input": self.data_converter.payload_converter.to_payloads(values), "request_id": request_id,
            "workflow_task_timeout_ms": to_ms(task_timeout),
        })
        run_id = run_id_for(id, delivered.partition(), delivered.offset())
        log.info("event=workflow_start_sent workflow_id=%s run_id=%s workflow_type=%s", id, run_id, workflow_type)
        return WorkflowHandle(self, id, run_id=run_id, result_type=result_type)

    async def execute_workflow(
        self, workflow: type | Callable[..., Any] | str, arg: Any = _UNSET, *, args: Sequence[Any] = (),
        id: str, task_queue: str, result_type: type | None = None, task_timeout: timedelta | None = None,
    ) -> Any:
        handle = await self.start_workflow(
            workflow, arg, args=args, id=id, task_queue=task_queue, result_type=result_type, task_timeout=task_timeout,
        )
        return await handle.result()

    def get_workflow_handle(self, workflow_id: str, *, run_id: str | None = None, result_type: type | None = None) -> "WorkflowHandle":
        return WorkflowHandle(self, workflow_id, run_id=run_id, result_type=result_type)

    def send_command(
        self, workflow_id: str, kind: str, body: dict[str, Any], *, identity: str | None = None,
    ) -> asyncio.Future[Message]:
        """Produce one command, keyed (and so partitioned) by workflow_id; the future resolves on delivery."""
        record = {"workflow_id": workflow_id, "identity": identity or self.identity, "command": (kind, body)}
        return self._producer.produce(topics.COMMANDS, self._commands.encode(record), workflow_id.encode(), headers=self._commands.headers())

    async def _closed_execution(self, workflow_id: str, run_id: str | None) -> tuple[str, bytes | None, bytes | None]:
        if self._results is None:
            self._results = _ResultWaiter(self._postgres_dsn or postgres_dsn())
        await self._results.started()
        return await self._results.wait(workflow_id, run_id)

    async def close(self) -> None:
        if self._results is not None:
            await self._results.close()
        await asyncio.get_running_loop().run_in_executor(None, self._producer.close)


class WorkflowHandle:
    def __init__(self, client: Client, id: str, *, run_id: str | None, result_type: type | None) -> None:
        self.client = client
        self.id = id
        self.run_id = run_id
        self.result_type = result_type

    async def signal(self, signal: Callable[..., Any] | str, arg: Any = _UNSET, *, args: Sequence[Any] = ()) -> None:
        """Send a signal to this run (or the current run when the handle has no run_id)."""
        values = ([arg] if arg is not _UNSET else []) + list(args)
        await self.client.send_command(self.id, "SignalWorkflowExecution", {
            "run_id": self.run_id or "", "signal_name": workflow_module.signal_name(signal),
            "input": self.client.data_converter.payload_converter.to_payloads(values), "request_id": "",
        })

    async def result(self) -> Any:
        """Wait for the run to close; its result, or WorkflowFailureError with the cause."""
        status, result, failure = await self.client._closed_execution(self.id, self.run_id)
        converter = self.client.data_converter
        if status == "Completed":
            payload = codec("Payload").decode(result) if result else None
            return converter.payload_converter.from_payload(payload, self.result_type)
        cause = converter.from_failure(codec("Failure").decode(failure)) if failure else RuntimeError(status)
        raise WorkflowFailureError(cause=cause)


class _ResultWaiter:
    """One LISTEN connection for close notifications; a row lookup for each close someone waits on."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.waiters: dict[tuple[str, str | None], list[asyncio.Future[Any]]] = {}
        self.pool = AsyncConnectionPool(dsn, min_size=1, max_size=4, open=False)
        self._listener: asyncio.Task[None] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._starting: asyncio.Future[None] | None = None

    async def started(self) -> None:
        """Set up once; concurrent first callers all wait for the same setup."""
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        await asyncio.shield(self._starting)

    async def _start(self) -> None:
        await self.pool.open()
        self._conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        await apply_ddl(self._conn, VISIBILITY_DDL)  # the client may start before the projector created them
        await self._conn.execute(f"LISTEN {CLOSED_CHANNEL}")
        self._listener = asyncio.create_task(self._listen())

    async def _listen(self) -> None:
        assert self._conn is not None
        async for notify in self._conn.notifies():
            closed = json.loads(notify.payload)
            for key in ((closed["workflow_id"], closed["run_id"]), (closed["workflow_id"], None)):
                if key in self.waiters:
                    asyncio.create_task(self._check(key))

    async def wait(self, workflow_id: str, run_id: str | None) -> Any:
        key = (workflow_id, run_id)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiters.setdefault(key, []).append(future)
        await self._check(key)
        return await future

    async def _check(self, key: tuple[str, str | None]) -> None:
        workflow_id, run_id = key
        async with self.pool.connection() as conn:
            if run_id is None:
                cursor = await conn.execute(
                    "SELECT status, result, failure FROM kadence_executions WHERE workflow_id = %s "
                    "ORDER BY start_time DESC LIMIT 1", (workflow_id,))
            else:
                cursor = await conn.execute(
                    "SELECT status, result, failure FROM kadence_executions WHERE workflow_id = %s AND run_id = %s",
                    (workflow_id, run_id))
            row = await cursor.fetchone()
        if row is None or row[0] == "Running":
            return
        for future in self.waiters.pop(key, []):
            if not future.done():
                future.set_result(row)

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
        if self._conn is not None:
            await self._conn.close()
        await self.pool.close()
