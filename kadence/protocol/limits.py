"""Temporal's default limits: enforced by the history service with a clear reason each; the SDK reads
them to suggest continue-as-new."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kadence.protocol.names import SCHEDULE_COMMANDS, SCHEDULE_KEY_PREFIX, CommandType

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
# Temporal's defaults for search attributes: keys per run, bytes per value, bytes in all.
MAX_SEARCH_ATTRIBUTES = 100
MAX_SEARCH_ATTRIBUTE_VALUE_BYTES = 2 * 1024
MAX_SEARCH_ATTRIBUTES_BYTES = 40 * 1024
# Temporal's default limit of a run's memo, its keys and payloads in all.
MAX_MEMO_BYTES = 2 * 1024 * 1024
# A task queue names Kafka topics (kadence.tq.<queue>.activity): Kafka's topic characters, and
# short enough that the longest topic stays within Kafka's 249.
MAX_TASK_QUEUE_LENGTH = 249 - len("kadence.tq..activity")
_TASK_QUEUE = re.compile(r"[A-Za-z0-9._-]+")

# The fields of commands that name things: ids, types, queues. They end up in Postgres text
# columns, Kafka keys and topic names, so they hold no NUL and stay short.
_NAME_FIELDS = (
    "workflow_id", "workflow_type", "task_queue", "activity_id", "activity_type", "timer_id", "signal_name", "run_id", "marker_name",
    "child_run_id", "request_id", "eager_request_id", "update_id", "name", "query_type", "query_id", "identity",
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
    """Total data size of the Payloads in `record`: what makes a history large. Counted for every
    event a worker or the history service applies, so it calls itself only for containers, with no
    generator per level: about twice as fast as summing iter_payloads."""
    if isinstance(record, dict):
        data = record.get("data")
        if isinstance(data, bytes) and "metadata" in record:
            return len(data)
        values: Iterable[Any] = record.values()
    elif isinstance(record, (list, tuple)):
        values = record
    else:
        return 0
    total = 0
    for value in values:
        if isinstance(value, (dict, list, tuple)):
            total += payload_bytes(value)
    return total


def encoded_bytes_bound(value: Any) -> int:
    """An upper bound of the Avro encoding of `value` (a decoded value, or a list of them): every
    string and bytes with a length prefix, 10 bytes for any other leaf and for each container.
    Record field names are counted although Avro does not write them: a small overestimate.

    The history service bounds every transition with it, so it tests exact types and loops
    (about twice as fast as isinstance and sum over generators); subclasses (a StrEnum) take the
    isinstance branches."""
    kind = type(value)
    if kind is dict:
        total = 10
        for key, item in value.items():
            total += encoded_bytes_bound(key) + encoded_bytes_bound(item)
        return total
    if kind is str:
        return (len(value) if value.isascii() else len(value.encode())) + 10
    if kind is list or kind is tuple:
        total = 10
        for item in value:
            total += encoded_bytes_bound(item)
        return total
    if kind is bytes or isinstance(value, bytes):
        return len(value) + 10
    if isinstance(value, str):
        return (len(value) if value.isascii() else len(value.encode())) + 10
    if isinstance(value, dict):
        return encoded_bytes_bound(dict(value))
    if isinstance(value, (list, tuple)):
        return encoded_bytes_bound(list(value))
    return 10


def payload_problem(record: Any, what: str) -> str | None:
    size = largest_payload(record)
    if size > MAX_PAYLOAD_BYTES:
        return f"{what}: a payload of {size / 1e6:.1f} MB exceeds the {MAX_PAYLOAD_BYTES // (1024 * 1024)} MB limit"
    return None


def text_problem(field: str, value: str) -> str | None:
    """Why `value` cannot be a name or id: a NUL (Postgres text cannot hold one), a lone surrogate
    (not UTF-8, so not encodable in a record), or more than MAX_ID_LENGTH bytes (as Temporal counts
    them; it also keeps every key of the read model's indexes within Postgres's 2,704 bytes)."""
    if "\x00" in value:
        return f"{field} contains a NUL character (U+0000) at position {value.index(chr(0))}, which Postgres text cannot hold"
    try:
        size = len(value.encode())
    except UnicodeEncodeError as exc:
        return f"{field} is not valid UTF-8: a lone surrogate at position {exc.start}"
    if size > MAX_ID_LENGTH:
        return f"{field} is {size} bytes in UTF-8; at most {MAX_ID_LENGTH} are allowed"
    return None


def task_queue_problem(task_queue: str) -> str | None:
    if len(task_queue) > MAX_TASK_QUEUE_LENGTH or not _TASK_QUEUE.fullmatch(task_queue):
        return (
            f"task_queue {task_queue[:100]!r} cannot name a Kafka topic: use at most {MAX_TASK_QUEUE_LENGTH} "
            "of the characters A-Z a-z 0-9 . _ -"
        )
    return None


def name_problem(workflow_id: str, attrs: Mapping[str, Any]) -> str | None:
    """The first name or id among `attrs`' own fields (and the workflow id) that cannot be used, and why."""
    for field, value in (("workflow_id", workflow_id), *((f, attrs.get(f)) for f in _NAME_FIELDS)):
        if isinstance(value, str) and (problem := text_problem(field, value)):
            return problem
    task_queue = attrs.get("task_queue")
    if isinstance(task_queue, str) and task_queue and (problem := task_queue_problem(task_queue)):
        return problem
    search_attributes = attrs.get("search_attributes")
    if isinstance(search_attributes, dict) and (problem := search_attributes_problem(search_attributes)):
        return problem
    memo = attrs.get("memo", attrs.get("upserted_memo"))
    if isinstance(memo, dict):
        return memo_problem(memo)
    return None


