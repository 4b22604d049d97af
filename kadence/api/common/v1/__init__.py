"""`Payload` and `Payloads`, shaped as temporalio.api.common.v1's messages, so a codec written for
temporalio runs after an import swap; and the small messages of that package a Failure
(kadence.api.failure.v1) holds: `ActivityType`, `WorkflowType`, `WorkflowExecution`.

A Payload is also the record field itself: a dict `{"metadata": {str: bytes}, "data": bytes}`
that the Avro records carry as is. `SerializeToString` / `FromString` write and read the protobuf
wire format of Temporal's Payload message (metadata = 1, a map of string to bytes; data = 2), so
bytes a codec sealed are the same in both systems. `Payloads` is Temporal's wrapper of a list of
them (payloads = 1, repeated), a real protobuf message (so `google.protobuf.json_format` reads and
writes it, as a codec server does), which the records never hold (they carry the list itself):
the converter's and codec's `encode_wrapper` / `decode_wrapper` take and return it, as temporalio's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

_TYPE = descriptor_pb2.FieldDescriptorProto

_METADATA = 1
_DATA = 2
_PAYLOADS = 1  # of Payloads
_LENGTH_DELIMITED = 2


class Payload(dict[str, Any]):
    def __init__(self, metadata: Mapping[str, bytes] | None = None, data: bytes = b"") -> None:
        super().__init__(metadata=dict(metadata or {}), data=bytes(data))

    @classmethod
    def of(cls, record: Mapping[str, Any] | Any) -> Payload:
        """A payload field as read from a record (a plain dict), or a protobuf Payload message
        (what a `Payloads` message holds, temporalio's)."""
        if isinstance(record, Payload):
            return record
        if isinstance(record, Mapping):
            return cls(record.get("metadata"), record.get("data", b""))
        return cls(dict(record.metadata), record.data)

    @property
    def metadata(self) -> dict[str, bytes]:
        return self["metadata"]

    @property
    def data(self) -> bytes:
        return self["data"]

    @data.setter
    def data(self, value: bytes) -> None:
        self["data"] = bytes(value)

    def SerializeToString(self, *, deterministic: bool = False) -> bytes:  # noqa: N802 (protobuf's name)
        out = bytearray()
        items = sorted(self.metadata.items()) if deterministic else self.metadata.items()
        for key, value in items:
            entry = _field(1, key.encode()) + _field(2, value)
            out += _field(_METADATA, entry)
        if self.data:
            out += _field(_DATA, self.data)
        return bytes(out)

    @classmethod
    def FromString(cls, data: bytes) -> Payload:  # noqa: N802 (protobuf's name)
        payload = cls()
        payload.ParseFromString(data)
        return payload

    def ParseFromString(self, data: bytes) -> int:  # noqa: N802 (protobuf's name)
        self.Clear()
        for number, value in _fields(data):
            if number == _METADATA:
                entry = dict(_fields(value))
                self.metadata[entry.get(1, b"").decode()] = entry.get(2, b"")
            elif number == _DATA:
                self["data"] = value
        return len(data)

    def CopyFrom(self, other: Mapping[str, Any]) -> None:  # noqa: N802 (protobuf's name)
        source = Payload.of(other)
        self.Clear()
        self.metadata.update(source.metadata)
        self["data"] = source.data

    def Clear(self) -> None:  # noqa: N802 (protobuf's name)
        super().__init__(metadata={}, data=b"")

    def ByteSize(self) -> int:  # noqa: N802 (protobuf's name)
        return len(self.SerializeToString())

    def __repr__(self) -> str:
        return f"Payload(metadata={self.metadata!r}, data={self.data!r})"


def _payloads_message() -> type[Message]:
    """temporal.api.common.v1.Payloads (and the Payload it repeats) as protobuf builds it from a
    descriptor, declared as Temporal's message.proto declares them, in a pool of its own (so
    temporalio's in the same process, in the default pool, does not clash)."""
    package = "temporal.api.common.v1"
    proto = descriptor_pb2.FileDescriptorProto(name="temporal/api/common/v1/message.proto", package=package, syntax="proto3")
    payload = proto.message_type.add(name="Payload")
    entry = payload.nested_type.add(name="MetadataEntry", options=descriptor_pb2.MessageOptions(map_entry=True))
    entry.field.add(name="key", number=1, type=_TYPE.TYPE_STRING, label=_TYPE.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=_TYPE.TYPE_BYTES, label=_TYPE.LABEL_OPTIONAL)
    payload.field.add(name="metadata", number=_METADATA, type=_TYPE.TYPE_MESSAGE, label=_TYPE.LABEL_REPEATED,
                      type_name=f".{package}.Payload.MetadataEntry")
    payload.field.add(name="data", number=_DATA, type=_TYPE.TYPE_BYTES, label=_TYPE.LABEL_OPTIONAL)
    payloads = proto.message_type.add(name="Payloads")
    payloads.field.add(name="payloads", number=_PAYLOADS, type=_TYPE.TYPE_MESSAGE, label=_TYPE.LABEL_REPEATED,
                       type_name=f".{package}.Payload")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Payloads"))


if TYPE_CHECKING:
    class Payloads(Message):
        """What the protobuf class below has, for type checkers."""

        payloads: Any  # a repeated field of temporal.api.common.v1.Payload messages

        def __init__(self, *, payloads: Iterable[Mapping[str, Any] | Any] = ...) -> None: ...
else:
    # Temporal's wrapper of a list of payloads, as the real protobuf message: json_format reads and
    # writes it as a codec server does, and the `payloads` it holds are protobuf Payload messages
    # (Payload.of reads one). The records never hold it: they carry the list itself.
    Payloads = _payloads_message()


def replace_payloads(payloads: Payloads, values: Iterable[Mapping[str, Any] | Any]) -> None:
    """Put `values` (Payloads or Payload messages) in place of what `payloads` holds."""
    found = [Payload.of(value) for value in values]
    del payloads.payloads[:]
    for value in found:
        payloads.payloads.add(metadata=value.metadata, data=value.data)


@dataclass(frozen=True)
class ActivityType:
    name: str = ""


@dataclass(frozen=True)
class WorkflowType:
    name: str = ""


@dataclass(frozen=True)
class WorkflowExecution:
    workflow_id: str = ""
    run_id: str = ""


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | _LENGTH_DELIMITED) + _varint(len(value)) + value


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("truncated protobuf varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _fields(data: bytes) -> list[tuple[int, bytes]]:
    """The length-delimited fields of a protobuf message, in order; other wire types are skipped."""
    found: list[tuple[int, bytes]] = []
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at)
        number, wire_type = key >> 3, key & 7
        if wire_type == _LENGTH_DELIMITED:
            size, at = _read_varint(data, at)
            if at + size > len(data):
                raise ValueError("truncated protobuf field")
            found.append((number, bytes(data[at:at + size])))
            at += size
        elif wire_type == 0:
            _, at = _read_varint(data, at)
        elif wire_type in (1, 5):
            at += 8 if wire_type == 1 else 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type}")
    return found
