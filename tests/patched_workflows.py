"""A later version of TwoStepWorkflow that sleeps before its first activity behind a patch:
histories recorded by the original still replay (runs that recorded no patch marker keep the old path)."""

from __future__ import annotations

from datetime import timedelta

from kadence import workflow
from tests.workflows import slow_echo


@workflow.defn(name="TwoStepWorkflow")
class TwoStepWorkflowPatchedToSleepFirst:
    @workflow.run
    async def run(self, value: str) -> str:
        if workflow.patched("sleep-first"):
            await workflow.sleep(1)
        first = await workflow.execute_activity(slow_echo, value, start_to_close_timeout=timedelta(seconds=10))
        return await workflow.execute_activity(slow_echo, first + "!", start_to_close_timeout=timedelta(seconds=10))