def command_problem(command: dict[str, Any]) -> str | None:
    """Why a decoded Command cannot be accepted whatever the execution's state: an empty workflow id,
    a bad name or id, or bad search attributes, in the command or the records it holds (a
    signal-with-start's start, a query). The commands a workflow task completes with are checked
    one by one instead, each failing the task with its own cause."""
    if not command["workflow_id"]:
        return "workflow_id is empty"
    kind, body = command["command"]
    if command["workflow_id"].startswith(SCHEDULE_KEY_PREFIX) != (kind in SCHEDULE_COMMANDS) and kind != CommandType.TimeoutFired:
        if kind in SCHEDULE_COMMANDS:
            return f"{kind} goes to the key {SCHEDULE_KEY_PREFIX}<schedule id>, not to a workflow id"
        return f"workflow ids beginning with {SCHEDULE_KEY_PREFIX!r} are reserved for schedules"
    return name_problem(command["workflow_id"], {"identity": command["identity"]}) or _fields_problem(command["workflow_id"], body)


def _fields_problem(workflow_id: str, record: dict[str, Any]) -> str | None:
    problem = name_problem(workflow_id, record)
    for key, value in record.items():
        if problem is not None:
            break
        if isinstance(value, dict) and key not in ("search_attributes", "memo", "failure"):
            problem = _fields_problem(workflow_id, value)
    return problem


def search_attributes_problem(attributes: dict[str, dict[str, Any]]) -> str | None:
    """Search attributes are indexed as JSONB, so each value must be one of Temporal's search
    attribute types as JSON (a string, number or boolean, or a list of them) that JSONB can hold,
    within Temporal's size limits. A binary/null payload (None) is allowed: it sets nothing."""
    if len(attributes) > MAX_SEARCH_ATTRIBUTES:
        return f"{len(attributes)} search attributes; at most {MAX_SEARCH_ATTRIBUTES} are allowed"
    total = 0
    for name, payload in attributes.items():
        problem = text_problem("search attribute name", name) if name else "a search attribute name is empty"
        if problem:
            return problem
        encoding = payload["metadata"].get("encoding")
        if encoding == b"binary/null":
            continue
        if encoding != b"json/plain":
            return f"search attribute {name!r}: its payload is {encoding!r}; search attribute values are JSON (json/plain)"
        total += len(name) + len(payload["data"])
        if len(payload["data"]) > MAX_SEARCH_ATTRIBUTE_VALUE_BYTES:
            return (f"search attribute {name!r}: a value of {len(payload['data'])} bytes exceeds the "
                    f"{MAX_SEARCH_ATTRIBUTE_VALUE_BYTES} bytes allowed")
        if problem := _search_value_problem(payload["data"]):
            return f"search attribute {name!r}: {problem}"
    if total > MAX_SEARCH_ATTRIBUTES_BYTES:
        return f"search attributes of {total} bytes in all exceed the {MAX_SEARCH_ATTRIBUTES_BYTES} bytes allowed"
    return None


def memo_problem(memo: dict[str, dict[str, Any]]) -> str | None:
    """A memo's keys are text the read model keys its JSON by (no NUL, not empty), and the memo
    holds at most Temporal's 2 MB."""
    total = 0
    for key, payload in memo.items():
        if not key:
            return "a memo key is empty"
        if problem := text_problem("memo key", key):
            return problem
        total += len(key.encode()) + len(payload["data"]) + sum(len(k) + len(v) for k, v in payload["metadata"].items())
    if total > MAX_MEMO_BYTES:
        return f"a memo of {total / 1e6:.1f} MB exceeds the {MAX_MEMO_BYTES // (1024 * 1024)} MB limit"
    return None


def _search_value_problem(data: bytes) -> str | None:
    try:
        value = json.loads(data, parse_constant=_not_a_number)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return f"its json/plain payload is not JSON ({type(exc).__name__}: {exc})"
    items = value if isinstance(value, list) else [value]
    for item in items:
        if item is not None and not isinstance(item, (str, int, float, bool)):
            return "a value is a string, number or boolean, or a list of them (Temporal's search attribute types)"
        if isinstance(item, float) and not math.isfinite(item):
            return f"{item} is not a JSON number"
        if isinstance(item, str) and (problem := text_problem("a string value", item)):
            return problem
    return None


def _not_a_number(constant: str) -> float:
    raise ValueError(f"{constant} is not a JSON number")
