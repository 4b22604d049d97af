"""Hostile input: a storm of hostile commands (hypothesis) and SDK calls, and history records no
reader can apply. Each is refused with a clear answer or goes to kadence.dlq with the reason;
no service exits, every partition keeps moving and the audit stays clean.

Each test has a private stack: the storm leaves runs no worker will take, and the history records
written by hand here would be audit findings on the shared stack.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import CommandRejectedError
from kadence.protocol import topics
from kadence.protocol.codec import UndecodableRecord, command_codec, history_batch_codec
from kadence.protocol.kafka import read_to_end
from kadence.protocol.limits import text_problem
from kadence.protocol.names import WITH_START
from kadence.protocol.postgres import apply_ddl
from kadence.protocol.read_model import VISIBILITY_DDL
from kadence.worker import Worker
from tests.conftest import local_stack, workflow_id_on
from tests.test_cli import kadence
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, EchoWorkflow

PARTITIONS = 4  # local_stack's
GOOD_QUEUE = "fuzz-good"

HOSTILE_TEXT = st.one_of(
    st.sampled_from(["", "\x00", "a\x00b", "x" * 1001, "é" * 501, "with spaces", "ok", "../..", "\u202e", "\ufeff", "tq/x"]),
    st.text(max_size=30),  # any code point Avro can write (not a lone surrogate: see LONE_SURROGATE)
)
QUEUES = st.one_of(HOSTILE_TEXT, st.just("fuzz-open"))  # the one valid queue: a topic each would cost a second
JSON_VALUES = st.sampled_from([
    b"{not json", b'"a\\u0000b"', b'"\\ud800"', b"NaN", b"1e999", b"[" * 900 + b"]" * 900, b"[" * 20_000 + b"]" * 20_000,
    b'"' + b"x" * 50_000 + b'"', b'{"a": 1}', b'"fine"', b"[1, \"k\", true]", b"\xff\xfe", b"",
]) | st.binary(max_size=40)
SEARCH_VALUES = st.one_of(
    JSON_VALUES.map(lambda data: {"metadata": {"encoding": b"json/plain"}, "data": data}),
    st.builds(lambda encoding, data: {"metadata": {"encoding": encoding}, "data": data},
              st.sampled_from([b"binary/plain", b"binary/null", b"", b"\x00"]), st.binary(max_size=20)),
)
SEARCH_ATTRIBUTES = st.one_of(
    st.dictionaries(HOSTILE_TEXT, SEARCH_VALUES, max_size=3),
    st.just({f"K{i}": {"metadata": {"encoding": b"json/plain"}, "data": b"1"} for i in range(101)}),
)
LONE_SURROGATE_MARK = "\ue000"  # replaced in the encoded record by a lone surrogate's bytes (CESU-8, not UTF-8)


@st.composite
def commands(draw: st.DrawFn) -> dict[str, Any]:
    request_id = draw(st.one_of(st.just(""), st.uuids().map(str), HOSTILE_TEXT))
    start = {"workflow_type": draw(HOSTILE_TEXT), "task_queue": draw(QUEUES), "request_id": request_id,
             "search_attributes": draw(SEARCH_ATTRIBUTES), "memo": draw(st.dictionaries(HOSTILE_TEXT, SEARCH_VALUES, max_size=3))}
    kind, body = draw(st.sampled_from([
        ("StartWorkflowExecution", start),
        ("SignalWithStartWorkflowExecution", {"start": start, "signal_name": draw(HOSTILE_TEXT)}),
        ("UpdateWithStartWorkflowExecution", {"start": {**start, "id_conflict_policy": "USE_EXISTING"},
                                              "update": {"update_id": draw(HOSTILE_TEXT), "name": draw(HOSTILE_TEXT)}}),
        ("SignalWorkflowExecution", {"signal_name": draw(HOSTILE_TEXT), "request_id": request_id, "run_id": draw(HOSTILE_TEXT)}),
        ("UpdateWorkflowExecution", {"update_id": draw(HOSTILE_TEXT), "name": draw(HOSTILE_TEXT), "request_id": request_id}),
        ("RequestCancelWorkflowExecution", {"request_id": request_id}),
        ("TerminateWorkflowExecution", {"request_id": request_id, "reason": draw(HOSTILE_TEXT)}),
        ("QueryWorkflow", {"query": {"task_queue": draw(QUEUES), "workflow_type": draw(HOSTILE_TEXT), "query_id": draw(HOSTILE_TEXT),
                                     "query_type": draw(HOSTILE_TEXT), "reply_partition": 0}}),
    ]))
    return {"workflow_id": draw(st.one_of(HOSTILE_TEXT, st.uuids().map(str))), "identity": draw(HOSTILE_TEXT), "command": (kind, body)}


@dataclass
class Hostile:
    value: bytes
    key: bytes | None
    partition: int | None  # None: by the key, as a producer would
    twice: bool


@st.composite
def hostile_records(draw: st.DrawFn) -> Hostile:
    codec = command_codec()
    shape = draw(st.sampled_from(["bytes", "command", "command", "command", "surrogate"]))
    if shape == "bytes":
        value = draw(st.binary(max_size=200))
        key = draw(st.none() | st.binary(max_size=10))
    else:
        command = draw(commands())
        if shape == "surrogate":
            command["workflow_id"] = "a" + LONE_SURROGATE_MARK
        value = codec.encode(command).replace(LONE_SURROGATE_MARK.encode(), b"\xed\xa0\x80")
        key = command["workflow_id"].encode()
    wrong_partition = draw(st.booleans())
    return Hostile(value, key, draw(st.integers(0, PARTITIONS - 1)) if wrong_partition else None, draw(st.booleans()))


@pytest.fixture
def drawn_storm() -> Iterator[concurrent.futures.Future[list[Hostile]]]:
    """The storm's 2,000 records, drawn on a thread of this process while the stack starts (the
    drawing takes about 6 s; the test process only waits for the stack meanwhile)."""
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="storm") as drawing:
        yield drawing.submit(_storm, 2000)


@pytest.fixture
def hostile_stack() -> Iterator[LocalStack]:
    """A stack of each test's own: the storm's backlog must not meet the history records written by hand."""
    with local_stack() as stack:
        yield stack


@pytest.fixture
async def hostile_client(hostile_stack: LocalStack) -> AsyncIterator[Client]:
    client = await Client.connect(hostile_stack.bootstrap_servers, postgres_dsn=hostile_stack.postgres_dsn)
    yield client
    await client.close()


def _storm(storm_size: int) -> list[Hostile]:
    drawn: list[Hostile] = []

    @settings(max_examples=storm_size // 25, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(hostile_records(), min_size=25, max_size=25))
    def draw(records: list[Hostile]) -> None:
        drawn.extend(records)

    draw()
    return drawn


SDK_IDS = st.one_of(HOSTILE_TEXT, st.sampled_from(["\ud800", "ok\udfff"]))
SDK_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | HOSTILE_TEXT | st.sampled_from(["\ud800", "a\x00b"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8,
)


def _sdk_calls(count: int) -> list[tuple[str, str, dict[str, Any]]]:
    drawn: list[tuple[str, str, dict[str, Any]]] = []

    @settings(max_examples=count, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(SDK_IDS, st.one_of(SDK_IDS, st.just("fuzz-open")), st.dictionaries(SDK_IDS, SDK_VALUES, max_size=3))
    def draw(workflow_id: str, task_queue: str, search_attributes: dict[str, Any]) -> None:
        drawn.append((workflow_id, task_queue, search_attributes))

    draw()
    return drawn


def _expected_answer(value: bytes) -> str | None:
    """The request id a decodable command is answered under (None: no answer is due)."""
    try:
        command = command_codec().decode(value)
    except UndecodableRecord:
        return None
    kind, body = command["command"]
    request_id = body["start"]["request_id"] if kind in WITH_START else body.get("request_id", "")
    return request_id if request_id and text_problem("request_id", request_id) is None else None


async def _outcomes(stack: LocalStack, request_ids: set[str], timeout: float) -> dict[str, tuple[bool, str | None]]:
    """The recorded outcome of each request id, once all are there (or what is there at the timeout)."""
    found: dict[str, tuple[bool, str | None]] = {}
    async with await psycopg.AsyncConnection.connect(stack.postgres_dsn, autocommit=True) as conn:
        await apply_ddl(conn, VISIBILITY_DDL)  # the projector may not have created the table yet
        async with asyncio.timeout(timeout):
            while set(found) != request_ids:
                rows = await (await conn.execute(
                    "SELECT request_id, accepted, cause FROM kadence_command_outcomes WHERE request_id = ANY(%s)",
                    ([r.replace("\x00", "\ufffd") for r in request_ids - set(found)],),
                )).fetchall()
                found.update({request_id: (accepted, cause) for request_id, accepted, cause in rows})
                await asyncio.sleep(0.2)
    return found


def _services_alive(stack: LocalStack) -> dict[str, int | None]:
    return {name: process.poll() for name, process in stack.services.items() if process.poll() is not None}


async def _every_partition_moves(stack: LocalStack, client: Client, prefix: str) -> None:
    async with Worker(client, task_queue=GOOD_QUEUE, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        results = await asyncio.wait_for(asyncio.gather(*(
            client.execute_workflow(EchoWorkflow.run, f"p{p}", id=workflow_id_on(p, PARTITIONS, prefix), task_queue=GOOD_QUEUE)
            for p in range(PARTITIONS)
        )), 60)
    assert results == [f"p{p}" for p in range(PARTITIONS)]


async def test_a_storm_of_hostile_commands_and_sdk_calls_is_refused_or_dead_lettered_and_every_partition_moves(
    drawn_storm: concurrent.futures.Future[list[Hostile]], hostile_stack: LocalStack, hostile_client: Client,
) -> None:
    stack, client, storm = hostile_stack, hostile_client, drawn_storm.result()
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers})
    for record in storm:
        placement = {"partition": record.partition} if record.partition is not None else {}
        for _ in range(2 if record.twice else 1):
            producer.produce(topics.COMMANDS, record.value, record.key, **placement)
    assert producer.flush(30) == 0

    # The SDK refuses what the history service would, with the same error, and never hangs.
    refused = accepted = 0
    for workflow_id, task_queue, search_attributes in _sdk_calls(40):
        try:
            await asyncio.wait_for(client.start_workflow(
                "FuzzWorkflow", id=workflow_id, task_queue=task_queue, search_attributes=search_attributes,
            ), 30)
            accepted += 1
        except CommandRejectedError as exc:
            assert exc.cause in ("INVALID_ARGUMENT", "WORKFLOW_ALREADY_STARTED") and exc.reason, exc
            refused += 1
    print(f"storm: {len(storm)} records, SDK calls: {accepted} accepted, {refused} refused")

    # Every command that carries a usable request id is answered (accepted, or refused with the cause).
    due = {request_id for record in storm if (request_id := _expected_answer(record.value)) is not None}
    answered = await _outcomes(stack, due, 90)
    assert set(answered) == due, f"{len(due - set(answered))} of {len(due)} commands unanswered"
    assert any(cause == "INVALID_ARGUMENT" for _, cause in answered.values())
    # Every record that is not a command is a dead letter, with the reason.
    undecodable = {record.value for record in storm if _expected_answer(record.value) is None and not _decodes(record.value)}
    letters = {msg.value(): dict(msg.headers()) for msg in read_to_end(stack.settings, topics.DLQ, {0: 0})}
    assert undecodable <= set(letters)
    assert all(letters[value]["kadence-error"].startswith(b"Command") for value in undecodable)

    await _every_partition_moves(stack, client, "after-storm")
    assert _services_alive(stack) == {}
    audit = kadence(stack, "audit", "replay", "--json")
    assert audit.returncode == 0 and json.loads(audit.stdout)["violations"] == [], audit.stdout[-2000:]


def _decodes(value: bytes) -> bool:
    try:
        command_codec().decode(value)
        return True
    except UndecodableRecord:
        return False


def _history_batch(
    workflow_id: str, *, task_queue: str, search_attributes: dict[str, Any], request_id: str, source_offset: int,
) -> dict[str, Any]:
    """A first batch of a run as an older release (or a bug) could have written it, past every edge check."""
    started = {"event_id": 1, "event_time_ms": 1_700_000_000_000, "attributes": ("WorkflowExecutionStarted", {
        "workflow_type": "Old\x00Type", "task_queue": task_queue, "input": [], "request_id": request_id, "identity": "old",
        "workflow_task_timeout_ms": 10_000, "search_attributes": search_attributes,
    })}
    scheduled = {"event_id": 2, "event_time_ms": 1_700_000_000_000,
                 "attributes": ("WorkflowTaskScheduled", {"task_queue": task_queue, "attempt": 1})}
    return {
        "workflow_id": workflow_id, "run_id": str(uuid.uuid4()), "first_event_id": 1, "events": [started, scheduled], "buffered": [],
        "effects": [("WorkflowTask", {"task_queue": task_queue, "workflow_type": "Old", "scheduled_event_id": 2, "attempt": 1,
                                      "history": []}),
                    ("Timer", {"timer_id": f"{workflow_id}/t", "kind": "USER_TIMER", "fire_at_ms": 2**42,
                               "scheduled_event_id": 2, "attempt": 1})],
        "heartbeats": [], "request_ids": [request_id], "rejection": None, "source_partition": 0, "source_offset": source_offset,
    }


async def test_history_records_a_reader_cannot_apply_are_dead_lettered_and_their_answers_still_given(
    hostile_stack: LocalStack, hostile_client: Client,
) -> None:
    stack, client = hostile_stack, hostile_client
    codec = history_batch_codec()
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers})
    # Each batch stands for a command of its own, one the history service refuses without writing
    # a batch (a worker's start for no workflow), so no reader skips it as a repeat.
    unknown = workflow_id_on(0, PARTITIONS, "no-such-workflow")
    command = command_codec()
    offsets: list[int] = []
    stale = {"workflow_id": unknown, "command": ("RecordWorkflowTaskStarted", {"run_id": "", "scheduled_event_id": 2})}
    for _ in range(2):
        producer.produce(topics.COMMANDS, command.encode(stale), unknown.encode(), partition=0, headers=command.headers(),
                         on_delivery=lambda _, msg: offsets.append(msg.offset()))
    assert producer.flush(10) == 0
    request_id = str(uuid.uuid4())
    bad = _history_batch("old-\x00-id", task_queue="old queue/with a slash", request_id=request_id, source_offset=offsets[0],
                         search_attributes={"Note": {"metadata": {"encoding": b"json/plain"}, "data": b"{not json"}})
    # An id past an index's row size (Postgres's program limit, SQLSTATE 54000), as a release
    # without the 1,000-byte limit could have written: the record's fault, not an outage.
    too_long = _history_batch("long-" + "".join(uuid.uuid4().hex for _ in range(250)), task_queue="fuzz-open",
                              request_id=str(uuid.uuid4()), source_offset=offsets[1], search_attributes={})
    too_long["events"][0]["attributes"][1]["workflow_type"] = "Old"  # only the id is at fault (random: it does not compress)
    garbage = b"\x00\xff not a history batch " + uuid.uuid4().bytes
    producer.produce(topics.HISTORY, codec.encode(bad), b"old", partition=0, headers=codec.headers())
    producer.produce(topics.HISTORY, codec.encode(too_long), b"long", partition=0, headers=codec.headers())
    producer.produce(topics.HISTORY, garbage, b"garbage", partition=0)
    assert producer.flush(10) == 0

    # The caller waiting for the start hears its answer, though the read model cannot hold the run.
    assert (await _outcomes(stack, {request_id}, 30))[request_id] == (True, None)
    await _every_partition_moves(stack, client, "after-bad-history")

    letters = [dict(msg.headers()) for msg in read_to_end(stack.settings, topics.DLQ, {0: 0})
               if msg.value() in (codec.encode(bad), garbage)]
    long_letters = [dict(msg.headers())["kadence-error"].decode() for msg in read_to_end(stack.settings, topics.DLQ, {0: 0})
                    if msg.value() == codec.encode(too_long)]
    assert sorted(error.split(":")[0] for error in long_letters) == ["timer", "visibility"], long_letters
    assert all("ProgramLimitExceeded" in error for error in long_letters), long_letters
    # Each reader sends each record it cannot apply, with its name and why: visibility (the NUL
    # workflow type, the search attribute), the timer service (the NUL workflow id of a stored
    # timer); and the garbage, from each of the three (matching reads every batch for the commands
    # it relays; the tasks went from the history service, which never dispatches to such a queue).
    readers = sorted(headers["kadence-error"].split(b":")[0].decode() for headers in letters)
    assert readers == sorted(["visibility", "timer", "visibility", "matching", "timer"]), [h["kadence-error"] for h in letters]
    assert {headers["kadence-source-topic"] for headers in letters} == {topics.HISTORY.encode()}
    assert _services_alive(stack) == {}
    # A record of the history is not produced again: that would only append a repeat to the log.
    offset = next(msg.offset() for msg in read_to_end(stack.settings, topics.DLQ, {0: 0}) if msg.value() == garbage)
    replayed = kadence(stack, "dlq", "replay", "--offset", str(offset))
    assert replayed.returncode != 0 and "not produced again" in replayed.stderr
