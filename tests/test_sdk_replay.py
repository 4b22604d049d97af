"""Histories the SDK recorded (tests/sdk_histories: signals, updates accepted and rejected, timers,
a child workflow, continue-as-new, patches, activity retries, a workflow failure, local activities,
a cancel, memo upserts, an update-with-start, a closed run reset) replay cleanly with `kadence.worker.Replayer`
against today's workflow code, without a broker or Postgres; and workflow code changed so that it
decides otherwise (another activity, a timer removed, commands reordered, a patch removed, a memo
upsert made a search attribute upsert) fails their replay with NondeterminismError. The reset run
replays drawing the values it returned: its copied past seeded by the run that wrote it, what
follows the reset by the new run.
A change to the SDK or to those workflows that fails here would break the runs already recorded.

To record them again (on a local stack, about 40 s), when a scenario is added or a change is meant
to change what the workflows decide: `.venv/bin/python -m tests.sdk_histories.record`, then
review the diff of tests/sdk_histories/*.json.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kadence import testing, workflow
from kadence.client import WorkflowHistory
from kadence.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowReplayResult,
    WorkflowReplayResults,
)
from tests.sdk_histories.workflows import RECORDED_WORKFLOWS
from tests.workflows import FAST_RETRY, echo, fail_first_attempt

RECORDED = Path(__file__).resolve().parent / "sdk_histories"
HISTORIES = sorted(RECORDED.glob("*.json"))


def load(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(json.loads(path.read_text()))


def test_there_are_recorded_sdk_histories() -> None:
    assert len(HISTORIES) >= 8, [path.name for path in HISTORIES]


@pytest.mark.parametrize("path", HISTORIES, ids=lambda path: path.stem)
async def test_the_recorded_history_replays_against_todays_workflow_code(path: Path) -> None:
    result = await Replayer(workflows=RECORDED_WORKFLOWS).replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"


REPLAYED_RESULTS: list[Any] = []


class KeepsWhatRunsReturn(Interceptor):
    """Keeps what each replayed run returns, where the test reads it."""

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return _KeepsResult


class _KeepsResult(WorkflowInboundInterceptor):
    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        result = await super().execute_workflow(input)
        REPLAYED_RESULTS.append(result)
        return result


async def test_a_reset_run_replays_drawing_what_it_drew_before_and_after_the_reset() -> None:
    history = load(RECORDED / "reset.json")
    completed = history.events[-1]["attributes"][1]["result"]
    recorded = json.loads(base64.b64decode(completed["data"]) if isinstance(completed["data"], str) else completed["data"])
    REPLAYED_RESULTS.clear()
    await Replayer(workflows=RECORDED_WORKFLOWS, interceptors=[KeepsWhatRunsReturn()]).replay_workflow(history)
    assert REPLAYED_RESULTS == [recorded]


@workflow.defn(name="DeclinedWorkflow")
class DeclinedWorkflowRunningAnotherActivity:
    @workflow.run
    async def run(self, value: str) -> str:
        return await workflow.execute_activity(echo, value, start_to_close_timeout=timedelta(seconds=10), retry_policy=FAST_RETRY)


@workflow.defn(name="SleepyWorkflow")
class SleepyWorkflowWithoutItsLongTimer:
    @workflow.run
    async def run(self, seconds: float) -> str:
        before = workflow.now()
        await workflow.sleep(seconds)
        return f"slept {(workflow.now() - before).total_seconds():.1f}"


@workflow.defn(name="LocalGreetingWorkflow")
class LocalGreetingWorkflowSleepingFirst:
    @workflow.run
    async def run(self, name: str) -> str:
        await workflow.sleep(0.05)
        greeting = await workflow.execute_local_activity(echo, f"hello {name}", start_to_close_timeout=timedelta(seconds=5))
        return await workflow.execute_local_activity(
            fail_first_attempt, greeting, start_to_close_timeout=timedelta(seconds=5), retry_policy=FAST_RETRY,
        )


@workflow.defn(name="PatchedWorkflow")
class PatchedWorkflowWithoutItsPatch:
    @workflow.run
    async def run(self) -> str:
        await workflow.sleep(0.05)
        return "v2, then v2"


@workflow.defn(name="MemoNotesWorkflow")
class MemoNotesWorkflowUpsertingSearchAttributes:
    @workflow.run
    async def run(self) -> dict[str, str]:
        workflow.upsert_search_attributes({"Stage": "started"})
        await workflow.sleep(0.05)
        return {}


@pytest.mark.parametrize(("history", "changed", "divergence"), [
    pytest.param("workflow_failure", DeclinedWorkflowRunningAnotherActivity,
                 "ActivityTaskScheduled always_fail where the workflow code issued ScheduleActivityTask echo", id="another activity"),
    pytest.param("timers", SleepyWorkflowWithoutItsLongTimer,
                 "TimerStarted 2 but the workflow code issued no such command", id="a timer removed"),
    pytest.param("local_activities", LocalGreetingWorkflowSleepingFirst,
                 "MarkerRecorded core_local_activity where the workflow code issued StartTimer", id="commands reordered"),
    pytest.param("patched", PatchedWorkflowWithoutItsPatch,
                 "MarkerRecorded core_patch where the workflow code issued StartTimer", id="a patch removed"),
    pytest.param("memo", MemoNotesWorkflowUpsertingSearchAttributes,
                 "WorkflowPropertiesModified  where the workflow code issued UpsertWorkflowSearchAttributes",
                 id="a memo upsert turned into a search attribute upsert"),
])
async def test_workflow_code_that_decides_otherwise_fails_the_replay(history: str, changed: type, divergence: str) -> None:
    with pytest.raises(workflow.NondeterminismError, match=divergence):
        await Replayer(workflows=[changed]).replay_workflow(load(RECORDED / f"{history}.json"))



async def test_replay_workflows_gathers_the_failures_by_run_id_or_raises_the_first() -> None:
    patched, timers = load(RECORDED / "patched.json"), load(RECORDED / "timers.json")
    replayer = Replayer(workflows=[*RECORDED_WORKFLOWS, PatchedWorkflowWithoutItsPatch])  # the later of two names wins
    results = await replayer.replay_workflows([timers, patched], raise_on_replay_failure=False)
    assert list(results.replay_failures) == [patched.run_id]
    assert isinstance(results.replay_failures[patched.run_id], workflow.NondeterminismError)
    with pytest.raises(workflow.NondeterminismError, match="MarkerRecorded core_patch"):
        await replayer.replay_workflows([timers, patched])


async def test_the_replay_iterator_yields_each_result_as_it_is_replayed() -> None:
    async def histories() -> AsyncIterator[WorkflowHistory]:
        for name in ("timers", "patched"):
            yield load(RECORDED / f"{name}.json")

    replayer = Replayer(workflows=[*RECORDED_WORKFLOWS, PatchedWorkflowWithoutItsPatch])
    async with replayer.workflow_replay_iterator(histories()) as results:
        failures = [(result.history.workflow_id, type(result.replay_failure)) async for result in results]
    assert failures == [(load(RECORDED / "timers.json").workflow_id, type(None)),
                        (load(RECORDED / "patched.json").workflow_id, workflow.NondeterminismError)]


def test_the_replayer_of_kadence_testing_is_the_workers() -> None:
    assert (testing.Replayer, testing.WorkflowReplayResult, testing.WorkflowReplayResults) == (
        Replayer, WorkflowReplayResult, WorkflowReplayResults)
