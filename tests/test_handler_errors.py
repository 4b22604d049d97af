"""Errors of update and signal handlers surface (as temporalio): none is left in an unawaited task."""

from __future__ import annotations

import uuid

import pytest

from kadence import workflow
from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import ApplicationError, WorkflowFailureError, WorkflowUpdateFailedError
from kadence.worker import Worker
from tests.conftest import wait_for_event


class Unencodable:
    """No payload converter can encode this."""


@workflow.defn
class FaultyHandlersWorkflow:
    def __init__(self) -> None:
        self.done = False
        self.total = 0

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.done)
        return "done"

    @workflow.update
    async def unencodable(self) -> Unencodable:
        return Unencodable()

    @workflow.update
    def count(self) -> int:
        return 1

    @workflow.signal
    async def refuse(self, why: str) -> None:
        raise ApplicationError(why, type="Refused")

    @workflow.signal
    async def crash(self) -> None:
        raise ValueError("a bug in the signal handler")

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    @workflow.signal
    def add(self, amount: int) -> None:
        self.total += amount

    @workflow.query
    def sum(self) -> int:
        return self.total


async def test_an_update_whose_result_cannot_be_encoded_fails_and_the_workflow_goes_on(
    client: Client, task_queue: str, caplog: pytest.LogCaptureFixture,
) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[FaultyHandlersWorkflow]):
        handle = await client.start_workflow(FaultyHandlersWorkflow.run, id=f"faulty-{uuid.uuid4()}", task_queue=task_queue)
        with pytest.raises(WorkflowUpdateFailedError) as failed:
            await handle.execute_update(FaultyHandlersWorkflow.unencodable)
        assert "Unencodable" in str(failed.value.__cause__)
        assert await handle.execute_update(FaultyHandlersWorkflow.count) == 1
        await handle.signal(FaultyHandlersWorkflow.add, "not a number")  # as temporalio: logged and dropped
        await handle.signal(FaultyHandlersWorkflow.add, 2)
        assert await handle.query(FaultyHandlersWorkflow.sum) == 2
        assert any("event=signal_dropped" in r.getMessage() and handle.id in r.getMessage() for r in caplog.records)
        await handle.signal(FaultyHandlersWorkflow.finish)
        assert await handle.result() == "done"


async def test_a_signal_handler_failure_fails_the_workflow_and_a_bug_in_one_fails_the_task(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[FaultyHandlersWorkflow]):
        refused = await client.start_workflow(FaultyHandlersWorkflow.run, id=f"faulty-{uuid.uuid4()}", task_queue=task_queue)
        await refused.signal(FaultyHandlersWorkflow.refuse, "not today")
        with pytest.raises(WorkflowFailureError) as failure:
            await refused.result()
        assert isinstance(failure.value.cause, ApplicationError) and failure.value.cause.type == "Refused"

        crashed = await client.start_workflow(FaultyHandlersWorkflow.run, id=f"faulty-{uuid.uuid4()}", task_queue=task_queue)
        await crashed.signal(FaultyHandlersWorkflow.crash)
        await wait_for_event(stack, crashed.id, "WorkflowTaskFailed", 30)
        events = (await crashed.fetch_history()).events
        failed = [attrs for kind, attrs in (e["attributes"] for e in events) if kind == "WorkflowTaskFailed"]
        assert "a bug in the signal handler" in failed[0]["failure"]["message"]
        await crashed.terminate(reason="the test is over")
