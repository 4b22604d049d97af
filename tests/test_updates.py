"""Updates: validated, run in the workflow (awaiting activities), answered to the caller, recorded."""

from __future__ import annotations

import uuid

import pytest

from kadence.audit import audit_history
from kadence.client import Client
from kadence.exceptions import ApplicationError, CommandRejectedError, WorkflowUpdateFailedError
from kadence.local_stack import LocalStack
from kadence.worker import Worker
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, CartWorkflow


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
        assert isinstance(empty.value.__cause__, ApplicationError) and empty.value.__cause__.type == "EmptyItem"
        with pytest.raises(WorkflowUpdateFailedError, match="no update 'remove_item'"):
            await handle.execute_update("remove_item", "apple")
        assert await handle.query(CartWorkflow.size) == 2
        assert await handle.execute_update(CartWorkflow.check_out) == ["apple", "pear"]
        assert await handle.result() == ["apple", "pear"]
        with pytest.raises(CommandRejectedError) as closed:
            await handle.execute_update(CartWorkflow.add_item, "plum")
        assert closed.value.cause == "WORKFLOW_CLOSED"

    report = audit_history(stack.settings)
    assert report.violations == []
    kinds = report.event_types(workflow_id, handle.run_id)
    assert kinds.count("WorkflowExecutionUpdateAdmitted") == 5
    assert (kinds.count("WorkflowExecutionUpdateAccepted"), kinds.count("WorkflowExecutionUpdateCompleted")) == (3, 3)
    assert kinds.count("WorkflowExecutionUpdateRejected") == 2 and "WorkflowTaskFailed" not in kinds
