"""The failure converter carries temporalio's failure infos: each error class round trips through a
Failure record (and its Avro encoding) to the same class with the same fields, as temporalio's
DefaultFailureConverter, and the errors the workflow side builds from history carry core's messages."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from kadence.converter import DataConverter, failure_info_of
from kadence.exceptions import (
    ActivityError,
    ApplicationError,
    ApplicationErrorCategory,
    CancelledError,
    ChildWorkflowError,
    FailureError,
    NexusOperationError,
    RetryState,
    ServerError,
    TerminatedError,
    TimeoutError,
    TimeoutType,
)
from kadence.protocol.codec import codec
from kadence.protocol.names import EventType

converter = DataConverter.default


def round_trip(error: BaseException) -> FailureError:
    failures = codec("Failure")
    return converter.from_failure(failures.decode(failures.encode(converter.to_failure(error))))


def fields(error: BaseException) -> dict[str, Any]:
    return {name: value for name, value in vars(error).items() if name not in ("failure",)}


ERRORS: list[tuple[BaseException, str]] = [
    (ApplicationError("declined", "order-7", 12, type="PaymentDeclined", non_retryable=True, next_retry_delay=timedelta(seconds=3),
                      category=ApplicationErrorCategory.BENIGN), "application_failure_info"),
    (TimeoutError("activity StartToClose timeout", type=TimeoutType.HEARTBEAT, last_heartbeat_details=["half"]), "timeout_failure_info"),
    (CancelledError("Cancelled", "why"), "canceled_failure_info"),
    (TerminatedError("Terminated"), "terminated_failure_info"),
    (ServerError("the server", non_retryable=True), "server_failure_info"),
    (ActivityError("Activity task failed", scheduled_event_id=5, started_event_id=6, identity="1@host", activity_type="charge",
                   activity_id="charge", retry_state=RetryState.NON_RETRYABLE_FAILURE), "activity_failure_info"),
    (ActivityError("Activity cancelled", scheduled_event_id=5, started_event_id=12, identity="1@host", activity_type="charge",
                   activity_id="charge", retry_state=RetryState.CANCEL_REQUESTED), "activity_failure_info"),
    (ChildWorkflowError("Child Workflow execution failed", namespace="default", workflow_id="w-child", run_id="r1",
                        workflow_type="Child", initiated_event_id=5, started_event_id=6, retry_state=RetryState.RETRY_POLICY_NOT_SET),
     "child_workflow_execution_failure_info"),
    (ChildWorkflowError("Child Workflow execution failed", namespace="default", workflow_id="w-child", run_id="", workflow_type="Child",
                        initiated_event_id=5, started_event_id=0, retry_state=None), "child_workflow_execution_failure_info"),
    (NexusOperationError("nexus operation completed unsuccessfully", scheduled_event_id=5, endpoint="e", service="s", operation="o",
                         operation_token="t"), "nexus_operation_execution_failure_info"),
    (ValueError("not a number"), "application_failure_info"),
]


@pytest.mark.parametrize(("error", "info"), ERRORS, ids=lambda e: type(e).__name__ if isinstance(e, BaseException) else e)
def test_each_error_round_trips_to_its_class_and_fields_with_its_failure_info(error: BaseException, info: str) -> None:
    read = round_trip(error)
    assert failure_info_of(converter.to_failure(error)) == info
    assert read.failure is not None and read.failure.WhichOneof("failure_info") == info
    if isinstance(error, FailureError):
        assert type(read) is type(error)
        assert fields(read) == fields(error)
    else:  # any other exception is an ApplicationError of its class name, as temporalio's
        assert type(read) is ApplicationError and read.type == "ValueError" and read.message == "not a number"


def test_a_cause_chain_keeps_each_errors_class_fields_and_info() -> None:
    """A parent failed by its child, failed by its activity: the client's cause chain, as temporalio's."""
    app = ApplicationError("card declined", "order-7", type="PaymentDeclined", non_retryable=True)
    activity = ActivityError("Activity task failed", scheduled_event_id=5, started_event_id=6, identity="1@host",
                             activity_type="charge", activity_id="charge", retry_state=RetryState.NON_RETRYABLE_FAILURE)
    child = ChildWorkflowError("Child Workflow execution failed", namespace="default", workflow_id="w-child", run_id="r1",
                               workflow_type="Child", initiated_event_id=5, started_event_id=6, retry_state=RetryState.RETRY_POLICY_NOT_SET)
    activity.__cause__ = app
    child.__cause__ = activity
    read = round_trip(child)
    chain = []
    error: BaseException | None = read
    while error is not None:
        chain.append((type(error), fields(error), error.failure.WhichOneof("failure_info") if isinstance(error, FailureError) and
                      error.failure else None))
        error = error.__cause__
    assert chain == [
        (ChildWorkflowError, fields(child), "child_workflow_execution_failure_info"),
        (ActivityError, fields(activity), "activity_failure_info"),
        (ApplicationError, fields(app), "application_failure_info"),
    ]
    assert read.failure is not None and read.failure.child_workflow_execution_failure_info is not None
    assert read.failure.child_workflow_execution_failure_info.workflow_execution.workflow_id == "w-child"
    assert read.failure.cause is not None and read.failure.cause.activity_failure_info is not None


def test_an_error_read_from_a_record_is_written_back_as_it_was_read() -> None:
    """A workflow failing with the ChildWorkflowError it caught records it with its infos and causes
    unchanged, as temporalio copies the error's failure."""
    recorded = converter.to_failure(converter.failure_converter.child_workflow_error(EventType.ChildWorkflowExecutionTerminated, {
        "workflow_id": "w-child", "run_id": "r1", "workflow_type": "Child", "initiated_event_id": 5, "started_event_id": 6,
    }, converter.payload_converter))
    again = converter.to_failure(converter.from_failure(recorded))
    assert again == recorded


