"""Records the SDK histories tests/test_sdk_replay.py replays: starts a local stack, runs each
scenario's workflow on a Worker, and writes the run it started, once closed, as
`kadence workflow show --output json` exports it (`WorkflowHistory.to_json()`), to <scenario>.json here:

    .venv/bin/python -m tests.sdk_histories.record [scenario ...]   # every scenario, or those named

The files leave out the failures' stack traces, which name the recording checkout's paths and the
SDK's line numbers and which no replay reads. Ids, inputs and the worker's identity are fixed, so a
new recording differs from the last only in run ids, times and what a change to the SDK or the
workflows changed: review the diff.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

from kadence.client import Client, ResetType, WithStartWorkflowOperation, WorkflowExecutionStatus, WorkflowHandle, WorkflowHistory
from kadence.common import WorkflowIDConflictPolicy
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import WorkflowFailureError, WorkflowUpdateFailedError
from kadence.worker import Worker
from tests.sdk_histories.workflows import RECORDED_WORKFLOWS, DrawsWorkflow, LocalGreetingWorkflow, MemoNotesWorkflow
from tests.workflows import (
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
    always_fail,
    echo,
    fail_first_attempt,
    fail_until_third_attempt,
    slow_echo,
)

HERE = Path(__file__).resolve().parent
TASK_QUEUE = "sdk-histories"
IDENTITY = "sdk-histories-recorder"  # not the default pid@hostname: the files name no machine
WITHIN_S = 60.0  # for a scenario to run, and again for the read model to hold its closed history


@dataclass(frozen=True)
class Scenario:
    name: str  # the file's stem, and the workflow id
    drive: Callable[[Client, str], Awaitable[WorkflowHandle]]  # starts the run, takes it to its close; the handle it started
    shows: tuple[str, ...]  # event types the history must hold, or it does not record what the scenario is for


async def signals(client: Client, workflow_id: str) -> WorkflowHandle:
    handle = await client.start_workflow(ApprovalWorkflow.run, "order-7", id=workflow_id, task_queue=TASK_QUEUE)
    await handle.signal(ApprovalWorkflow.add_note, "gift wrap")
    await handle.signal(ApprovalWorkflow.approve, "alice")
    await handle.result()
    return handle


async def updates(client: Client, workflow_id: str) -> WorkflowHandle:
    handle = await client.start_workflow(CartWorkflow.run, id=workflow_id, task_queue=TASK_QUEUE)
    await handle.execute_update(CartWorkflow.add_item, "apple")
    with contextlib.suppress(WorkflowUpdateFailedError):  # the validator rejects an item without a name
        await handle.execute_update(CartWorkflow.add_item, "")
    await handle.execute_update(CartWorkflow.check_out)
    await handle.result()
    return handle


async def timers(client: Client, workflow_id: str) -> WorkflowHandle:
    handle = await client.start_workflow(SleepyWorkflow.run, 0.1, id=workflow_id, task_queue=TASK_QUEUE)
    await handle.result()
    return handle


async def child_workflow(client: Client, workflow_id: str) -> WorkflowHandle:
    handle = await client.start_workflow(ParentOfTwoStepWorkflow.run, "parcel", id=workflow_id, task_queue=TASK_QUEUE)
    await handle.result()
    return handle


async def continue_as_new(client: Client, workflow_id: str) -> WorkflowHandle:
    handle = await client.start_workflow(CountdownWorkflow.run, 1, id=workflow_id, task_queue=TASK_QUEUE)
    await handle.result()  # of the last run; the first, recorded, closed as ContinuedAsNew
    return handle


async def patched(client: Client, workflow_id: str) -> WorkflowHandle:
    handle = await client.start_workflow(PatchedWorkflow.run, id=workflow_id, task_queue=TASK_QUEUE)
    await handle.result()
    return handle


async def deprecated_patch(client: Client, workflow_id: str) -> WorkflowHandle:
    handle = await client.start_workflow(RetiredPatchWorkflow.run, id=workflow_id, task_queue=TASK_QUEUE)
    await handle.result()
    return handle


async def activity_retries(client: Client, workflow_id: str) -> WorkflowHandle:
    handle = await client.start_workflow(FlakyWorkflow.run, "charge", id=workflow_id, task_queue=TASK_QUEUE)
    await handle.result()
    return handle


async def workflow_failure(client: Client, workflow_id: str) -> WorkflowHandle:
    handle = await client.start_workflow(DeclinedWorkflow.run, "card", id=workflow_id, task_queue=TASK_QUEUE)
    with contextlib.suppress(WorkflowFailureError):  # the activity fails for good, and so the workflow
        await handle.result()
    return handle


async def local_activities(client: Client, workflow_id: str) -> WorkflowHandle:
    handle = await client.start_workflow(LocalGreetingWorkflow.run, "ada", id=workflow_id, task_queue=TASK_QUEUE)
    await handle.result()
    return handle


async def cancel(client: Client, workflow_id: str) -> WorkflowHandle:
    handle = await client.start_workflow(CancellableWorkflow.run, "order-7", id=workflow_id, task_queue=TASK_QUEUE)
    while "TimerStarted" not in event_types(await handle.fetch_history()):  # cancelled while it sleeps, not before it ran
        await asyncio.sleep(0.05)
    await handle.cancel()
    with contextlib.suppress(WorkflowFailureError):  # it cleans up, then lets the cancellation stand
        await handle.result()
    return handle


async def memo(client: Client, workflow_id: str) -> WorkflowHandle:
    handle = await client.start_workflow(MemoNotesWorkflow.run, id=workflow_id, task_queue=TASK_QUEUE, memo={"ticket": 7})
    await handle.result()
    return handle


async def update_with_start(client: Client, workflow_id: str) -> WorkflowHandle:
    operation = WithStartWorkflowOperation(CartWorkflow.run, id=workflow_id, task_queue=TASK_QUEUE,
                                           id_conflict_policy=WorkflowIDConflictPolicy.FAIL)
    await client.execute_update_with_start_workflow(CartWorkflow.add_item, "apple", start_workflow_operation=operation)
    handle = await operation.workflow_handle()
    await handle.execute_update(CartWorkflow.check_out)
    await handle.result()
    return handle  # its first_execution_run_id is None: the id's only run is recorded


async def reset(client: Client, workflow_id: str) -> WorkflowHandle:
    handle = await client.start_workflow(DrawsWorkflow.run, id=workflow_id, task_queue=TASK_QUEUE)
    await handle.signal(DrawsWorkflow.proceed, "ada")
    await handle.result()
    # The closed run reset to its last workflow task, the one that completed it.
    made = await handle.reset(reset_type=ResetType.LAST_WORKFLOW_TASK, reason="recorded")
    await made.result()
    return made  # its first_execution_run_id is the new run's: the one recorded


SCENARIOS = [
    Scenario("signals", signals, ("WorkflowExecutionSignaled", "WorkflowExecutionCompleted")),
    Scenario("updates", updates, ("WorkflowExecutionUpdateAccepted", "WorkflowExecutionUpdateRejected", "ActivityTaskCompleted",
                                  "WorkflowExecutionUpdateCompleted")),
    Scenario("timers", timers, ("TimerStarted", "TimerFired", "TimerCanceled")),
    Scenario("child_workflow", child_workflow, ("StartChildWorkflowExecutionInitiated", "ChildWorkflowExecutionCompleted")),
    Scenario("continue_as_new", continue_as_new, ("TimerFired", "WorkflowExecutionContinuedAsNew")),
    Scenario("patched", patched, ("MarkerRecorded", "TimerFired")),
    Scenario("deprecated_patch", deprecated_patch, ("MarkerRecorded", "TimerFired")),
    Scenario("activity_retries", activity_retries, ("ActivityTaskCompleted", "WorkflowExecutionCompleted")),
    Scenario("workflow_failure", workflow_failure, ("ActivityTaskFailed", "WorkflowExecutionFailed")),
    Scenario("local_activities", local_activities, ("MarkerRecorded", "TimerFired", "WorkflowExecutionCompleted")),
    Scenario("cancel", cancel, ("WorkflowExecutionCancelRequested", "TimerCanceled", "ActivityTaskCompleted",
                                "WorkflowExecutionCanceled")),
    Scenario("memo", memo, ("WorkflowPropertiesModified", "TimerFired", "WorkflowExecutionCompleted")),
    Scenario("update_with_start", update_with_start, ("WorkflowExecutionUpdateAdmitted", "WorkflowExecutionUpdateCompleted",
                                                      "WorkflowExecutionCompleted")),
    Scenario("reset", reset, ("TimerFired", "WorkflowExecutionSignaled", "WorkflowTaskFailed", "WorkflowExecutionCompleted")),
]


def event_types(history: WorkflowHistory) -> list[str]:
    return [event["attributes"][0] for event in history.events]


async def closed_history(handle: WorkflowHandle) -> WorkflowHistory:
    """The run's history once the read model holds all of it, up to the event that closed the run."""
    while True:
        execution = await handle.describe()
        history = await handle.fetch_history()
        if execution.status is not WorkflowExecutionStatus.RUNNING and len(history.events) == execution.history_length:
            return history
        await asyncio.sleep(0.1)


