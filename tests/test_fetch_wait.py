"""A client's consumers (its reply listener, its workers') ask the broker to wait for records as
long as suits the broker: Apache Kafka answers a long poll as soon as a record arrives, so the
default 500 ms costs nothing; Tansu answers only when the wait expires, so there a client that
KADENCE_FETCH_WAIT_MAX_MS does not set waits Tansu's 5 ms. With 500, every hop to a worker or back
to the client waited 250 ms on average, and one at a time ran at 500 ms a workflow."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kadence.client import Client
from kadence.dev.brokers import Tansu
from kadence.dev.local_stack import LocalStack
from kadence.protocol.kafka import TANSU_FETCH_WAIT_MAX_MS
from kadence.protocol.settings import KafkaSettings
from kadence.worker import Worker
from tests.workflows import EchoWorkflow, echo


@pytest.mark.also_on_tansu
async def test_a_client_without_a_fetch_wait_of_its_own_fits_the_brokers(
    stack: LocalStack, task_queue: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KADENCE_FETCH_WAIT_MAX_MS", raising=False)  # as a program that only names the brokers
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
    try:
        assert client.settings.fetch_wait_max_ms == KafkaSettings.fetch_wait_max_ms
        async with Worker(client, task_queue=task_queue, workflows=[EchoWorkflow], activities=[echo]):
            handle = await client.start_workflow(EchoWorkflow.run, "hop", id=f"fetch-wait-{uuid.uuid4()}", task_queue=task_queue)
            assert await asyncio.wait_for(handle.result(), 30) == "hop"
        on_tansu = isinstance(stack.broker, Tansu)
        assert client.settings.fetch_wait_max_ms == (TANSU_FETCH_WAIT_MAX_MS if on_tansu else KafkaSettings.fetch_wait_max_ms)
    finally:
        await client.close()


async def test_a_fetch_wait_set_is_kept_on_any_broker(stack: LocalStack, task_queue: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KADENCE_FETCH_WAIT_MAX_MS", "250")
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
    try:
        async with Worker(client, task_queue=task_queue, workflows=[EchoWorkflow], activities=[echo]):
            handle = await client.start_workflow(EchoWorkflow.run, "kept", id=f"fetch-wait-{uuid.uuid4()}", task_queue=task_queue)
            assert await asyncio.wait_for(handle.result(), 30) == "kept"
        assert client.settings.fetch_wait_max_ms == 250
    finally:
        await client.close()
