"""Payload conversion: the JSON converter's types, and payload codecs (compression, AES-GCM
encryption) applied by client and worker, so payloads are unreadable in Kafka and Postgres."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import enum
import os
import typing
import uuid
import zlib
from collections.abc import Sequence
from typing import Any, Literal, Optional

import psycopg
import pydantic
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf import timestamp_pb2

from kadence.api.common.v1 import Payload
from kadence.client import Client
from kadence.converter import (
    BinaryProtoPayloadConverter,
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    EncodingPayloadConverter,
    JSONPlainPayloadConverter,
    JSONTypeConverter,
    PayloadCodec,
)
from kadence.dev.local_stack import LocalStack
from kadence.protocol import topics
from kadence.protocol.kafka import read_to_end
from kadence.worker import Worker
from tests.conftest import wait_for_event
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, ApprovalWorkflow, EchoWorkflow

SECRET = "top-secret-order-note"


class ZlibCodec(PayloadCodec):
    """As temporalio's documentation writes a codec: Payload objects and their protobuf bytes."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload(metadata={"encoding": b"binary/zlib"}, data=zlib.compress(p.SerializeToString())) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload.FromString(zlib.decompress(p.data)) if p.metadata.get("encoding") == b"binary/zlib" else p for p in payloads]


class AesGcmCodec(PayloadCodec):
    def __init__(self, key: bytes) -> None:
        self.aead = AESGCM(key)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        encrypted = []
        for payload in payloads:
            nonce = os.urandom(12)
            sealed = nonce + self.aead.encrypt(nonce, payload.SerializeToString(), None)
            encrypted.append(Payload(metadata={"encoding": b"binary/encrypted"}, data=sealed))
        return encrypted

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload.FromString(self.aead.decrypt(p.data[:12], p.data[12:], None))
                if p.metadata.get("encoding") == b"binary/encrypted" else p for p in payloads]


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


async def test_encrypted_payloads_round_trip_and_are_unreadable_in_kafka_and_postgres(stack: LocalStack, task_queue: str) -> None:
    codec = ChainCodec(ZlibCodec(), AesGcmCodec(AESGCM.generate_key(bit_length=256)))
    converter = dataclasses.replace(DataConverter.default, payload_codec=codec)
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
            await handle.describe()  # the read model holds the close, so the rows below are all written
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


class MalformingCodec(PayloadCodec):
    """Leaves a payload whose metadata is text, not bytes, for any value containing "poison": the
    command's Avro encoding then fails after the codec ran. Every other payload it passes through
    as the very object it was given, as a codec that skips small payloads does."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload(metadata={"encoding": "text"}, data=p.data) if b"poison" in p.data else p  # type: ignore[dict-item]
                for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


async def test_a_command_the_codec_left_unencodable_fails_with_the_reason_and_the_next_ones_still_go(
    stack: LocalStack, task_queue: str,
) -> None:
    """The client's encoder serves every command after one it could not send: none waits for ever."""
    converter = dataclasses.replace(DataConverter.default, payload_codec=MalformingCodec())
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn, data_converter=converter)
    try:
        async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
            with pytest.raises(TypeError):
                await asyncio.wait_for(client.start_workflow(EchoWorkflow.run, "poison", id=f"poison-{uuid.uuid4()}",
                                                             task_queue=task_queue), 30)
            fine = await asyncio.wait_for(client.start_workflow(EchoWorkflow.run, "fine", id=f"fine-{uuid.uuid4()}",
                                                                task_queue=task_queue), 30)
            assert await asyncio.wait_for(fine.result(), 60) == "fine"
    finally:
        await client.close()


async def first_task_failure(stack: LocalStack, handle: Any) -> dict[str, Any]:
    """The attributes of the workflow's first WorkflowTaskFailed, once recorded after its start (the
    task's next attempts are transient: no events until one completes); the run is terminated, as
    the test is over."""
    await wait_for_event(stack, handle.id, "WorkflowTaskFailed", 30)
    events = [event["attributes"] for event in (await handle.fetch_history()).events]
    assert [kind for kind, _ in events[:4]] == [
        "WorkflowExecutionStarted", "WorkflowTaskScheduled", "WorkflowTaskStarted", "WorkflowTaskFailed"]
    await handle.terminate(reason="the test is over")
    return dict(events[3][1])


