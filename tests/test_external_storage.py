"""External payload storage, in the style of temporalio's external_storage sample: a batch of
orders larger than Kafka's record limit (10 MiB) passes from one activity to the next, kept in
PostgreSQL by `PostgresStorageDriver` while the history holds references; with a codec, each
payload is encrypted first, so what the table holds is sealed too, and without one the same bytes
are stored once. The workflow's own input and result stay inline. And ExternalStorage refuses what
temporalio's refuses."""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from kadence import activity, workflow
from kadence.api.common.v1 import Payload
from kadence.client import Client
from kadence.contrib.postgres_storage import DEFAULT_TABLE, PostgresStorageDriver
from kadence.converter import (
    DataConverter,
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)
from kadence.dev.local_stack import LocalStack
from kadence.worker import Worker
from tests.test_payload_codecs import AesGcmCodec

ORDERS = 1100
NOTE_BYTES = 10_000  # 1,100 orders of 10 kB of notes: 11 MB, past Kafka's record limit
REFERENCE = {"encoding": b"json/protobuf", "messageType": b"temporal.api.sdk.v1.ExternalStorageReference"}


@dataclasses.dataclass
class Order:
    order_id: str
    weight_kg: float
    handling_notes: str


@activity.defn
async def fetch_orders(batch_id: str) -> list[Order]:
    return [Order(f"{batch_id}-{n}", 1.5 + n % 7, os.urandom(NOTE_BYTES // 2).hex()) for n in range(ORDERS)]


@activity.defn
async def weigh_orders(orders: list[Order]) -> dict[str, float]:
    return {"orders": len(orders), "total_weight_kg": round(sum(order.weight_kg for order in orders), 1)}


@workflow.defn
class FulfillBatch:
    @workflow.run
    async def run(self, batch_id: str) -> dict[str, float]:
        orders = await workflow.execute_activity(fetch_orders, batch_id, start_to_close_timeout=timedelta(seconds=60))
        return await workflow.execute_activity(weigh_orders, orders, start_to_close_timeout=timedelta(seconds=60))


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "plain"])
async def test_a_batch_past_kafkas_record_limit_travels_by_reference_stored_in_postgres(
    stack: LocalStack, task_queue: str, sealed: bool,
) -> None:
    driver = PostgresStorageDriver(stack.postgres_dsn, table=f"{DEFAULT_TABLE}_{uuid.uuid4().hex[:8]}")
    converter = dataclasses.replace(
        DataConverter.default, payload_codec=AesGcmCodec(AESGCM.generate_key(bit_length=256)) if sealed else None,
        external_storage=ExternalStorage(drivers=[driver]),
    )
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn, data_converter=converter)
    try:
        async with Worker(client, task_queue=task_queue, workflows=[FulfillBatch], activities=[fetch_orders, weigh_orders]):
            handle = await client.start_workflow(FulfillBatch.run, "BATCH-7", id=f"batch-{uuid.uuid4()}", task_queue=task_queue)
            summary = await handle.result()
        events: dict[str, list[dict[str, Any]]] = {}
        for event in (await handle.fetch_history()).events:
            events.setdefault(event["attributes"][0], []).append(event["attributes"][1])
    finally:
        await client.close()
        await driver.close()
    assert summary == {"orders": ORDERS, "total_weight_kg": sum(1.5 + n % 7 for n in range(ORDERS))}
    # The history holds a reference where the batch went: the first activity's result, the second's input.
    fetched, weighed = events["ActivityTaskCompleted"][0]["result"], events["ActivityTaskScheduled"][1]["input"]
    assert fetched["metadata"] == REFERENCE and len(fetched["data"]) < 200
    assert [p["metadata"] for p in weighed] == [REFERENCE]
    # The run's own input and result are small: inline (sealed by the codec, when there is one).
    inline = {"encoding": b"binary/encrypted"} if sealed else {"encoding": b"json/plain"}
    assert events["WorkflowExecutionStarted"][0]["input"][0]["metadata"] == inline
    assert events["WorkflowExecutionCompleted"][0]["result"]["metadata"] == inline
    with psycopg.connect(stack.postgres_dsn) as conn:
        stored = conn.execute(f"SELECT payload FROM {driver._table.as_string()}").fetchall()  # noqa: S608 (the test's own table)
    # The activity's result and the next activity's input: the same bytes stored once, unless each was
    # sealed apart (each with a nonce of its own).
    assert len(stored) == (2 if sealed else 1)
    for row in stored:
        kept = Payload.FromString(bytes(row[0]))
        assert kept.metadata == inline and len(kept.data) > 10 * 1024 * 1024


class NamedDriver(StorageDriver):
    """A driver only named: the checks below never store or retrieve."""

    def __init__(self, name: str) -> None:
        self._name = name

    def name(self) -> str:
        return self._name

    async def store(self, context: StorageDriverStoreContext, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        raise AssertionError("not called")

    async def retrieve(self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]) -> list[Payload]:
        raise AssertionError("not called")


async def test_external_storage_refuses_what_temporalio_refuses_and_keeps_small_payloads_inline() -> None:
    with pytest.raises(ValueError, match="at least one driver"):
        ExternalStorage(drivers=[])
    with pytest.raises(ValueError, match="driver_selector"):
        ExternalStorage(drivers=[NamedDriver("a"), NamedDriver("b")])
    with pytest.raises(ValueError, match="two drivers named 'a'"):
        ExternalStorage(drivers=[NamedDriver("a"), NamedDriver("a")], driver_selector=lambda context, payload: None)
    with pytest.raises(ValueError, match="0 or more bytes"):
        ExternalStorage(drivers=[NamedDriver("a")], payload_size_threshold=-1)
    storage = ExternalStorage(drivers=[NamedDriver("a")])
    small = [Payload({"encoding": b"json/plain"}, b'"small"')]
    assert await storage.store(small) == small and await storage.retrieve(small) == small
    stranger = Payload(REFERENCE, b'{"driverName":"s3","claimData":{"key":"k"}}')
    with pytest.raises(ValueError, match="driver 's3', which this data converter's ExternalStorage does not have"):
        await storage.retrieve([stranger])
