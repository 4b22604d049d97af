"""Temporal's default limits: enforced by the history service with a clear reason each; the SDK reads
them to suggest continue-as-new."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

MAX_PAYLOAD_BYTES = 2 * 1024 * 1024
# The largest Kafka record Kadence writes or reads: producers, topics (max.message.bytes) and
# brokers must all allow it, so that a payload up to MAX_PAYLOAD_BYTES gets Kadence's own answer.
MAX_RECORD_BYTES = 10 * 1024 * 1024
# The largest record value Kadence produces: the rest of MAX_RECORD_BYTES is room for the key, the
# headers and Kafka's framing. The history service keeps every HistoryBatch within it (a run whose
# next record would not fit is terminated with the reason), so no record can stop a partition.
MAX_RECORD_VALUE_BYTES = MAX_RECORD_BYTES - 64 * 1024
WARN_PAYLOAD_BYTES = 256 * 1024
MAX_ID_LENGTH = 1000
MAX_PENDING_ACTIVITIES = 2000
MAX_PENDING_SIGNALS = 2000
MAX_PENDING_CHILDREN = 2000
MAX_PENDING_EXTERNAL_REQUESTS = 2000  # signals and cancel requests sent to other workflows
MAX_HISTORY_EVENTS = 51_200
WARN_HISTORY_EVENTS = 10_240
MAX_HISTORY_BYTES = 50 * 1024 * 1024
WARN_HISTORY_BYTES = 10 * 1024 * 1024

# The fields of commands that name things: ids, types, queues.
_NAME_FIELDS = (
    "workflow_id", "workflow_type", "task_queue", "activity_id", "activity_type", "timer_id", "signal_name", "run_id", "marker_name",
)


def iter_payloads(record: Any, skip: frozenset[str] = frozenset()) -> Iterator[dict[str, Any]]:
    """Every Payload anywhere in `record` (a decoded Avro value), except under keys in `skip`."""
    if isinstance(record, dict):
        if "data" in record and "metadata" in record and isinstance(record["data"], bytes):
            yield record
        else:
            for key, value in record.items():
                if key not in skip:
                    yield from iter_payloads(value, skip)
    elif isinstance(record, (list, tuple)):
        for value in record:
            yield from iter_payloads(value, skip)


def largest_payload(record: Any) -> int:
    """Size of the largest Payload in `record`, metadata included."""
    return max((len(p["data"]) + sum(len(k) + len(v) for k, v in p["metadata"].items()) for p in iter_payloads(record)), default=0)


def payload_bytes(record: Any) -> int:
    """Total data size of the Payloads in `record`: what makes a history large."""
    return sum(len(p["data"]) for p in iter_payloads(record))


def encoded_bytes_bound(value: Any) -> int:
    """An upper bound of the Avro encoding of `value` (a decoded value, or a list of them): every
    string and bytes with a length prefix, 10 bytes for any other leaf and for each container.
    Record field names are counted although Avro does not write them: a small overestimate."""
    if isinstance(value, bytes):
        return len(value) + 10
    if isinstance(value, str):
        return (len(value) if value.isascii() else len(value.encode())) + 10
    if isinstance(value, dict):
        return 10 + sum(encoded_bytes_bound(k) + encoded_bytes_bound(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return 10 + sum(encoded_bytes_bound(v) for v in value)
    return 10


def payload_problem(record: Any, what: str) -> str | None:
    size = largest_payload(record)
    if size > MAX_PAYLOAD_BYTES:
        return f"{what}: a payload of {size / 1e6:.1f} MB exceeds the {MAX_PAYLOAD_BYTES // (1024 * 1024)} MB limit"
    return None


def name_problem(workflow_id: str, attrs: dict[str, Any]) -> str | None:
    for field, value in (("workflow_id", workflow_id), *((f, attrs.get(f)) for f in _NAME_FIELDS)):
        if isinstance(value, str) and len(value) > MAX_ID_LENGTH:
            return f"{field} is {len(value)} characters; at most {MAX_ID_LENGTH} are allowed"
    return None
