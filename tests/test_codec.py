"""The Avro codec: round trips, garbage, foreign schema fingerprints, and schema versions."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kadence.converter import DataConverter
from kadence.protocol.codec import (
    KAFKA_RECORDS,
    SCHEMA_HEADER,
    RecordCodec,
    UndecodableRecord,
    archived_versions,
    build_codec,
    codec,
    command_codec,
    fingerprint_of,
    portable,
    schema_pin,
)
from kadence.protocol.settings import SettingError

payloads = st.builds(
    lambda meta, data: {"metadata": meta, "data": data},
    st.dictionaries(st.text(max_size=10), st.binary(max_size=20), max_size=3),
    st.binary(max_size=200),
)


@given(workflow_id=st.text(min_size=1, max_size=50), inputs=st.lists(payloads, max_size=3))
def test_start_command_round_trips(workflow_id: str, inputs: list[dict]) -> None:
    commands = command_codec()
    record = {"workflow_id": workflow_id, "identity": "me", "command": ("StartWorkflowExecution", {
        "workflow_type": "OrderWorkflow", "task_queue": "orders", "input": inputs, "request_id": "r1",
        "workflow_task_timeout_ms": 0, "id_reuse_policy": "ALLOW_DUPLICATE", "id_conflict_policy": "FAIL",
        "execution_timeout_ms": 0, "run_timeout_ms": 0, "search_attributes": {}, "initiated_by": None, "start_delay_ms": 0,
        "cron_schedule": "", "header": {}, "memo": {}, "scheduled_by": None, "time_skipping": None, "clock_offset_ms": 0, "activity": None,
        "nexus_caller": None, "nexus_operation": None,
        "eager_worker_identity": "",
    }), "reply_partition": None}
    assert commands.decode(commands.encode(record), commands.headers()) == record


NO_NEW_INFOS = dict.fromkeys((
    "child_workflow_execution_failure_info", "canceled_failure_info", "terminated_failure_info", "server_failure_info",
    "reset_workflow_failure_info", "nexus_operation_execution_failure_info",
))


def test_a_failure_with_a_cause_chain_round_trips() -> None:
    failures = codec("Failure")
    cause = {"message": "declined", "type": "Declined", "source": "", "stack_trace": "", "non_retryable": True,
             "timeout_type": None, "details": [], "activity_failure_info": None, "cause": None,
             "category": "BENIGN", "next_retry_delay_ms": 1500, **NO_NEW_INFOS}
    failure = {**cause, "message": "activity failed", "type": "", "non_retryable": False, "cause": cause,
               "category": "UNSPECIFIED", "next_retry_delay_ms": None,
               "activity_failure_info": {"scheduled_event_id": 5, "started_event_id": 6, "identity": "1@host", "activity_type": "charge",
                                         "activity_id": "1", "retry_state": "MAXIMUM_ATTEMPTS_REACHED"}}
    assert failures.decode(failures.encode(failure)) == failure


@pytest.mark.parametrize("info", [
    {"child_workflow_execution_failure_info": {"namespace": "default", "workflow_id": "w-child", "run_id": "r", "workflow_type": "Child",
                                               "initiated_event_id": 5, "started_event_id": 6, "retry_state": "NON_RETRYABLE_FAILURE"}},
    {"child_workflow_execution_failure_info": {"namespace": "default", "workflow_id": "w-child", "run_id": "", "workflow_type": "Child",
                                               "initiated_event_id": 5, "started_event_id": 0, "retry_state": None}},
    {"canceled_failure_info": {"identity": "1@host"}}, {"terminated_failure_info": {"identity": ""}}, {"server_failure_info": {}},
    {"reset_workflow_failure_info": {}},
    {"nexus_operation_execution_failure_info": {"scheduled_event_id": 5, "endpoint": "e", "service": "s", "operation": "o",
                                                "operation_id": "", "operation_token": "t"}},
])
def test_each_failure_info_round_trips(info: dict) -> None:
    failures = codec("Failure")
    failure = {"message": "m", "type": "", "source": "", "stack_trace": "", "non_retryable": False, "timeout_type": None, "details": [],
               "activity_failure_info": None, "cause": None, "category": "UNSPECIFIED", "next_retry_delay_ms": None, **NO_NEW_INFOS, **info}
    assert failures.decode(failures.encode(failure)) == failure


def test_a_failure_of_the_version_before_the_infos_reads_with_them_unset() -> None:
    """A Failure as written before the failure info records (in Command 93965eea87628aa4, the last
    version without them) reads with each None, a CancelledError's as the application failure it was."""
    old_named: dict = {}
    fastavro.parse_schema(json.loads(Path("schemas/versions/Command.93965eea87628aa4.avsc").read_text()), named_schemas=old_named)
    old_failure = fastavro.parse_schema(old_named["Failure"], named_schemas=old_named)
    new_failure = fastavro.parse_schema(codec("Failure").schema)
    failure = {"message": "m", "type": "CancelledError", "source": "", "stack_trace": "", "non_retryable": False, "timeout_type": None,
               "details": [], "activity_failure_info": None, "cause": None, "category": "UNSPECIFIED", "next_retry_delay_ms": None}
    written = io.BytesIO()
    fastavro.schemaless_writer(written, old_failure, failure)
    written.seek(0)
    read = fastavro.schemaless_reader(written, old_failure, new_failure)
    assert read == {**failure, **NO_NEW_INFOS}
    assert type(DataConverter.default.from_failure(read)).__name__ == "ApplicationError"


