"""A reset to a point that leaves a child workflow pending, end to end (as Temporal's
allowResetWithPendingChildren): the child keeps running through the old run's termination, and its
result, addressed to the old run, completes the new one; the audit finds nothing wrong and the new
run's history replays offline."""

from __future__ import annotations

import asyncio
import uuid

from kadence import workflow
from kadence.client import Client, ResetType
from kadence.dev.local_stack import LocalStack
from kadence.worker import Replayer, Worker
from tests.conftest import audit_of, wait_for_event


@workflow.defn
class WaitingChild:
    def __init__(self) -> None:
        self.released = False

    @workflow.signal
    def release(self) -> None:
        self.released = True

    @workflow.run
    async def run(self, name: str) -> str:
        await workflow.wait_condition(lambda: self.released)
        return f"{name} done"


@workflow.defn
class ParentOfAWaitingChild:
    @workflow.run
    async def run(self) -> str:
        child = await workflow.start_child_workflow(WaitingChild.run, "invoice", id=f"{workflow.info().workflow_id}-child")
        return await child


async def test_a_reset_leaving_a_child_running_hands_its_result_to_the_new_run(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    workflow_id = f"reset-child-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=[ParentOfAWaitingChild, WaitingChild]):
        handle = await client.start_workflow(ParentOfAWaitingChild.run, id=workflow_id, task_queue=task_queue)
        # The point: the workflow task that heard the child started, which leaves it running.
        await wait_for_event(stack, workflow_id, "ChildWorkflowExecutionStarted", 30)
        await wait_for_event(stack, workflow_id, "WorkflowTaskCompleted", 30, count=2)
        reset = await handle.reset(reset_type=ResetType.LAST_WORKFLOW_TASK, reason="a fix", request_id=f"{workflow_id}/r1")
        assert reset.result_run_id != handle.result_run_id
        child = client.get_workflow_handle(f"{workflow_id}-child")
        await child.signal(WaitingChild.release)
        assert await asyncio.wait_for(reset.result(), 60) == "invoice done"
    assert (await child.describe()).status.value == "Completed"  # the old run's termination left it running
    old = await client.get_workflow_handle(workflow_id, run_id=handle.result_run_id).describe()
    assert old.status.value == "Terminated"
    report = audit_of(stack, workflow_id, f"{workflow_id}-child")
    assert report.violations == []
    assert report.event_types(workflow_id, reset.result_run_id or "").count("ChildWorkflowExecutionCompleted") == 1
    await Replayer(workflows=[ParentOfAWaitingChild]).replay_workflow(await reset.fetch_history())
