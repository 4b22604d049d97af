"""Errors as temporalio's: what they carry across the engine, how they are logged, how an
activity's ApplicationError(next_retry_delay=...) sets the backoff before its next attempt."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from datetime import timedelta
from typing import NoReturn

import pytest

from kadence import activity, workflow
from kadence.api.failure.v1 import ApplicationFailureInfo, Failure, TimeoutFailureInfo
from kadence.client import Client
from kadence.common import RetryPolicy
from kadence.converter import DataConverter
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import (
    ActivityError,
    ApplicationError,
    ApplicationErrorCategory,
    CancelledError,
    ChildWorkflowError,
    ClientClosedError,
    FailureError,
    RetryState,
    TemporalError,
    TerminatedError,
    TimeoutError,
    TimeoutType,
    WorkflowFailureError,
)
from kadence.worker import Worker

POLICY_BACKOFF = timedelta(minutes=5)  # what a retry would wait without next_retry_delay


@activity.defn
async def busy_once(started_at: float) -> float:
    """Busy on its first attempt, asking for the next one 300 ms later; how long the attempts took."""
    if activity.info().attempt == 1:
        raise ApplicationError("busy, try again soon", type="Busy", next_retry_delay=timedelta(milliseconds=300))
    return time.time() - started_at


@activity.defn
async def out_of_stock(item: str) -> None:
    raise ApplicationError(
        f"{item} is out of stock", {"item": item}, type="OutOfStock", non_retryable=True, category=ApplicationErrorCategory.BENIGN,
    )


@workflow.defn
class RetryDelayWorkflow:
    @workflow.run
    async def run(self, started_at: float) -> float:
        return await workflow.execute_activity(
            busy_once, started_at, start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=POLICY_BACKOFF, maximum_attempts=3),
        )


@workflow.defn
class OutOfStockWorkflow:
    @workflow.run
    async def run(self, item: str) -> None:
        await workflow.execute_activity(out_of_stock, item, start_to_close_timeout=timedelta(seconds=10))


async def test_next_retry_delay_replaces_the_retry_policys_backoff(client: Client, task_queue: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[RetryDelayWorkflow], activities=[busy_once]):
        handle = await client.start_workflow(RetryDelayWorkflow.run, time.time(), id=f"busy-{uuid.uuid4()}", task_queue=task_queue)
        try:
            took_s = await asyncio.wait_for(handle.result(), 30)
        except asyncio.TimeoutError:
            pytest.fail("no second attempt within 30 s: the retry policy's 5-minute backoff, not the 300 ms asked, held it")
    assert took_s >= 0.3


async def test_a_failure_reaches_the_caller_as_recorded_and_benign_ones_log_at_debug(
    client: Client, task_queue: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="kadence.worker")
    async with Worker(client, task_queue=task_queue, workflows=[OutOfStockWorkflow], activities=[out_of_stock]):
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(OutOfStockWorkflow.run, "plum", id=f"stock-{uuid.uuid4()}", task_queue=task_queue)

    activity_error = failed.value.cause
    assert isinstance(activity_error, ActivityError) and activity_error.identity == client.identity
    assert activity_error.failure is not None and activity_error.failure.activity_failure_info is not None
    assert activity_error.failure.activity_failure_info.activity_type.name == "out_of_stock"
    error = activity_error.cause
    assert isinstance(error, ApplicationError)
    assert (error.type, error.details, error.non_retryable) == ("OutOfStock", ({"item": "plum"},), True)
    assert error.category == ApplicationErrorCategory.BENIGN and error.next_retry_delay is None
    assert str(error) == "OutOfStock: plum is out of stock" and error.message == "plum is out of stock"
    assert error.failure is not None and error.failure.application_failure_info is not None
    info = error.failure.application_failure_info
    assert (info.type, info.category, info.non_retryable) == ("OutOfStock", ApplicationErrorCategory.BENIGN, True)
    logged = [r for r in caplog.records if r.getMessage().startswith("event=activity_failed ")]
    assert logged and all(r.levelno == logging.DEBUG for r in logged)


@activity.defn
async def compose_greeting(name: str) -> NoReturn:
    raise RuntimeError(f"Greeting exception: Hello, {name}!")


@workflow.defn
class FailingGreetingWorkflow:
    """temporalio's hello_exception sample's workflow: the activity always raises, and is tried twice."""

    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(
            compose_greeting, name, start_to_close_timeout=timedelta(seconds=10), retry_policy=RetryPolicy(maximum_attempts=2),
        )


@workflow.defn
class FailureReadingWorkflow:
    """Reads the ActivityError's failure in workflow code, then fails with what it read."""

    @workflow.run
    async def run(self, name: str) -> str:
        try:
            return await workflow.execute_child_workflow(FailingGreetingWorkflow.run, name, id=f"{workflow.info().workflow_id}-child")
        except ChildWorkflowError as err:
            assert err.failure is not None and err.failure.child_workflow_execution_failure_info is not None
            assert isinstance(err.cause, ActivityError) and err.cause.failure is not None
            activity_info = err.cause.failure.activity_failure_info
            assert activity_info is not None and err.cause.failure.cause is not None
            seen = {
                "child": err.failure.child_workflow_execution_failure_info.workflow_type.name,
                "activity": activity_info.activity_type.name, "retry_state": activity_info.retry_state,
                "error_type": err.cause.failure.cause.application_failure_info.type
                if err.cause.failure.cause.application_failure_info else None,
            }
            raise ApplicationError("the greeting failed", seen, type="GreetingFailed") from err


