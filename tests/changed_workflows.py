"""A later version of TwoStepWorkflow that sleeps before its first activity: histories recorded by
the original no longer replay (the Replayer must say so)."""

from __future__ import annotations

from datetime import timedelta

from kadence import workflow
from tests.workflows import slow_echo


@workflow.defn(name="TwoStepWorkflow")
class TwoStepWorkflowThatSleepsFirst:
    @workflow.run
    async def run(self, value: str) -> str:
        await workflow.sleep(1)
        first = await workflow.execute_activity(slow_echo, value, start_to_close_timeout=timedelta(seconds=10))
        return await workflow.execute_activity(slow_echo, first + "!", start_to_close_timeout=timedelta(seconds=10))


@workflow.defn(name="ApprovalWorkflow")
class ApprovalWorkflowThatSleepsFirst:
    """A later ApprovalWorkflow that starts a timer before waiting: its first workflow task no
    longer matches histories the original recorded."""

    def __init__(self) -> None:
        self.approver: str | None = None

    @workflow.signal(name="approve")
    def approve(self, approver: str) -> None:
        self.approver = approver

    @workflow.run
    async def run(self, order_id: str) -> str:
        await workflow.sleep(1)
        await workflow.wait_condition(lambda: self.approver is not None)
        return f"{order_id} approved by {self.approver}"
