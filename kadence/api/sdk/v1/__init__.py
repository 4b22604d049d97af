"""`ExternalStorageReference`, temporalio.api.sdk.v1's protobuf message of the reference external
storage leaves in a payload's place (kadence/_extstore.py writes and reads it), as the real protobuf
message: a codec server written for temporalio tells references apart by its
`DESCRIPTOR.full_name`, `temporal.api.sdk.v1.ExternalStorageReference`, in a payload's metadata."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from google.protobuf import descriptor_pb2
from google.protobuf.message import Message

from kadence.api._descriptors import FIELD, add_map, message_classes


def _message_classes() -> dict[str, type[Message]]:
    """Declared as Temporal's temporal/api/sdk/v1/external_storage.proto declares it."""
    package = "temporal.api.sdk.v1"
    proto = descriptor_pb2.FileDescriptorProto(name="temporal/api/sdk/v1/external_storage.proto", package=package,
                                               syntax="proto3")
    reference = proto.message_type.add(name="ExternalStorageReference")
    reference.field.add(name="driver_name", number=1, type=FIELD.TYPE_STRING, label=FIELD.LABEL_OPTIONAL)
    add_map(reference, package, "claim_data", 2, FIELD.TYPE_STRING)
    return message_classes(proto)


if TYPE_CHECKING:
    class ExternalStorageReference(Message):
        """What the protobuf class below has, for type checkers."""

        driver_name: str
        claim_data: Any  # a map of str to str

        def __init__(self, *, driver_name: str = ..., claim_data: Mapping[str, str] | None = ...) -> None: ...
else:
    ExternalStorageReference = _message_classes()["ExternalStorageReference"]
