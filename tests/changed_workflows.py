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