def append_temporal_stack(exc: BaseException | None) -> None:
    """As temporalio's hello_exception sample: each failure's recorded stack trace appended to its message."""
    while exc:
        if (
            isinstance(exc, FailureError) and exc.failure and exc.failure.stack_trace and len(exc.args) == 1
            and "\nStack:\n" not in exc.args[0]
        ):
            exc.args = (f"{exc}\nStack:\n{exc.failure.stack_trace.rstrip()}",)
        exc = exc.__cause__


async def test_a_failure_carries_temporalios_failure_message_with_its_cause_chain(client: Client, task_queue: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[FailingGreetingWorkflow], activities=[compose_greeting]):
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(FailingGreetingWorkflow.run, "World", id=f"greeting-{uuid.uuid4()}", task_queue=task_queue)

    activity_error = failed.value.cause
    assert isinstance(activity_error, ActivityError) and activity_error.failure is not None
    assert activity_error.failure.WhichOneof("failure_info") == "activity_failure_info"
    activity_info = activity_error.failure.activity_failure_info
    assert activity_info is not None and activity_info.activity_type.name == "compose_greeting"
    assert activity_info.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED and activity_info.identity == client.identity
    error = activity_error.cause
    assert isinstance(error, ApplicationError) and error.failure is not None
    assert error.failure.application_failure_info is not None and error.failure.application_failure_info.type == "RuntimeError"
    assert error.failure.message == "Greeting exception: Hello, World!" and error.failure.source == "kadence-python-sdk"
    assert "in compose_greeting" in error.failure.stack_trace  # the activity's frame, recorded where it raised
    assert activity_error.failure.cause == error.failure and not error.failure.HasField("cause")

    append_temporal_stack(failed.value)
    assert str(error).startswith("RuntimeError: Greeting exception: Hello, World!\nStack:\nTraceback")
    assert "in compose_greeting" in str(error)


