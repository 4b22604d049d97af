"""Errors as temporalio's: what they carry across the engine, how they are logged, how an
activity's ApplicationError(next_retry_delay=...) sets the backoff before its next attempt."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from datetime import timedelta

import pytest

from kadence import activity, workflow
from kadence.client import Client
from kadence.common import RetryPolicy
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import (
    ActivityError,
    ApplicationError,
    ApplicationErrorCategory,
    CancelledError,
    ClientClosedError,
    FailureError,
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
    assert activity_error.failure is not None and activity_error.failure["activity_failure_info"]["activity_type"] == "out_of_stock"
    error = activity_error.cause
    assert isinstance(error, ApplicationError)
    assert (error.type, error.details, error.non_retryable) == ("OutOfStock", ({"item": "plum"},), True)
    assert error.category == ApplicationErrorCategory.BENIGN and error.next_retry_delay is None
    assert str(error) == "OutOfStock: plum is out of stock" and error.message == "plum is out of stock"
    assert error.failure is not None and (error.failure["type"], error.failure["category"]) == ("OutOfStock", "BENIGN")
    logged = [r for r in caplog.records if r.getMessage().startswith("event=activity_failed ")]
    assert logged and all(r.levelno == logging.DEBUG for r in logged)


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
