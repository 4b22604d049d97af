"""The workflows whose histories are recorded here: those of tests/workflows.py, and the ones no
other test runs. The recorder's worker and the replay test both take them from RECORDED_WORKFLOWS."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kadence import workflow
from tests.workflows import (
    FAST_RETRY,
    ApprovalWorkflow,
    CancellableWorkflow,
    CartWorkflow,
    CountdownWorkflow,
    DeclinedWorkflow,
    FlakyWorkflow,
    ParentOfTwoStepWorkflow,
    PatchedWorkflow,
    RetiredPatchWorkflow,
    SleepyWorkflow,
    TwoStepWorkflow,
    echo,
    fail_first_attempt,
)


@workflow.defn
class LocalGreetingWorkflow:
    """A local activity, a timer, then a local activity whose first attempt fails: the timer puts
    the second in a later workflow task, whose replay reads the first's outcome from its marker."""

    @workflow.run
    async def run(self, name: str) -> str:
        greeting = await workflow.execute_local_activity(echo, f"hello {name}", start_to_close_timeout=timedelta(seconds=5))
        await workflow.sleep(0.05)
        return await workflow.execute_local_activity(
            fail_first_attempt, greeting, start_to_close_timeout=timedelta(seconds=5), retry_policy=FAST_RETRY,
        )


@workflow.defn
class MemoNotesWorkflow:
    """Upserts its memo (a key set, a key removed), and again after a timer: each upsert a
    WorkflowPropertiesModified event its replay matches."""

    @workflow.run
    async def run(self) -> dict[str, Any]:
        workflow.upsert_memo({"stage": "started", "ticket": None})
        await workflow.sleep(0.05)
        workflow.upsert_memo({"stage": "done"})
        return dict(workflow.memo())


@workflow.defn
class DrawsWorkflow:
    """Draws a uuid4, sleeps, waits for a signal and draws another: reset to its last workflow task,
    the copied past draws what it drew (seeded by the run that wrote it) and the task after the reset
    draws anew (seeded by the reset's new run)."""

    def __init__(self) -> None:
        self.proceeded_by: list[str] = []

    @workflow.signal
    def proceed(self, who: str) -> None:
        self.proceeded_by.append(who)

    @workflow.run
    async def run(self) -> dict[str, Any]:
        before = str(workflow.uuid4())
        await workflow.sleep(0.05)  # "before" is drawn in a workflow task of its own, completed before the point
        await workflow.wait_condition(lambda: bool(self.proceeded_by))
        return {"before": before, "after": str(workflow.uuid4()), "by": self.proceeded_by}


RECORDED_WORKFLOWS = [
    ApprovalWorkflow, CartWorkflow, SleepyWorkflow, ParentOfTwoStepWorkflow, TwoStepWorkflow, CountdownWorkflow, PatchedWorkflow,
    RetiredPatchWorkflow, FlakyWorkflow, DeclinedWorkflow, LocalGreetingWorkflow, CancellableWorkflow, MemoNotesWorkflow, DrawsWorkflow,
]
