"""Async activity completion, as temporalio's: an activity calls activity.raise_complete_async()
and another process completes, fails or heartbeats its attempt through
client.get_async_activity_handle, by task token or by ids; the attempt's timeouts still apply."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from kadence import activity, workflow
from kadence.client import Client
from kadence.common import RetryPolicy
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import ActivityError, ApplicationError, AsyncActivityCancelledError, CommandRejectedError
from kadence.worker import Worker
from tests.conftest import audit_of

# What each attempt of ask_approval handed out: (attempt, task token, heartbeat details it resumed from).
ATTEMPTS: dict[str, asyncio.Queue[tuple[int, bytes, tuple[Any, ...]]]] = {}


@activity.defn
async def ask_approval(request: str) -> str:
    info = activity.info()
    ATTEMPTS[request].put_nowait((info.attempt, info.task_token, tuple(info.heartbeat_details)))
    activity.raise_complete_async()


@workflow.defn
class ApprovalByHumanWorkflow:
    @workflow.run
    async def run(self, request: str) -> str:
        return await workflow.execute_activity(
            ask_approval, request, activity_id="approval", start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=2), retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100)),
        )


@workflow.defn
class WithdrawableApprovalWorkflow:
    """Cancels its approval activity when the request is withdrawn; ends when told to."""

    def __init__(self) -> None:
        self.withdrawn = False
        self.finished = False

    @workflow.signal
    def withdraw(self) -> None:
        self.withdrawn = True

    @workflow.signal
    def finish(self) -> None:
        self.finished = True

    @workflow.run
    async def run(self, request: str) -> str:
        approval = workflow.start_activity(ask_approval, request, activity_id="approval", start_to_close_timeout=timedelta(seconds=60))
        await workflow.wait_condition(lambda: self.withdrawn)
        approval.cancel()
        try:
            return await approval
        except ActivityError:  # caused by CancelledError: the approval was withdrawn
            await workflow.wait_condition(lambda: self.finished)
            return "withdrawn"


@pytest.fixture
async def approver(stack: LocalStack) -> AsyncIterator[Client]:
    """Another process's client: the one a human's approval arrives through."""
    other = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn, identity="approval-service")
    yield other
    await other.close()


async def next_attempt(request: str) -> tuple[int, bytes, tuple[Any, ...]]:
    return await asyncio.wait_for(ATTEMPTS[request].get(), 30)


async def test_an_activity_completed_by_its_task_token_from_another_client(
    stack: LocalStack, client: Client, approver: Client, task_queue: str,
) -> None:
    request = f"refund-{uuid.uuid4()}"
    ATTEMPTS[request] = asyncio.Queue()
    async with Worker(client, task_queue=task_queue, workflows=[ApprovalByHumanWorkflow], activities=[ask_approval]):
        handle = await client.start_workflow(ApprovalByHumanWorkflow.run, request, id=request, task_queue=task_queue)
        attempt, token, _ = await next_attempt(request)
        assert attempt == 1 and token
        for _ in range(3):  # heartbeats keep the attempt alive past its 2 s heartbeat timeout
            await approver.get_async_activity_handle(task_token=token).heartbeat("reviewing")
            await asyncio.sleep(1)
        await approver.get_async_activity_handle(task_token=token).complete("approved")
        assert await handle.result() == "approved"
        with pytest.raises(CommandRejectedError, match="workflow execution is Completed") as again:
            await approver.get_async_activity_handle(task_token=token).complete("approved twice")
        assert again.value.cause == "WORKFLOW_CLOSED"
        with pytest.raises(ValueError, match="not a Kadence activity task token"):
            await approver.get_async_activity_handle(task_token=b"forged").complete("x")
        with pytest.raises(ValueError, match="Task token cannot be present with other IDs"):
            approver.get_async_activity_handle(task_token=token, activity_id="approval")

    history = audit_of(stack, request).history(request, handle.run_id or (await handle.describe()).run_id)
    completed = [attrs for kind, attrs in (e["attributes"] for e in history) if kind == "ActivityTaskCompleted"]
    assert [attrs["identity"] for attrs in completed] == ["approval-service"]
    assert not [e for e in history if e["attributes"][0] == "ActivityTaskTimedOut"]


async def test_an_activity_failed_and_completed_by_id_and_timed_out_between(
    stack: LocalStack, client: Client, approver: Client, task_queue: str,
) -> None:
    request = f"loan-{uuid.uuid4()}"
    ATTEMPTS[request] = asyncio.Queue()
    async with Worker(client, task_queue=task_queue, workflows=[ApprovalByHumanWorkflow], activities=[ask_approval]):
        handle = await client.start_workflow(ApprovalByHumanWorkflow.run, request, id=request, task_queue=task_queue)
        by_id = approver.get_async_activity_handle(workflow_id=request, run_id=None, activity_id="approval")
        _, first_token, _ = await next_attempt(request)
        await by_id.fail(ApplicationError("the reviewer is out", type="Unavailable"), last_heartbeat_details=["page 3"])

        attempt, second_token, resumed_from = await next_attempt(request)
        assert (attempt, resumed_from) == (2, ("page 3",))
        with pytest.raises(CommandRejectedError, match=r"stale task token: attempt 1 .* is over \(attempt 2 is current\)") as stale:
            await approver.get_async_activity_handle(task_token=first_token).complete("too late")
        assert stale.value.cause == "ACTIVITY_NOT_FOUND"
        # Nobody answers attempt 2: its heartbeat timeout retries it.
        attempt, _, _ = await next_attempt(request)
        assert attempt == 3
        await by_id.complete("approved on attempt 3")
        assert await handle.result() == "approved on attempt 3"
        with pytest.raises(CommandRejectedError, match="workflow execution is Completed"):
            await by_id.heartbeat()

    history = audit_of(stack, request).history(request, (await handle.describe()).run_id)
    ends = [(kind, attrs.get("retry_state"), attrs.get("identity")) for kind, attrs in (e["attributes"] for e in history)
            if kind in ("ActivityTaskFailed", "ActivityTaskTimedOut", "ActivityTaskCompleted")]
    assert ends == [
        ("ActivityTaskFailed", "IN_PROGRESS", "approval-service"), ("ActivityTaskTimedOut", "IN_PROGRESS", None),
        ("ActivityTaskCompleted", None, "approval-service"),
    ]
    assert second_token != first_token


async def test_a_heartbeat_hears_that_the_workflow_cancelled_the_activity(
    stack: LocalStack, client: Client, approver: Client, task_queue: str,
) -> None:
    request = f"withdrawn-{uuid.uuid4()}"
    ATTEMPTS[request] = asyncio.Queue()
    async with Worker(client, task_queue=task_queue, workflows=[WithdrawableApprovalWorkflow], activities=[ask_approval]):
        handle = await client.start_workflow(WithdrawableApprovalWorkflow.run, request, id=request, task_queue=task_queue)
        _, token, _ = await next_attempt(request)
        approval = approver.get_async_activity_handle(task_token=token)
        await approval.heartbeat("reading")  # nobody asked to cancel yet
        await handle.signal(WithdrawableApprovalWorkflow.withdraw)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        with pytest.raises(AsyncActivityCancelledError):
            while loop.time() < deadline:  # the workflow task that cancels it runs a moment after the signal
                await approval.heartbeat("reading")
                await asyncio.sleep(0.2)
        with pytest.raises(AsyncActivityCancelledError):  # by its ids too
            await approver.get_async_activity_handle(workflow_id=request, run_id=None, activity_id="approval").heartbeat()
        await approval.report_cancellation("withdrawn by the customer")
        await handle.signal(WithdrawableApprovalWorkflow.finish)
        assert await handle.result() == "withdrawn"

    history = audit_of(stack, request).history(request, (await handle.describe()).run_id)
    canceled = [attrs for kind, attrs in (e["attributes"] for e in history) if kind == "ActivityTaskCanceled"]
    assert [attrs["identity"] for attrs in canceled] == ["approval-service"]
