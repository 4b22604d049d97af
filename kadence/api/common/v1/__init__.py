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
What it holds are `PayloadMessage`s, the protobuf Payload message itself (with Temporal's
`external_payloads`, which a record has no room for).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.protobuf import descriptor_pb2
from google.protobuf.message import Message

from kadence.api._descriptors import FIELD, add_map, message_classes

_METADATA = 1
_DATA = 2
_EXTERNAL_PAYLOADS = 3
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


def _message_classes() -> dict[str, type[Message]]:
    """temporal.api.common.v1.Payload and Payloads as protobuf builds them, declared as Temporal's
    message.proto declares them (kadence/api/_descriptors.py)."""
    package = "temporal.api.common.v1"
    proto = descriptor_pb2.FileDescriptorProto(name="temporal/api/common/v1/message.proto", package=package, syntax="proto3")
    payload = proto.message_type.add(name="Payload")
    add_map(payload, package, "metadata", _METADATA, FIELD.TYPE_BYTES)
    payload.field.add(name="data", number=_DATA, type=FIELD.TYPE_BYTES, label=FIELD.LABEL_OPTIONAL)
    # What temporalio's external storage notes on a reference: the size of the payload stored. The
    # records have no room for it (schemas/Payload.avsc); a codec server's messages carry it.
    details = payload.nested_type.add(name="ExternalPayloadDetails")
    details.field.add(name="size_bytes", number=1, type=FIELD.TYPE_INT64, label=FIELD.LABEL_OPTIONAL)
    payload.field.add(name="external_payloads", number=_EXTERNAL_PAYLOADS, type=FIELD.TYPE_MESSAGE, label=FIELD.LABEL_REPEATED,
                      type_name=f".{package}.Payload.ExternalPayloadDetails")
    payloads = proto.message_type.add(name="Payloads")
    payloads.field.add(name="payloads", number=_PAYLOADS, type=FIELD.TYPE_MESSAGE, label=FIELD.LABEL_REPEATED,
                       type_name=f".{package}.Payload")
    return message_classes(proto)


if TYPE_CHECKING:
    class PayloadMessage(Message):
        """What the protobuf class below has, for type checkers."""

        metadata: Any  # a map of str to bytes
        data: bytes
        external_payloads: Any  # a repeated field of Payload.ExternalPayloadDetails messages

        def __init__(self, *, metadata: Mapping[str, bytes] | None = ..., data: bytes = ...,
                     external_payloads: Iterable[Any] = ...) -> None: ...

    class Payloads(Message):
        """What the protobuf class below has, for type checkers."""

        payloads: Any  # a repeated field of PayloadMessage

        def __init__(self, *, payloads: Iterable[Mapping[str, Any] | Any] = ...) -> None: ...
else:
    # Temporal's wrapper of a list of payloads, as the real protobuf message: json_format reads and
    # writes it as a codec server does, and the `payloads` it holds are protobuf Payload messages,
    # PayloadMessage (Payload.of reads one). The records never hold it: they carry the list itself.
    _MESSAGES = _message_classes()
    PayloadMessage = _MESSAGES["Payload"]
    Payloads = _MESSAGES["Payloads"]


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
