"""Payload conversion: the JSON converter's types, and payload codecs (compression, AES-GCM
encryption) applied by client and worker, so payloads are unreadable in Kafka and Postgres."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import os
import uuid
import zlib
from collections.abc import Sequence

import psycopg
import pydantic
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from kadence.client import Client
from kadence.converter import DataConverter, JSONPayloadConverter, Payload, PayloadCodec
from kadence.local_stack import LocalStack
from kadence.protocol import topics
from kadence.protocol.kafka import read_to_end
from kadence.worker import Worker
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, ApprovalWorkflow, EchoWorkflow

SECRET = "top-secret-order-note"


class ZlibCodec(PayloadCodec):
    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [{"metadata": {"encoding": b"binary/zlib"}, "data": zlib.compress(_serialize(p))} for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [_deserialize(zlib.decompress(p["data"])) if p["metadata"].get("encoding") == b"binary/zlib" else p for p in payloads]


class AesGcmCodec(PayloadCodec):
    def __init__(self, key: bytes) -> None:
        self.aead = AESGCM(key)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        encrypted = []
        for payload in payloads:
            nonce = os.urandom(12)
            sealed = nonce + self.aead.encrypt(nonce, _serialize(payload), None)
            encrypted.append({"metadata": {"encoding": b"binary/encrypted"}, "data": sealed})
        return encrypted

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [_deserialize(self.aead.decrypt(p["data"][:12], p["data"][12:], None))
                if p["metadata"].get("encoding") == b"binary/encrypted" else p for p in payloads]


class ChainCodec(PayloadCodec):
    def __init__(self, *codecs: PayloadCodec) -> None:
        self.codecs = codecs

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        for codec in self.codecs:
            payloads = await codec.encode(payloads)
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        for codec in reversed(self.codecs):
            payloads = await codec.decode(payloads)
        return list(payloads)


def _serialize(payload: Payload) -> bytes:
    """A payload as bytes: its metadata as `key=value` lines, a blank line, its data."""
    header = b"".join(key.encode() + b"=" + value.hex().encode() + b"\n" for key, value in payload["metadata"].items())
    return header + b"\n" + payload["data"]


def _deserialize(data: bytes) -> Payload:
    header, _, body = data.partition(b"\n\n")
    metadata = {key.decode(): bytes.fromhex(value.decode()) for key, _, value in (line.partition(b"=") for line in header.splitlines())}
    return {"metadata": metadata, "data": body}


async def test_encrypted_payloads_round_trip_and_are_unreadable_in_kafka_and_postgres(stack: LocalStack, task_queue: str) -> None:
    converter = DataConverter(payload_codec=ChainCodec(ZlibCodec(), AesGcmCodec(AESGCM.generate_key(bit_length=256))))
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn, data_converter=converter)
    workflow_id = f"encrypted-{uuid.uuid4()}"
    try:
        async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
            assert await client.execute_workflow(EchoWorkflow.run, SECRET, id=f"{workflow_id}-echo", task_queue=task_queue) == SECRET
            handle = await client.start_workflow(ApprovalWorkflow.run, "order-1", id=workflow_id, task_queue=task_queue)
            await handle.signal(ApprovalWorkflow.add_note, SECRET)
            assert await handle.query(ApprovalWorkflow.notes_so_far) == SECRET
            await handle.signal(ApprovalWorkflow.approve, "erin")
            assert await handle.result() == f"order-1 approved by erin with notes ['{SECRET}']"
    finally:
        await client.close()

    history = b"".join(msg.value() for msg in read_to_end(stack.settings, topics.HISTORY, {p: 0 for p in range(stack.partitions)}))
    assert workflow_id.encode() in history and SECRET.encode() not in history
    with psycopg.connect(stack.postgres_dsn) as conn:
        stored = conn.execute("SELECT string_agg(encode(event, 'escape'), '') FROM kadence_events WHERE workflow_id LIKE %s",
                              (f"{workflow_id}%",)).fetchone()[0]
        results = conn.execute("SELECT string_agg(encode(result, 'escape'), '') FROM kadence_executions WHERE workflow_id LIKE %s",
                               (f"{workflow_id}%",)).fetchone()[0]
    assert SECRET not in stored and SECRET not in results


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Shipment:
    id: uuid.UUID
    at: datetime.datetime
    on: datetime.date
    color: Color
    notes: list[str] | None = None


class Customer(pydantic.BaseModel):
    name: str
    since: datetime.date


def test_the_json_converter_keeps_dates_uuids_enums_dataclasses_and_pydantic_models() -> None:
    converter = JSONPayloadConverter()
    shipment = Shipment(uuid.uuid4(), datetime.datetime(2026, 11, 30, 8, 0, tzinfo=datetime.UTC), datetime.date(2026, 12, 1), Color.RED)
    assert converter.from_payload(converter.to_payload(shipment), Shipment) == shipment
    assert converter.from_payload(converter.to_payload([shipment]), list[Shipment]) == [shipment]
    assert converter.from_payload(converter.to_payload(None), Shipment | None) is None
    customer = Customer(name="Ada", since=datetime.date(2020, 1, 2))
    assert converter.from_payload(converter.to_payload(customer), Customer) == customer
    assert converter.from_payload(converter.to_payload(b"\x00raw"), bytes) == b"\x00raw"
