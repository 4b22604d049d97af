"""Which run a workflow handle's calls reach (as temporalio): the handle start_workflow returns
targets the workflow id's current run, so it keeps working after a continue-as-new."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kadence import workflow
from kadence.client import Client, WorkflowHandle
from kadence.exceptions import CancelledError, CommandRejectedError, TerminatedError, WorkflowFailureError
from kadence.worker import Worker


@workflow.defn
class RelayWorkflow:
    """Continues as new once, then serves signals, queries and updates until told to finish."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.finished = False

    @workflow.run
    async def run(self, generation: int) -> list[str]:
        if generation == 0:
            workflow.continue_as_new(1)
        await workflow.wait_condition(lambda: self.finished)
        return [f"generation {generation}", *self.messages]

    @workflow.signal
    def message(self, text: str) -> None:
        self.messages.append(text)

    @workflow.signal
    def finish(self) -> None:
        self.finished = True

    @workflow.query
    def received(self) -> list[str]:
        return self.messages

    @workflow.update
    def add(self, text: str) -> int:
        self.messages.append(text)
        return len(self.messages)


async def _continued(handle: WorkflowHandle) -> str:
    """The run the first one continued as, once the read model has it."""
    for _ in range(200):
        current = await handle.describe()
        if current.run_id != handle.result_run_id:
            return current.run_id
        await asyncio.sleep(0.05)
    raise AssertionError(f"{handle.id} did not continue as new")


async def test_a_started_handle_reaches_the_run_a_continue_as_new_started(client: Client, task_queue: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[RelayWorkflow]):
        handle = await client.start_workflow(RelayWorkflow.run, 0, id=f"relay-{uuid.uuid4()}", task_queue=task_queue)
        first = handle.result_run_id
        assert handle.run_id is None and first is not None and handle.first_execution_run_id == first
        second = await _continued(handle)

        await handle.signal(RelayWorkflow.message, "signalled")
        assert await handle.execute_update(RelayWorkflow.add, "updated") == 2
        assert await handle.query(RelayWorkflow.received) == ["signalled", "updated"]
        await handle.signal(RelayWorkflow.finish)
        assert await handle.result() == ["generation 1", "signalled", "updated"]
        with pytest.raises(CommandRejectedError, match="not the current run"):  # a handle pinned to the first run
            await client.get_workflow_handle(handle.id, run_id=first).signal(RelayWorkflow.message, "late")
        assert (await client.get_workflow_handle(handle.id, run_id=second).describe()).run_id == second

        cancelled = await client.start_workflow(RelayWorkflow.run, 0, id=f"relay-{uuid.uuid4()}", task_queue=task_queue)
        await _continued(cancelled)
        await cancelled.cancel()  # reaches the second run, within the chain the first started
        with pytest.raises(WorkflowFailureError) as failure:
            await cancelled.result()
        assert isinstance(failure.value.cause, CancelledError)

        terminated = await client.start_workflow(RelayWorkflow.run, 0, id=f"relay-{uuid.uuid4()}", task_queue=task_queue)
        await _continued(terminated)
        chain = client.get_workflow_handle(terminated.id, first_execution_run_id=terminated.result_run_id)
        await chain.terminate(reason="enough")
        with pytest.raises(WorkflowFailureError) as failure:
            await terminated.result()
        assert isinstance(failure.value.cause, TerminatedError)
        with pytest.raises(CommandRejectedError, match="TERMINATED|Terminated"):  # the chain has ended
            await chain.cancel()
