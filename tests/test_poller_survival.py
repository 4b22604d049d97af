"""No task stops a worker's pollers: a task the worker cannot handle fails with the reason, in the
log and the history (as temporalio), and the tasks after it are taken."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from kadence import activity, workflow
from kadence.client import Client
from kadence.common import RetryPolicy
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import ActivityError, WorkflowFailureError
from kadence.worker import Worker
from tests.conftest import wait_for_event


class Unencodable:
    """No payload converter can encode this."""


@activity.defn
async def make_unencodable() -> Unencodable:
    return Unencodable()


@workflow.defn
class CountingWorkflow:
    @workflow.run
    async def run(self, count: int) -> int:
        return count + 1


@workflow.defn
class UnencodableActivityWorkflow:
    @workflow.run
    async def run(self) -> str:
        await workflow.execute_activity(
            make_unencodable, start_to_close_timeout=timedelta(seconds=60), retry_policy=RetryPolicy(maximum_attempts=1),
        )
        return "unreachable"


async def test_an_input_that_cannot_be_decoded_fails_its_workflow_task_and_the_poller_goes_on(
    stack: LocalStack, client: Client, task_queue: str, caplog: pytest.LogCaptureFixture,
) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[CountingWorkflow]) as worker:
        bad = await client.start_workflow("CountingWorkflow", "not a number", id=f"counting-{uuid.uuid4()}", task_queue=task_queue)
        await wait_for_event(stack, bad.id, "WorkflowTaskFailed", 30)
        events = (await bad.fetch_history()).events
        failed = next(attrs for kind, attrs in (e["attributes"] for e in events) if kind == "WorkflowTaskFailed")
        assert "failed decoding the arguments of workflow CountingWorkflow" in failed["failure"]["message"]
        assert "Expected int, was str" in failed["failure"]["message"]
        assert any("event=workflow_task_failed" in r.getMessage() and bad.id in r.getMessage() for r in caplog.records)

        good = await client.start_workflow(CountingWorkflow.run, 41, id=f"counting-{uuid.uuid4()}", task_queue=task_queue)
        assert await good.result() == 42
        assert worker._running is not None and not worker._running.done()
        await bad.terminate(reason="the test is over")


async def test_an_activity_result_that_cannot_be_encoded_fails_the_attempt(client: Client, task_queue: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[UnencodableActivityWorkflow], activities=[make_unencodable]):
        handle = await client.start_workflow(
            UnencodableActivityWorkflow.run, id=f"unencodable-{uuid.uuid4()}", task_queue=task_queue,
            execution_timeout=timedelta(seconds=30),
        )
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
    assert isinstance(failure.value.cause, ActivityError)
    assert "Unencodable" in str(failure.value.cause.cause)
