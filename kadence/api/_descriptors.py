"""Temporal's protobuf messages that Kadence's API holds (`Payloads`, `ExternalStorageReference`),
declared in code as Temporal's .proto files declare them and built by protobuf from those
descriptors, in a pool of Kadence's own: temporalio's messages of the same names, in protobuf's
default pool, may be loaded in the same process, and the two must not clash."""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

FIELD = descriptor_pb2.FieldDescriptorProto

_POOL = descriptor_pool.DescriptorPool()


def add_map(message: descriptor_pb2.DescriptorProto, package: str, name: str, number: int, value_type: int) -> None:
    """A `map<string, value_type> name = number;` field of `message`, as protoc declares one: a
    repeated field of a nested entry message."""
    entry_name = "".join(part.capitalize() for part in name.split("_")) + "Entry"
    entry = message.nested_type.add(name=entry_name, options=descriptor_pb2.MessageOptions(map_entry=True))
    entry.field.add(name="key", number=1, type=FIELD.TYPE_STRING, label=FIELD.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=value_type, label=FIELD.LABEL_OPTIONAL)
    message.field.add(name=name, number=number, type=FIELD.TYPE_MESSAGE, label=FIELD.LABEL_REPEATED,
                      type_name=f".{package}.{message.name}.{entry_name}")


def message_classes(proto: descriptor_pb2.FileDescriptorProto) -> dict[str, type[Message]]:
    """The class of each top-level message of `proto`, by name, once the file is in the pool."""
    _POOL.Add(proto)
    file = _POOL.FindFileByName(proto.name)
    return {name: message_factory.GetMessageClass(descriptor) for name, descriptor in file.message_types_by_name.items()}
