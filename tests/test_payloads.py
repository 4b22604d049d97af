"""`kadence.api.common.v1.Payloads`, Temporal's wrapper of a list of payloads: the bytes protobuf
writes for temporal.api.common.v1.Payloads (checked against protobuf itself, with the message
declared as Temporal's .proto declares it), and the converter's and codec's `encode_wrapper` /
`decode_wrapper`, as temporalio's."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from kadence.api.common.v1 import Payload, Payloads
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
    payloads = Payloads([Payload({"encoding": b"json/plain"}, b'"a"'), Payload({"encoding": b"binary/null"}), Payload()])
    theirs = TemporalPayloads()
    theirs.ParseFromString(payloads.SerializeToString())
    assert [(dict(p.metadata), p.data) for p in theirs.payloads] == [
        ({"encoding": b"json/plain"}, b'"a"'), ({"encoding": b"binary/null"}, b""), ({}, b"")]
    assert payloads.SerializeToString(deterministic=True) == theirs.SerializeToString(deterministic=True)
    assert Payloads.FromString(theirs.SerializeToString()) == payloads
    assert payloads.ByteSize() == theirs.ByteSize()
    copied = Payloads()
    copied.CopyFrom(payloads)
    assert copied == payloads and copied.payloads[0] is not payloads.payloads[0]
    copied.Clear()
    assert copied == Payloads() and payloads.payloads


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
    plain = Payloads(DataConverter().payload_converter.to_payloads(["pear"]))
    in_place = plain.payloads
    await codec.encode_wrapper(plain)
    assert plain.payloads is in_place and plain.payloads[0].metadata == {"encoding": b"binary/zlib"}
    await codec.decode_wrapper(plain)
    assert DataConverter().payload_converter.from_payloads(plain.payloads) == ["pear"]
