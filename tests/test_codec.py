"""The Avro codec: round trips, garbage, and foreign schema fingerprints."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kadence.protocol.codec import SCHEMA_HEADER, UndecodableRecord, codec, command_codec

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
    })}
    assert commands.decode(commands.encode(record), commands.headers()) == record


def test_a_failure_with_a_cause_chain_round_trips() -> None:
    failures = codec("Failure")
    cause = {"message": "declined", "type": "Declined", "source": "", "stack_trace": "", "non_retryable": True,
             "timeout_type": None, "details": [], "activity_failure_info": None, "cause": None}
    failure = {**cause, "message": "activity failed", "type": "", "non_retryable": False, "cause": cause,
               "activity_failure_info": {"scheduled_event_id": 5, "started_event_id": 6, "activity_type": "charge",
                                         "activity_id": "1", "retry_state": "MAXIMUM_ATTEMPTS_REACHED"}}
    assert failures.decode(failures.encode(failure)) == failure


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