async def record(client: Client, scenario: Scenario) -> Path:
    started = await asyncio.wait_for(scenario.drive(client, scenario.name), WITHIN_S)
    recorded = client.get_workflow_handle(scenario.name, run_id=started.first_execution_run_id)
    history = await asyncio.wait_for(closed_history(recorded), WITHIN_S)
    missing = [kind for kind in scenario.shows if kind not in event_types(history)]
    if missing:
        raise AssertionError(f"{scenario.name}: the history has no {missing}: {event_types(history)}")
    path = HERE / f"{scenario.name}.json"
    path.write_text(json.dumps(without_stack_traces(history.to_json()), indent=1) + "\n")
    return path


def without_stack_traces(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: "" if key == "stack_trace" else without_stack_traces(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_stack_traces(item) for item in value]
    return value


async def record_all(stack: LocalStack, names: list[str]) -> None:
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn, identity=IDENTITY)
    activities = [echo, slow_echo, always_fail, fail_first_attempt, fail_until_third_attempt]
    try:
        async with Worker(client, task_queue=TASK_QUEUE, workflows=RECORDED_WORKFLOWS, activities=activities):
            for scenario in [s for s in SCENARIOS if not names or s.name in names]:
                path = await record(client, scenario)
                print(f"recorded {path.relative_to(HERE.parent.parent)}")
    finally:
        await client.close()


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    names = sys.argv[1:]
    if unknown := set(names) - {s.name for s in SCENARIOS}:
        raise SystemExit(f"no scenario {sorted(unknown)}: name some of {[s.name for s in SCENARIOS]}")
    data_dir = Path(tempfile.mkdtemp(prefix="kadence-sdk-histories-"))
    stack = LocalStack(data_dir, partitions=1)
    try:
        stack.start()
        os.environ.update(stack.kadence_env)  # the worker reads the stack's KADENCE_* settings as any process does
        uvloop.run(record_all(stack, names))
    finally:
        stack.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