async def test_a_workflow_task_whose_completion_the_codec_left_unencodable_fails_with_the_reason_in_its_history(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    """The completion carried the task's start and was never sent: the worker fails the task with
    the reason (and the start), so history records it rather than a task that only goes round."""
    converter = dataclasses.replace(DataConverter.default, payload_codec=MalformingCodec())
    malforming = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn, data_converter=converter)
    try:
        async with Worker(malforming, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
            handle = await client.start_workflow(EchoWorkflow.run, "poison", id=f"unsent-{uuid.uuid4()}", task_queue=task_queue)
            failed = await first_task_failure(stack, handle)
        assert failed["cause"] == "WORKFLOW_WORKER_UNHANDLED_FAILURE" and "TypeError" in str(failed["failure"])
    finally:
        await malforming.close()


async def test_a_workflow_task_whose_payloads_the_codec_cannot_decode_fails_with_the_reason_in_its_history(
    stack: LocalStack, task_queue: str,
) -> None:
    """A worker holding the wrong key: the task fails (its start carried in the failure), so the
    history says why, where a failure of a task never started would be refused."""
    sealing, wrong_key = [await Client.connect(
        stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn,
        data_converter=dataclasses.replace(DataConverter.default, payload_codec=AesGcmCodec(AESGCM.generate_key(bit_length=256))),
    ) for _ in range(2)]
    try:
        async with Worker(wrong_key, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
            handle = await sealing.start_workflow(EchoWorkflow.run, "sealed", id=f"wrong-key-{uuid.uuid4()}", task_queue=task_queue)
            failed = await first_task_failure(stack, handle)
        assert failed["cause"] == "WORKFLOW_WORKER_UNHANDLED_FAILURE"
        assert "InvalidTag" in failed["failure"]["message"] or "InvalidTag" in str(failed["failure"])
    finally:
        await sealing.close()
        await wrong_key.close()


def test_the_json_converter_keeps_dates_uuids_enums_dataclasses_and_pydantic_models() -> None:
    converter = DefaultPayloadConverter()
    shipment = Shipment(uuid.uuid4(), datetime.datetime(2026, 11, 30, 8, 0, tzinfo=datetime.UTC), datetime.date(2026, 12, 1), Color.RED)
    assert converter.from_payload(converter.to_payload(shipment), Shipment) == shipment
    assert converter.from_payload(converter.to_payload([shipment]), list[Shipment]) == [shipment]
    assert converter.from_payload(converter.to_payload(None), Shipment | None) is None
    customer = Customer(name="Ada", since=datetime.date(2020, 1, 2))
    assert converter.from_payload(converter.to_payload(customer), Customer) == customer
    assert converter.from_payload(converter.to_payload(b"\x00raw"), bytes) == b"\x00raw"


@dataclasses.dataclass
class Card:
    number: str


@dataclasses.dataclass
class Transfer:
    iban: str
    reference: str = ""


class Size(enum.IntEnum):
    SMALL = 1


class Address(typing.TypedDict):
    street: str
    since: datetime.date


def round_trip(value: object, hint: object) -> object:
    converter = DataConverter.default.payload_converter
    return converter.from_payloads(converter.to_payloads([value]), [hint])[0]


@pytest.mark.parametrize(("value", "hint"), [
    ({3, 1, 2}, set[int]),
    (frozenset({"b", "a"}), frozenset[str]),
    (Transfer("DE89"), Card | Transfer),  # a union of dataclasses: each member tried in order
    (Card("4111"), Card | Transfer),
    (None, Optional[Card]),
    (Card("4111"), Optional[Card]),
    ("express", Literal["standard", "express"]),
    (Size.SMALL, Size),
    (Color.RED, Color),
    ({"street": "Main St", "since": datetime.date(2020, 1, 2)}, Address),
    ({"a": [(1, Card("1"))], "b": []}, dict[str, list[tuple[int, Card]]]),
    ({1: "one", 2: "two"}, dict[int, str]),
    ((1, "x", 2.5), tuple[int, str, float]),
    (collections.deque([1, 2]), collections.deque[int]),
    (datetime.time(8, 30), datetime.time),
])
def test_the_default_converter_rebuilds_the_value_types_temporalio_does(value: object, hint: object) -> None:
    assert round_trip(value, hint) == value
    assert type(round_trip(value, hint)) is type(value)


def test_a_value_that_is_not_its_hint_fails_with_the_reason() -> None:
    with pytest.raises(TypeError, match="not in literal values"):
        round_trip("overnight", Literal["standard", "express"])
    with pytest.raises(TypeError, match="Failed converting to"):
        round_trip({"amount": 3}, Card | Transfer)
    with pytest.raises(TypeError, match="Expected int, was str"):
        round_trip("3", int)


def test_a_set_encodes_in_the_same_order_in_every_process() -> None:
    """A workflow's command payloads must be the same when it is replayed in another process,
    where strings hash differently."""
    payload = DataConverter.default.payload_converter.to_payload({"pear", "apple", "fig"})
    assert payload.data == b'["apple","fig","pear"]'


class Money:
    def __init__(self, cents: int) -> None:
        self.cents = cents

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and other.cents == self.cents


class MoneyConverter(EncodingPayloadConverter):
    """An encoding of its own, as temporalio's documentation shows a custom converter."""

    @property
    def encoding(self) -> str:
        return "text/money"

    def to_payload(self, value: object) -> Payload | None:
        return Payload(metadata={"encoding": self.encoding.encode()}, data=str(value.cents).encode()) if isinstance(value, Money) else None

    def from_payload(self, payload: Payload, type_hint: object = None) -> Money:
        return Money(int(payload.data))


class MoneyPayloadConverter(CompositePayloadConverter):
    def __init__(self) -> None:
        # before the defaults: JSON, the last of them, takes any value
        super().__init__(MoneyConverter(), *DefaultPayloadConverter.default_encoding_payload_converters)


class CentsTypeConverter(JSONTypeConverter):
    def to_typed_value(self, hint: object, value: object) -> object:
        return Money(value) if hint is Money else JSONTypeConverter.Unhandled  # type: ignore[arg-type]


async def test_a_custom_payload_converter_class_and_json_type_converter_take_their_types() -> None:
    converter = dataclasses.replace(DataConverter.default, payload_converter_class=MoneyPayloadConverter)
    payloads = await converter.encode([Money(250), "note", None])
    assert [p.metadata["encoding"] for p in payloads] == [b"text/money", b"json/plain", b"binary/null"]
    assert await converter.decode(payloads, [Money, str, None]) == [Money(250), "note", None]
    with pytest.raises(KeyError, match="Unknown payload encoding text/money"):
        DataConverter.default.payload_converter.from_payloads(payloads[:1])
    typed = JSONPlainPayloadConverter(custom_type_converters=[CentsTypeConverter()])
    assert typed.from_payload(typed.to_payload(120), Money) == Money(120)


def test_protobuf_messages_travel_as_json_or_binary_protobuf() -> None:
    stamp = timestamp_pb2.Timestamp(seconds=1_700_000_000, nanos=5)
    json_payload = DataConverter.default.payload_converter.to_payload(stamp)
    assert json_payload.metadata == {"encoding": b"json/protobuf", "messageType": b"google.protobuf.Timestamp"}
    assert DataConverter.default.payload_converter.from_payload(json_payload) == stamp
    binary = BinaryProtoPayloadConverter().to_payload(stamp)
    assert binary is not None and binary.metadata["encoding"] == b"binary/protobuf"
    assert DataConverter.default.payload_converter.from_payload(binary) == stamp


def test_a_payload_is_the_protobuf_message_temporal_codecs_expect() -> None:
    payload = Payload(metadata={"encoding": b"json/plain", "z": b""}, data=b'{"a":1}')
    # the bytes protobuf writes for temporal.api.common.v1.Payload (checked against temporalio 1.35)
    assert payload.SerializeToString(deterministic=True) == (
        b'\n\x16\n\x08encoding\x12\njson/plain\n\x05\n\x01z\x12\x00\x12\x07{"a":1}')
    assert Payload.FromString(payload.SerializeToString()) == payload
    assert payload == {"metadata": {"encoding": b"json/plain", "z": b""}, "data": b'{"a":1}'}  # the record field itself


class _Order:
    def place(self, item: Item, quantity: int = 1) -> Receipt:  # forward references: resolved on first use
        raise NotImplementedError


@dataclasses.dataclass
class Item:
    sku: str


@dataclasses.dataclass
class Receipt:
    number: int


def test_type_hints_resolve_once_per_function_and_a_bound_method_shares_its_functions() -> None:
    from kadence.converter import callable_arg_types, type_hints

    bound = _Order().place
    assert type_hints(bound) == {"item": Item, "quantity": int, "return": Receipt}
    assert type_hints(bound) is type_hints(_Order.place) is type_hints(_Order().place)
    assert callable_arg_types(bound) == [Item, int]
    assert callable_arg_types(_Order.place) == [None, Item, int]  # the function: self has no hint
    assert type_hints(Receipt) == {"number": int}
