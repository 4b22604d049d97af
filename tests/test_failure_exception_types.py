"""@workflow.defn(failure_exception_types=...) and Worker(workflow_failure_exception_types=...), as
temporalio's (issue 49, resource_pool): an exception of those types, from the run or a signal
handler, fails the workflow rather than its workflow task, which would be retried."""

from __future__ import annotations

import uuid

import pytest

from kadence import workflow
from kadence.client import Client, WorkflowFailureError
from kadence.exceptions import ApplicationError
from kadence.worker import Worker


class PoolExhausted(Exception):
    pass


@workflow.defn(failure_exception_types=[PoolExhausted])
class PoolWorkflow:
    def __init__(self) -> None:
        self.released = False

    @workflow.run
    async def run(self, exhausted: bool) -> str:
        if exhausted:
            raise PoolExhausted("no resource left in the pool")
        await workflow.wait_condition(lambda: self.released)
        return "released"

    @workflow.signal
    def release(self, broken: bool) -> None:
        if broken:
            raise PoolExhausted("the pool broke while releasing")
        self.released = True


@workflow.defn
class LookupWorkflow:
    @workflow.run
    async def run(self, key: str) -> str:
        return {"known": "value"}[key]


async def failure_of(handle_result: object) -> ApplicationError:
    with pytest.raises(WorkflowFailureError) as failed:
        await handle_result  # type: ignore[misc]
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    return cause


async def test_an_exception_of_the_workflow_s_failure_types_fails_it(client: Client, task_queue: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[PoolWorkflow]):
        raised = await failure_of(client.execute_workflow(PoolWorkflow.run, True, id=f"pool-{uuid.uuid4()}", task_queue=task_queue))
        handle = await client.start_workflow(PoolWorkflow.run, False, id=f"pool-{uuid.uuid4()}", task_queue=task_queue)
        await handle.signal(PoolWorkflow.release, True)
        from_signal = await failure_of(handle.result())
    assert raised.type == "PoolExhausted" and "no resource left in the pool" in str(raised)
    assert from_signal.type == "PoolExhausted" and "the pool broke while releasing" in str(from_signal)


async def test_a_worker_s_failure_types_fail_any_of_its_workflows(client: Client, task_queue: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[LookupWorkflow], workflow_failure_exception_types=[KeyError]):
        cause = await failure_of(client.execute_workflow(LookupWorkflow.run, "unknown", id=f"lookup-{uuid.uuid4()}", task_queue=task_queue))
    assert cause.type == "KeyError"
