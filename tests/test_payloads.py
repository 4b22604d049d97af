"""`kadence.api.common.v1.Payloads`, Temporal's wrapper of a list of payloads: the bytes protobuf
is that protobuf message (checked against one declared apart, as Temporal's .proto declares it),
which json_format reads and writes as a codec server does, and the converter's and codec's
`encode_wrapper` / `decode_wrapper`, as temporalio's; and a `RawValue`, which the converter
passes through unconverted, as temporalio's."""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import Message

from kadence.api.common.v1 import Payload, Payloads
from kadence.common import RawValue
from kadence.converter import DataConverter, PayloadCodec


def temporal_payloads() -> Any:
    """The class of temporal.api.common.v1.Payloads (and the Payload it holds), declared as in Temporal's message.proto."""
    package = "temporal.api.common.v1"
    proto = descriptor_pb2.FileDescriptorProto(name="temporal/api/common/v1/message.proto", package=package, syntax="proto3")
    payload = proto.message_type.add(name="Payload")
    entry = payload.nested_type.add(name="MetadataEntry", options=descriptor_pb2.MessageOptions(map_entry=True))
    entry.field.add(name="key", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=1)
    entry.field.add(name="value", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES, label=1)
    payload.field.add(name="metadata", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE, label=3,
                      type_name=".temporal.api.common.v1.Payload.MetadataEntry")
    payload.field.add(name="data", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES, label=1)
    payloads = proto.message_type.add(name="Payloads")
    payloads.field.add(name="payloads", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE, label=3,
                       type_name=".temporal.api.common.v1.Payload")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Payloads"))


def test_payloads_are_the_protobuf_message_temporal_writes() -> None:
    TemporalPayloads = temporal_payloads()  # noqa: N806 (a message class)
    payloads = Payloads(payloads=[Payload({"encoding": b"json/plain"}, b'"a"'), Payload({"encoding": b"binary/null"}), Payload()])
    assert isinstance(payloads, Message) and payloads.DESCRIPTOR.full_name == "temporal.api.common.v1.Payloads"
    theirs = TemporalPayloads()
    theirs.ParseFromString(payloads.SerializeToString())
    assert [(dict(p.metadata), p.data) for p in theirs.payloads] == [
        ({"encoding": b"json/plain"}, b'"a"'), ({"encoding": b"binary/null"}, b""), ({}, b"")]
    # A record's Payload (a dict) writes the bytes of the message's Payload.
    assert [Payload.of(p).SerializeToString(deterministic=True) for p in payloads.payloads] == [
        p.SerializeToString(deterministic=True) for p in theirs.payloads]
    assert Payload.FromString(theirs.payloads[0].SerializeToString()) == Payload({"encoding": b"json/plain"}, b'"a"')
    # What a codec server reads and writes (temporalio's samples use json_format so).
    text = json_format.MessageToJson(payloads)
    assert json.loads(text)["payloads"][0] == {"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": "ImEi"}
    assert json_format.Parse(text, Payloads()) == payloads


class ZlibCodec(PayloadCodec):
    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload({"encoding": b"binary/zlib"}, zlib.compress(p.SerializeToString())) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [Payload.FromString(zlib.decompress(p.data)) if p.metadata.get("encoding") == b"binary/zlib" else p for p in payloads]


async def test_the_converter_and_the_codec_take_payloads_wrappers_as_temporalio_does() -> None:
    converter = DataConverter(payload_codec=ZlibCodec())
    wrapped = await converter.encode_wrapper(["apple", 2])
    assert isinstance(wrapped, Payloads) and [p.metadata for p in wrapped.payloads] == [{"encoding": b"binary/zlib"}] * 2
    assert await converter.decode_wrapper(wrapped, [str, int]) == ["apple", 2]
    assert await converter.decode_wrapper(None) == [] and await converter.decode_wrapper(Payloads()) == []

    codec = ZlibCodec()
    plain = Payloads(payloads=DataConverter().payload_converter.to_payloads(["pear"]))
    await codec.encode_wrapper(plain)  # in place, as temporalio's
    assert dict(plain.payloads[0].metadata) == {"encoding": b"binary/zlib"}
    await codec.decode_wrapper(plain)
    assert DataConverter().payload_converter.from_payloads([Payload.of(p) for p in plain.payloads]) == ["pear"]


def test_a_raw_value_passes_through_the_converter_as_temporalios() -> None:
    converter = DataConverter.default.payload_converter
    payload = converter.to_payload({"greeting": "hello"})
    raw = converter.from_payload(payload, RawValue)
    assert raw == RawValue(payload)
    assert converter.to_payloads([raw, "other"]) == [payload, converter.to_payload("other")]  # sent as it is
    odd = Payload(metadata={"encoding": b"binary/encrypted"}, data=b"\x01")
    assert converter.from_payloads([odd], [RawValue]) == [RawValue(odd)]  # whatever its encoding
