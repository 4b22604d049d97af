"""Update-with-start: one command that starts the workflow (unless its conflict policy takes the
running run, or refuses) and delivers the update in the same batch."""

from __future__ import annotations

import uuid

import pytest

from kadence import workflow
from kadence.client import Client, WithStartWorkflowOperation, WorkflowUpdateStage
from kadence.common import WorkflowIDConflictPolicy
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import ApplicationError, WorkflowAlreadyStartedError, WorkflowUpdateFailedError
from kadence.worker import Worker
from tests.conftest import audit_of


@workflow.defn
class TallyWorkflow:
    """Adds what its updates bring until told to finish."""

    def __init__(self) -> None:
        self.total = 0
        self.done = False

    @workflow.update
    async def add(self, amount: int) -> int:
        self.total += amount
        return self.total

    @add.validator
    def validate_add(self, amount: int) -> None:
        if amount <= 0:
            raise ApplicationError("amounts are positive", type="NotPositive")

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    @workflow.run
    async def run(self, label: str) -> str:
        await workflow.wait_condition(lambda: self.done)
        return f"{label}: {self.total}"


def start_tally(workflow_id: str, task_queue: str, policy: WorkflowIDConflictPolicy) -> WithStartWorkflowOperation:
    return WithStartWorkflowOperation(TallyWorkflow.run, "tally", id=workflow_id, task_queue=task_queue, id_conflict_policy=policy)


async def test_update_with_start_starts_a_run_or_updates_the_running_one(stack: LocalStack, client: Client, task_queue: str) -> None:
    workflow_id = f"tally-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=[TallyWorkflow]):
        started = start_tally(workflow_id, task_queue, WorkflowIDConflictPolicy.USE_EXISTING)
        assert await client.execute_update_with_start_workflow(TallyWorkflow.add, 5, start_workflow_operation=started) == 5
        handle = await started.workflow_handle()

        existing = start_tally(workflow_id, task_queue, WorkflowIDConflictPolicy.USE_EXISTING)
        update = await client.start_update_with_start_workflow(
            TallyWorkflow.add, 3, start_workflow_operation=existing, wait_for_stage=WorkflowUpdateStage.ACCEPTED, id="three",
        )
        assert await update.result() == 8
        assert (await existing.workflow_handle()).result_run_id == handle.result_run_id  # the update only: no new run
        again = start_tally(workflow_id, task_queue, WorkflowIDConflictPolicy.USE_EXISTING)
        assert await client.execute_update_with_start_workflow(TallyWorkflow.add, 3, start_workflow_operation=again, id="three") == 8

        refused = start_tally(workflow_id, task_queue, WorkflowIDConflictPolicy.FAIL)
        with pytest.raises(WorkflowAlreadyStartedError) as already:
            await client.execute_update_with_start_workflow(TallyWorkflow.add, 100, start_workflow_operation=refused)
        assert already.value.run_id == handle.result_run_id
        with pytest.raises(WorkflowAlreadyStartedError):
            await refused.workflow_handle()
        with pytest.raises(RuntimeError, match="cannot be reused"):
            await client.execute_update_with_start_workflow(TallyWorkflow.add, 1, start_workflow_operation=refused)

        await handle.signal(TallyWorkflow.finish)
        assert await handle.result() == "tally: 8"

        # The id's run closed: USE_EXISTING starts another (the reuse policy allows it), whose
        # validator may still reject the update; the run stays started, as in Temporal.
        after = start_tally(workflow_id, task_queue, WorkflowIDConflictPolicy.USE_EXISTING)
        with pytest.raises(WorkflowUpdateFailedError) as rejected:
            await client.execute_update_with_start_workflow(TallyWorkflow.add, -1, start_workflow_operation=after)
        assert isinstance(rejected.value.cause, ApplicationError) and rejected.value.cause.type == "NotPositive"
        second_run = await after.workflow_handle()
        assert second_run.result_run_id != handle.result_run_id
        await second_run.signal(TallyWorkflow.finish)
        assert await second_run.result() == "tally: 0"

    report = audit_of(stack, workflow_id)
    assert report.violations == []
    first = report.event_types(workflow_id, handle.result_run_id)
    # The start and its update in one batch, before the first workflow task.
    assert first[:3] == ["WorkflowExecutionStarted", "WorkflowExecutionUpdateAdmitted", "WorkflowTaskScheduled"]
    assert first.count("WorkflowExecutionUpdateAdmitted") == 2 and first.count("WorkflowExecutionUpdateCompleted") == 2
    assert report.event_types(workflow_id, second_run.result_run_id).count("WorkflowExecutionUpdateRejected") == 1


async def test_an_update_with_start_refused_outright_says_why(client: Client, task_queue: str) -> None:
    with pytest.raises(ValueError, match="WorkflowIDConflictPolicy is required"):
        WithStartWorkflowOperation(TallyWorkflow.run, "tally", id="x", task_queue=task_queue, id_conflict_policy=None)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="no cron_schedule nor start_delay"):
        WithStartWorkflowOperation(TallyWorkflow.run, "tally", id="x", task_queue=task_queue,
                                   id_conflict_policy=WorkflowIDConflictPolicy.FAIL, cron_schedule="@hourly")
    operation = start_tally(f"tally-{uuid.uuid4()}", task_queue, WorkflowIDConflictPolicy.FAIL)
    with pytest.raises(ValueError, match="ADMITTED"):
        await client.start_update_with_start_workflow(TallyWorkflow.add, 1, start_workflow_operation=operation,
                                                      wait_for_stage=WorkflowUpdateStage.ADMITTED)