async def test_workflow_code_reads_the_failure_of_a_child_and_its_activity(client: Client, task_queue: str) -> None:
    async with Worker(
        client, task_queue=task_queue, workflows=[FailureReadingWorkflow, FailingGreetingWorkflow], activities=[compose_greeting],
    ):
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(FailureReadingWorkflow.run, "World", id=f"reading-{uuid.uuid4()}", task_queue=task_queue)

    error = failed.value.cause
    assert isinstance(error, ApplicationError) and error.type == "GreetingFailed"
    assert error.details == ({
        "child": "FailingGreetingWorkflow", "activity": "compose_greeting", "retry_state": "MAXIMUM_ATTEMPTS_REACHED",
        "error_type": "RuntimeError",
    },)
    chain = []
    failure = error.failure
    while failure is not None:
        info = failure.WhichOneof("failure_info")
        chain.append((info, failure.application_failure_info.type if failure.application_failure_info else ""))
        failure = failure.cause
    # The parent's record keeps the child's error with its child workflow info, as temporalio's.
    assert chain == [
        ("application_failure_info", "GreetingFailed"), ("child_workflow_execution_failure_info", ""),
        ("activity_failure_info", ""), ("application_failure_info", "RuntimeError"),
    ]


def test_failure_reads_as_temporalios_protobuf_message() -> None:
    converter = DataConverter.default
    try:
        raise ApplicationError("late", {"order": 7}, type="Late", next_retry_delay=timedelta(seconds=3)) from KeyError("order 7")
    except ApplicationError as raised:
        recorded = converter.to_failure(raised)
    error = converter.from_failure(recorded)
    failure = error.failure
    assert isinstance(failure, Failure) and failure.WhichOneof("failure_info") == "application_failure_info"
    info = failure.application_failure_info
    assert info is not None and (info.type, info.next_retry_delay, info.category) == ("Late", timedelta(seconds=3), 0)
    assert converter.payload_converter.from_payloads(info.details.payloads) == [{"order": 7}]
    assert failure.HasField("cause") and not failure.HasField("timeout_failure_info") and failure.encoded_attributes is None
    assert failure.cause is not None and failure.cause.application_failure_info is not None
    assert failure.cause.application_failure_info.type == "KeyError" and failure.cause.stack_trace
    timeout = converter.from_failure(converter.to_failure(TimeoutError("late", type=TimeoutType.HEARTBEAT, last_heartbeat_details=[7])))
    assert timeout.failure is not None and timeout.failure.timeout_failure_info is not None
    assert timeout.failure.timeout_failure_info.timeout_type == TimeoutType.HEARTBEAT
    with pytest.raises(ValueError, match="no message field 'message'"):
        failure.HasField("message")
    with pytest.raises(ValueError, match="at most one failure info"):
        Failure(application_failure_info=ApplicationFailureInfo(), timeout_failure_info=TimeoutFailureInfo())


def test_exception_constructors_take_temporalios_arguments() -> None:
    assert issubclass(FailureError, TemporalError)
    assert ApplicationError("m").failure is None and str(ApplicationError("m", type="T")) == "T: m"
    assert CancelledError().message == "Cancelled" and CancelledError("why", 1, 2).details == (1, 2)
    assert TerminatedError("reason", "detail").details == ("detail",)
    timeout = TimeoutError("late", type=TimeoutType.HEARTBEAT, last_heartbeat_details=[7])
    assert timeout.last_heartbeat_details == [7] and timeout.type == TimeoutType.HEARTBEAT
    error = ActivityError("failed", scheduled_event_id=5, started_event_id=6, identity="w", activity_type="a",
                          activity_id="1", retry_state=None)
    error.__cause__ = ApplicationError("root")
    assert error.cause is error.__cause__ and error.identity == "w"


async def test_a_closed_clients_handles_raise_instead_of_waiting(stack: LocalStack) -> None:
    closed = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
    handle = closed.get_workflow_handle(f"closed-client-{uuid.uuid4()}")
    await closed.close()
    for call in (handle.terminate(reason="late"), handle.signal("s"), handle.result(), handle.describe()):
        with pytest.raises(ClientClosedError, match="this Client was closed"):
            await asyncio.wait_for(call, 10)
