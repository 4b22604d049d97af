"""Standalone activities, in the style of temporalio's hello_standalone_activity sample: a client
executes an activity with no workflow (`execute_activity`), starts one and waits on its handle,
lists and counts them by task queue; and what any activity has holds for them: retries, a failure
for good, a cancellation heard by a heartbeating attempt, termination; `activity.info()` names no
workflow. Their ids are of their own space, and listing workflows leaves them out
(docs/decisions/0007-standalone-activities.md)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import timedelta
from typing import Any

import pytest

from kadence import activity
from kadence.client import ActivityExecutionStatus, ActivityFailureError, Client
from kadence.common import RetryPolicy
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import ApplicationError, CancelledError, CommandRejectedError, TerminatedError, TimeoutError, TimeoutType
from kadence.worker import Worker
from tests.conftest import wait_for_event
from tests.workflows import EchoWorkflow, echo

FAST = RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=3)


@dataclasses.dataclass
class ComposeGreetingInput:
    greeting: str
    name: str


@activity.defn
async def compose_greeting(input: ComposeGreetingInput) -> str:
    return f"{input.greeting}, {input.name}!"


@activity.defn
async def describe_itself() -> dict[str, Any]:
    info = activity.info()
    return {"workflow": [info.workflow_id, info.workflow_run_id, info.workflow_type], "run_id": info.activity_run_id,
            "attempt": info.attempt, "id": info.activity_id}


@activity.defn
async def flaky(times_to_fail: int) -> int:
    if activity.info().attempt <= times_to_fail:
        raise ApplicationError(f"attempt {activity.info().attempt} fails")
    return activity.info().attempt


@activity.defn
async def declined() -> None:
    raise ApplicationError("card declined", non_retryable=True)


@activity.defn
async def oversleep() -> None:
    await asyncio.sleep(30)


@activity.defn
async def wait_to_be_cancelled() -> str:
    while True:
        activity.heartbeat()
        await asyncio.sleep(0.1)


ACTIVITIES = [compose_greeting, describe_itself, flaky, declined, oversleep, wait_to_be_cancelled, echo]


async def test_a_client_executes_and_starts_activities_without_a_workflow_and_lists_them(client: Client, task_queue: str) -> None:
    prefix = f"standalone-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=task_queue, activities=ACTIVITIES, workflows=[EchoWorkflow]):
        greeting = await client.execute_activity(
            compose_greeting, ComposeGreetingInput("Hello", "World"), id=f"{prefix}-greet", task_queue=task_queue,
            start_to_close_timeout=timedelta(seconds=10),
        )
        handle = await client.start_activity(describe_itself, id=f"{prefix}-info", task_queue=task_queue,
                                             start_to_close_timeout=timedelta(seconds=10))
        info = await handle.result()
        retried = await client.execute_activity(flaky, 2, id=f"{prefix}-flaky", task_queue=task_queue,
                                                start_to_close_timeout=timedelta(seconds=10), retry_policy=FAST)
        # An activity id is not a workflow id: a workflow may have the same one.
        assert await client.execute_workflow(EchoWorkflow.run, "same id", id=f"{prefix}-greet", task_queue=task_queue) == "same id"
        described = await client.get_activity_handle(f"{prefix}-info").describe()

    assert greeting == "Hello, World!"
    assert info == {"workflow": [None, None, None], "run_id": handle.run_id, "attempt": 1, "id": f"{prefix}-info"}
    assert retried == 3  # the third attempt, after two failed and were retried
    assert (described.activity_id, described.activity_type, described.status) == (
        f"{prefix}-info", "describe_itself", ActivityExecutionStatus.COMPLETED)
    assert described.activity_run_id == handle.run_id and described.execution_duration is not None

    listed = {a.activity_id: (a.activity_type, a.status) async for a in client.list_activities(f"TaskQueue = '{task_queue}'")}
    assert listed == {
        f"{prefix}-greet": ("compose_greeting", ActivityExecutionStatus.COMPLETED),
        f"{prefix}-info": ("describe_itself", ActivityExecutionStatus.COMPLETED),
        f"{prefix}-flaky": ("flaky", ActivityExecutionStatus.COMPLETED),
    }
    assert (await client.count_activities(f"TaskQueue = '{task_queue}' AND ActivityType = 'flaky'")).count == 1
    # Listing workflows leaves the activities out: only the workflow of the shared id is there.
    assert [w.id async for w in client.list_workflows(f"TaskQueue = '{task_queue}'")] == [f"{prefix}-greet"]


async def test_a_standalone_activity_that_fails_is_cancelled_or_terminated_raises_activity_failure_error(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    prefix = f"standalone-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=task_queue, activities=ACTIVITIES):
        with pytest.raises(ActivityFailureError) as failed:
            await client.execute_activity(declined, id=f"{prefix}-declined", task_queue=task_queue,
                                          start_to_close_timeout=timedelta(seconds=10), retry_policy=FAST)
        with pytest.raises(ActivityFailureError) as timed_out:
            await client.execute_activity(oversleep, id=f"{prefix}-overslept", task_queue=task_queue,
                                          start_to_close_timeout=timedelta(seconds=1), retry_policy=RetryPolicy(maximum_attempts=1))
        waiting = await client.start_activity(wait_to_be_cancelled, id=f"{prefix}-cancel", task_queue=task_queue,
                                              start_to_close_timeout=timedelta(seconds=60), heartbeat_timeout=timedelta(seconds=5))
        await wait_for_event(stack, f"kadence-activity:{waiting.id}", "ActivityTaskStarted", 30)
        await waiting.cancel(reason="no longer needed")
        with pytest.raises(ActivityFailureError) as cancelled:
            await waiting.result()
    unpolled = await client.start_activity("nobody_runs_this", id=f"{prefix}-stuck", task_queue=f"{task_queue}-unpolled",
                                           start_to_close_timeout=timedelta(seconds=60))
    await unpolled.terminate(reason="stuck")
    with pytest.raises(ActivityFailureError) as terminated:
        await unpolled.result()

    assert isinstance(failed.value.cause, ApplicationError) and failed.value.cause.message == "card declined"
    assert isinstance(timed_out.value.cause, TimeoutError) and timed_out.value.cause.type == TimeoutType.START_TO_CLOSE
    assert isinstance(cancelled.value.cause, CancelledError)
    assert isinstance(terminated.value.cause, TerminatedError)
    statuses = {a.activity_id: a.status async for a in client.list_activities(f"ActivityId STARTS_WITH '{prefix}'")}
    assert statuses == {f"{prefix}-declined": ActivityExecutionStatus.FAILED, f"{prefix}-cancel": ActivityExecutionStatus.CANCELED,
                        f"{prefix}-stuck": ActivityExecutionStatus.TERMINATED, f"{prefix}-overslept": ActivityExecutionStatus.TIMED_OUT}


async def test_what_a_standalone_activity_cannot_take_is_refused_with_the_reason(client: Client, task_queue: str) -> None:
    activity_id = f"standalone-{uuid.uuid4().hex[:8]}"
    handle = await client.start_activity("nobody_runs_this", id=activity_id, task_queue=f"{task_queue}-unpolled",
                                         start_to_close_timeout=timedelta(seconds=60))
    try:
        with pytest.raises(CommandRejectedError, match="does not apply to a standalone activity"):
            await client.get_workflow_handle(f"kadence-activity:{activity_id}").signal("poke")
        with pytest.raises(CommandRejectedError, match="reserved for standalone activities"):
            await client.start_workflow(EchoWorkflow.run, "x", id=f"kadence-activity:{activity_id}-2", task_queue=task_queue)
        with pytest.raises(CommandRejectedError, match="set start_to_close_timeout or schedule_to_close_timeout"):
            await client.start_activity(echo, "x", id=f"{activity_id}-untimed", task_queue=task_queue)
    finally:
        await handle.terminate()
