"""`Payload` and `Payloads`, shaped as temporalio.api.common.v1's messages, so a codec written for
temporalio runs after an import swap; and the small messages of that package a Failure
(kadence.api.failure.v1) holds: `ActivityType`, `WorkflowType`, `WorkflowExecution`.

A Payload is also the record field itself: a dict `{"metadata": {str: bytes}, "data": bytes}`
that the Avro records carry as is. `SerializeToString` / `FromString` write and read the protobuf
wire format of Temporal's Payload message (metadata = 1, a map of string to bytes; data = 2), so
bytes a codec sealed are the same in both systems. `Payloads` is Temporal's wrapper of a list of
them (payloads = 1, repeated), which the records never hold (they carry the list itself): the
converter's and codec's `encode_wrapper` / `decode_wrapper` take and return it, as temporalio's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_METADATA = 1
_DATA = 2
_PAYLOADS = 1  # of Payloads
_LENGTH_DELIMITED = 2


class Payload(dict[str, Any]):
    def __init__(self, metadata: Mapping[str, bytes] | None = None, data: bytes = b"") -> None:
        super().__init__(metadata=dict(metadata or {}), data=bytes(data))

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> Payload:
        """A payload field as read from a record (a plain dict)."""
        return record if isinstance(record, Payload) else cls(record.get("metadata"), record.get("data", b""))

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


@dataclass(init=False)
class Payloads:
    payloads: list[Payload]

    def __init__(self, payloads: Iterable[Mapping[str, Any]] = ()) -> None:
        self.payloads = [Payload.of(p) for p in payloads]

    def SerializeToString(self, *, deterministic: bool = False) -> bytes:  # noqa: N802 (protobuf's name)
        return b"".join(_field(_PAYLOADS, p.SerializeToString(deterministic=deterministic)) for p in self.payloads)

    @classmethod
    def FromString(cls, data: bytes) -> Payloads:  # noqa: N802 (protobuf's name)
        payloads = cls()
        payloads.ParseFromString(data)
        return payloads

    def ParseFromString(self, data: bytes) -> int:  # noqa: N802 (protobuf's name)
        self.payloads[:] = [Payload.FromString(value) for number, value in _fields(data) if number == _PAYLOADS]
        return len(data)

    def CopyFrom(self, other: Payloads) -> None:  # noqa: N802 (protobuf's name)
        self.payloads[:] = [Payload(p.metadata, p.data) for p in other.payloads]

    def Clear(self) -> None:  # noqa: N802 (protobuf's name)
        self.payloads.clear()

    def ByteSize(self) -> int:  # noqa: N802 (protobuf's name)
        return len(self.SerializeToString())
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