@pytest.mark.parametrize(("event_type", "attrs", "message", "retry_state", "cause"), [
    (EventType.ChildWorkflowExecutionTerminated, {}, "Child Workflow execution terminated", RetryState.NON_RETRYABLE_FAILURE,
     (TerminatedError, "Terminated")),
    (EventType.ChildWorkflowExecutionCanceled, {"details": []}, "Child Workflow execution cancelled", RetryState.NON_RETRYABLE_FAILURE,
     (CancelledError, "Child Workflow execution cancelled")),
    (EventType.ChildWorkflowExecutionTimedOut, {"retry_state": "TIMEOUT"}, "Child Workflow execution timed out", RetryState.TIMEOUT,
     (TimeoutError, "Timed out")),
])
def test_a_child_that_did_not_fail_raises_core_s_child_workflow_error(
    event_type: str, attrs: dict[str, Any], message: str, retry_state: RetryState, cause: tuple[type, str],
) -> None:
    error = converter.failure_converter.child_workflow_error(event_type, {
        "workflow_id": "w-child", "run_id": "r1", "workflow_type": "Child", "initiated_event_id": 5, "started_event_id": 6, **attrs,
    }, converter.payload_converter)
    assert (error.message, error.retry_state, error.namespace, error.workflow_id, error.run_id) == (
        message, retry_state, "default", "w-child", "r1")
    assert (type(error.cause), getattr(error.cause, "message", None)) == cause


def test_a_canceled_activity_raises_activity_error_caused_by_cancelled_error() -> None:
    scheduled = {"activity_type": "charge", "activity_id": "charge"}
    error = converter.failure_converter.activity_error(EventType.ActivityTaskCanceled, scheduled, {
        "scheduled_event_id": 5, "started_event_id": 6, "latest_cancel_requested_event_id": 9,
        "details": converter.payload_converter.to_payloads(["halfway"]), "identity": "1@host",
    }, converter.payload_converter)
    assert (error.message, error.retry_state, error.activity_type, error.scheduled_event_id) == (
        "Activity cancelled", RetryState.CANCEL_REQUESTED, "charge", 5)
    assert isinstance(error.cause, CancelledError) and error.cause.details == ("halfway",)
    assert error.cause.failure is not None and error.cause.failure.canceled_failure_info is not None
    assert error.cause.failure.canceled_failure_info.identity == "1@host"
