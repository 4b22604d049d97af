"""Writes the shared test vectors in this directory. Not run by any test: the vectors are committed,
and tests/test_java_start.py and examples/java-start's JUnit test check them.

    .venv/bin/python schemas/test-vectors/generate.py

Run it only when a change is meant to change them (say, Command.avsc changed, so the sample's
fingerprint and bytes did), and review the diff: every other change must leave them as they are.

partitions.json comes from the murmur2 below, written from the algorithm (not from aiokafka or
Kafka), so the vectors are a third implementation that the Python and Java ones must agree with.
start-command.json is the command examples/java-start produces for its sample order, written by
Kadence's own codec.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro

from kadence.protocol.codec import SCHEMA_HEADER, command_codec
from kadence.protocol.topics import COMMANDS

HERE = Path(__file__).resolve().parent
PARTITION_COUNTS = (1, 3, 4, 8, 12, 100)
KEYS = (
    "",  # empty, not null: Kafka hashes it like any key
    "a", "ab", "abc", "abcd", "abcde",  # every tail length murmur2 handles (len % 4 = 0..3)
    "order-42", "order-0", "order-1", "order-99.99", "workflow-7", "orders",
    "order-3f2b8c1e-6a4d-4e0b-9c1a-2d5e7f8a9b0c",
    "with space", "tab\there", "nul\u0000inside", "quote\"and\\backslash",
    "café", "Straße-ß", "Ωmega", "注文-42", "заказ-42", "طلب-42", "order-🚚", "🚚📦✅",  # 2-, 3- and 4-byte UTF-8
    "order-" + "0123456789" * 10,  # 106 bytes
    "k" * 1000,
    "ü" * 257,  # 514 bytes
    "订单" * 200 + "-end",  # 1204 bytes
)
SAMPLE_ORDER = {"order_id": "order-ü-42", "amount": 99.99}
JAVA_IDENTITY = "java-start-example"  # StartOrder.IDENTITY


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c), as a signed 32-bit int like Java's."""
    m, r, mask = 0x5BD1E995, 24, 0xFFFFFFFF
    h = (0x9747B28C ^ len(data)) & mask
    whole = len(data) - len(data) % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = data[whole:]
    if tail:
        h ^= int.from_bytes(tail, "little")
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partitions() -> dict:
    return {
        "about": "Kafka's default partitioner on record keys: murmur2 of the key's UTF-8 bytes (seed 0x9747b28c, "
                 "as a signed 32-bit int), made positive by & 0x7fffffff (not abs), modulo the partition count.",
        "partition_counts": list(PARTITION_COUNTS),  # the keys below give a partition for each
        "keys": [
            {
                "key": key,
                "utf8_hex": key.encode().hex(),
                "murmur2": murmur2(key.encode()),
                "partitions": {str(n): (murmur2(key.encode()) & 0x7FFFFFFF) % n for n in PARTITION_COUNTS},
            }
            for key in KEYS
        ],
    }


def start_command() -> dict:
    codec = command_codec()
    order_id = SAMPLE_ORDER["order_id"]
    record = {
        "workflow_id": order_id,
        "identity": JAVA_IDENTITY,
        "command": ("StartWorkflowExecution", {
            "workflow_type": "OrderWorkflow",
            "task_queue": "orders",
            "input": [{"metadata": {"encoding": b"json/plain"}, "data": json.dumps(SAMPLE_ORDER).encode()}],
            "request_id": "",
            "execution_timeout_ms": 0,
            "run_timeout_ms": 0,
            "workflow_task_timeout_ms": 0,
            "id_reuse_policy": "ALLOW_DUPLICATE",
            "id_conflict_policy": "FAIL",
            "search_attributes": {},
            "initiated_by": None,
            "start_delay_ms": 0,
        }),
    }
    avro_json = io.StringIO()
    fastavro.json_writer(avro_json, codec.schema, [record])
    return {
        "about": "The start command examples/java-start produces for `StartOrder order-ü-42 99.99`: the Kafka record's "
                 "key, headers and value. `record` is the value in Avro's JSON encoding; `value_hex` its Avro binary "
                 "(schemas/Command.avsc, no framing), as Kadence's codec writes it.",
        "topic": COMMANDS,
        "order": SAMPLE_ORDER,
        "key": order_id,
        "key_utf8_hex": order_id.encode().hex(),
        "headers": {SCHEMA_HEADER: codec.current_fingerprint},
        "record": json.loads(avro_json.getvalue()),
        "value_hex": codec.encode(record).hex(),
    }


def dumps(value: object, indent: str = "") -> str:
    """JSON indented like json.dumps(indent=2), except that lists keep each item on one line: the
    partition table reads down, a key per line."""
    inner = indent + "  "
    if isinstance(value, dict) and value:
        items = (f"{inner}{json.dumps(key)}: {dumps(item, inner)}" for key, item in value.items())
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return "[\n" + ",\n".join(inner + json.dumps(item, ensure_ascii=False) for item in value) + f"\n{indent}]"
    return json.dumps(value, ensure_ascii=False)


if __name__ == "__main__":
    (HERE / "partitions.json").write_text(dumps(partitions()) + "\n")
    (HERE / "start-command.json").write_text(dumps(start_command()) + "\n")