@given(garbage=st.binary(min_size=1, max_size=64))
def test_garbage_is_undecodable_or_a_whole_record(garbage: bytes) -> None:
    commands = command_codec()
    try:
        record = commands.decode(garbage)
    except UndecodableRecord:
        return
    assert commands.encode(record) == garbage  # bytes that happen to be a valid command


def test_an_unknown_schema_fingerprint_is_rejected_with_the_fix() -> None:
    commands = command_codec()
    record = {"workflow_id": "w", "identity": "", "command": ("RecordWorkflowTaskStarted", {"run_id": "r", "scheduled_event_id": 2})}
    with pytest.raises(UndecodableRecord, match="unknown schema fingerprint"):
        commands.decode(commands.encode(record), [(SCHEMA_HEADER, b"0000000000000000")])


def test_a_missing_value_is_undecodable() -> None:
    with pytest.raises(UndecodableRecord, match="no value"):
        command_codec().decode(None)


def test_this_builds_version_of_every_kafka_record_is_archived() -> None:
    """A changed schema must be archived (`kadence schemas archive`) so the records it wrote stay
    readable after the next change; the archived files must be what their names say."""
    versions = archived_versions()
    for name in KAFKA_RECORDS:
        assert codec(name).current_fingerprint in versions.get(name, {}), f"{name} changed: run `kadence schemas archive` and commit"
        for fingerprint, schema in versions[name].items():
            assert fingerprint_of(schema) == fingerprint, f"schemas/versions/{name}.{fingerprint}.avsc was edited"


def next_release(name: str) -> RecordCodec:
    """This build's codec for `name` as a later release might change the schema: a field added,
    with a default; it reads every archived version."""
    schema = portable(codec(name).schema)
    schema["fields"].append({"name": "build_id", "type": "string", "default": ""})
    later = fastavro.parse_schema(schema)
    return build_codec(name, later, {**codec(name).versions, fingerprint_of(later): later}, pinned=set())


def pinned(release: RecordCodec, fingerprint: str) -> RecordCodec:
    return build_codec(release.name, release.schema, release.versions, pinned={fingerprint})


HEARTBEAT = {"task_queue": "orders", "kind": "activity", "identity": "worker-1", "partitions": [0, 3], "sent_at_ms": 1_790_000_000_000}
# `identity` and the command's `request_id` are left to their defaults, as the SDK and services leave many fields.
TASK_STARTED = {
    "workflow_id": "w", "command": ("RecordWorkflowTaskStarted", {"run_id": "r", "scheduled_event_id": 2, "started_time_ms": 0}),
}


def test_a_record_from_an_earlier_release_decodes_into_the_later_schema() -> None:
    released = codec("PollerHeartbeat")
    assert next_release("PollerHeartbeat").decode(released.encode(HEARTBEAT), released.headers()) == {**HEARTBEAT, "build_id": ""}


@pytest.mark.parametrize(("name", "record", "as_released"), [
    ("PollerHeartbeat", HEARTBEAT, HEARTBEAT),
    ("Command", TASK_STARTED, {
        "workflow_id": "w", "identity": "", "reply_partition": None,
        "command": ("RecordWorkflowTaskStarted", {**TASK_STARTED["command"][1], "request_id": "", "attempt": 0}),
    }),
])
def test_a_pinned_build_writes_what_the_earlier_release_reads(name: str, record: dict, as_released: dict) -> None:
    """Mid-upgrade, the new build writes the old version (KADENCE_SCHEMA_PIN), so old readers still
    decode everything; its own new field is dropped until the pin is lifted, and fields left to
    their defaults still encode."""
    released = codec(name)
    writer = pinned(next_release(name), released.fingerprint)
    assert writer.headers() == released.headers()
    assert released.decode(writer.encode({**record, "build_id": "b7"}), writer.headers()) == as_released
    assert writer.decode(writer.encode(record), writer.headers()) == {**as_released, "build_id": ""}


def test_two_pins_for_one_record_are_refused() -> None:
    variants = []
    for extra in ("a", "b"):
        schema = portable(codec("Task").schema)
        schema["fields"].append({"name": extra, "type": "string", "default": ""})
        variants.append(fastavro.parse_schema(schema))
    versions = {fingerprint_of(variant): variant for variant in variants}
    with pytest.raises(SettingError, match="2 versions of Task"):
        build_codec("Task", codec("Task").schema, versions, pinned=set(versions))


def test_a_pin_this_build_does_not_know_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KADENCE_SCHEMA_PIN", "0123456789abcdef")
    schema_pin.cache_clear()
    try:
        with pytest.raises(SettingError, match="KADENCE_SCHEMA_PIN names .*0123456789abcdef"):
            schema_pin()
    finally:
        monkeypatch.delenv("KADENCE_SCHEMA_PIN")
        schema_pin.cache_clear()
