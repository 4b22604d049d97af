"""Updates: validated, run in the workflow (awaiting activities), answered to the caller, recorded."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kadence import workflow
from kadence.client import Client, WorkflowUpdateStage
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import ApplicationError, CommandRejectedError, WorkflowUpdateFailedError
from kadence.worker import Worker
from tests.conftest import audit_of
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, CartWorkflow


@workflow.defn
class GateWorkflow:
    """An update waits at the gate until a signal opens it: accepted long before it completes."""

    def __init__(self) -> None:
        self.open = False
        self.entered: list[str] = []

    @workflow.update
    async def enter(self, name: str) -> str:
        await workflow.wait_condition(lambda: self.open)
        self.entered.append(name)
        return f"welcome {name}"

    @enter.validator
    def validate_enter(self, name: str) -> None:
        if not name:
            raise ApplicationError("a visitor needs a name", type="Nameless")

    @workflow.signal
    def open_gate(self) -> None:
        self.open = True

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: len(self.entered) == 2)
        return self.entered


@pytest.mark.parametrize("cache", [1000, 0], ids=["cached", "replayed-every-task"])
async def test_updates_are_validated_run_answered_and_recorded(stack: LocalStack, client: Client, task_queue: str, cache: int) -> None:
    workflow_id = f"cart-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES, max_cached_workflows=cache):
        handle = await client.start_workflow(CartWorkflow.run, id=workflow_id, task_queue=task_queue)
        assert await handle.execute_update(CartWorkflow.add_item, "apple", id="apple-once") == 1
        assert await handle.execute_update(CartWorkflow.add_item, "apple", id="apple-once") == 1  # the same update: runs once
        assert await handle.execute_update("add_item", "pear") == 2
        with pytest.raises(WorkflowUpdateFailedError) as empty:
            await handle.execute_update(CartWorkflow.add_item, "")
        assert isinstance(empty.value.cause, ApplicationError) and empty.value.cause.type == "EmptyItem"
        with pytest.raises(WorkflowUpdateFailedError) as unknown:
            await handle.execute_update("remove_item", "apple")
        assert "no update 'remove_item'" in str(unknown.value.cause)
        assert await handle.query(CartWorkflow.size) == 2
        assert await handle.execute_update(CartWorkflow.check_out) == ["apple", "pear"]
        assert await handle.result() == ["apple", "pear"]
        with pytest.raises(CommandRejectedError) as closed:
            await handle.execute_update(CartWorkflow.add_item, "plum")
        assert closed.value.cause == "WORKFLOW_CLOSED"

    report = audit_of(stack, workflow_id)  # the session stack's whole log is audited at its end (conftest)
    assert report.violations == []
    kinds = report.event_types(workflow_id, handle.result_run_id)
    assert kinds.count("WorkflowExecutionUpdateAdmitted") == 5
    assert (kinds.count("WorkflowExecutionUpdateAccepted"), kinds.count("WorkflowExecutionUpdateCompleted")) == (3, 3)
    assert kinds.count("WorkflowExecutionUpdateRejected") == 2 and "WorkflowTaskFailed" not in kinds


async def test_start_update_returns_a_handle_at_the_stage_awaited(client: Client, task_queue: str) -> None:
    workflow_id = f"gate-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=[GateWorkflow]):
        handle = await client.start_workflow(GateWorkflow.run, id=workflow_id, task_queue=task_queue)
        with pytest.raises(ValueError, match="ADMITTED wait stage not supported"):
            await handle.start_update(GateWorkflow.enter, "ann", wait_for_stage=WorkflowUpdateStage.ADMITTED)

        ann = await handle.start_update(GateWorkflow.enter, "ann", id="ann", wait_for_stage=WorkflowUpdateStage.ACCEPTED)
        assert (ann.id, ann.workflow_id, ann.workflow_run_id) == ("ann", workflow_id, handle.result_run_id)
        waiting = asyncio.ensure_future(ann.result())
        await asyncio.sleep(0.5)
        assert not waiting.done()  # accepted, not completed: the gate is shut

        nameless = await handle.start_update(GateWorkflow.enter, "", wait_for_stage=WorkflowUpdateStage.ACCEPTED)
        with pytest.raises(WorkflowUpdateFailedError) as rejected:  # a rejection is the handle's result
            await nameless.result()
        assert isinstance(rejected.value.__cause__, ApplicationError) and rejected.value.__cause__.type == "Nameless"

        other = client.get_workflow_handle(workflow_id)  # another caller, knowing only the ids
        by_name = other.get_update_handle("ann")
        typed = other.get_update_handle_for(GateWorkflow.enter, "ann")
        await handle.signal(GateWorkflow.open_gate)
        assert await waiting == "welcome ann"
        assert await by_name.result() == "welcome ann" and await typed.result() == "welcome ann"

        bob = await handle.start_update(GateWorkflow.enter, "bob", id="bob", wait_for_stage=WorkflowUpdateStage.COMPLETED)
        assert await bob.result() == "welcome bob"
        assert await handle.result() == ["ann", "bob"]
        with pytest.raises(WorkflowUpdateFailedError) as outlived:
            await handle.get_update_handle("never-sent").result()
        assert "closed before update never-sent" in str(outlived.value.cause)
