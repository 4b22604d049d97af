"""Cancelling an activity's task in workflow code, as each of temporalio's ActivityCancellationType
says: what the workflow code sees (temporalio's ActivityError caused by CancelledError, with the
fields its core sets), and what the history records."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kadence import activity, workflow
from kadence.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from kadence.exceptions import ActivityError, CancelledError, RetryState
from kadence.worker import Worker
from kadence.workflow import ActivityCancellationType

CLEANUP_S = 1.0  # how long the activity takes to clean up once cancelled


def described(err: BaseException) -> dict[str, Any]:
    """What workflow code saw when it awaited a cancelled activity, JSON-able."""
    if not isinstance(err, ActivityError):
        return {"class": type(err).__name__}
    cause = err.cause
    return {
        "class": "ActivityError", "message": err.message, "retry_state": err.retry_state.name if err.retry_state else None,
        "scheduled_event_id": err.scheduled_event_id, "started_event_id": err.started_event_id, "identity": bool(err.identity),
        "activity_id": err.activity_id, "cause": type(cause).__name__, "cause_message": getattr(cause, "message", ""),
        "cause_details": list(getattr(cause, "details", ())),
    }


@activity.defn
async def until_released(marker: str, on_cancel: str) -> str:
    """Heartbeats until the test writes `<marker>.release`. Cancelled, it cleans up for CLEANUP_S,
    then reports the cancellation, or with on_cancel="complete" completes anyway."""
    Path(f"{marker}.started").touch()
    try:
        while not Path(f"{marker}.release").exists():
            activity.heartbeat()
            await asyncio.sleep(0.05)
    except asyncio.CancelledError:
        cleanup = asyncio.ensure_future(asyncio.sleep(CLEANUP_S))
        while not cleanup.done():  # a second notice of the cancellation does not cut the cleanup short
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(cleanup)
        Path(marker).write_text("cancelled")
        if on_cancel == "complete":
            return "completed though cancelled"
        raise
    Path(marker).write_text("released")
    return "released"


@workflow.defn
class CancelsItsActivityWorkflow:
    """Starts the activity, cancels its task when signalled, and reports what the await gave and how
    long (in workflow time) it took; then waits for `finish`."""

    def __init__(self) -> None:
        self.cancelling = False
        self.finishing = False
        self.outcome: dict[str, Any] | None = None

    @workflow.signal
    def cancel_activity(self) -> None:
        self.cancelling = True

    @workflow.signal
    def finish(self) -> None:
        self.finishing = True

    @workflow.query
    def seen(self) -> dict[str, Any] | None:
        return self.outcome

    @workflow.run
    async def run(self, marker: str, on_cancel: str, cancellation_type: ActivityCancellationType, wait_to_finish: bool) -> dict[str, Any]:
        task = workflow.start_activity(
            until_released, args=[marker, on_cancel], start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=5), cancellation_type=cancellation_type,
        )
        await workflow.wait_condition(lambda: self.cancelling)
        asked = workflow.now()
        task.cancel()
        try:
            result: Any = await task
        except (ActivityError, asyncio.CancelledError) as err:
            result = described(err)
        self.outcome = {"result": result, "waited_s": (workflow.now() - asked).total_seconds()}
        if wait_to_finish:
            await workflow.wait_condition(lambda: self.finishing)
        return self.outcome


async def _cancel_once_running(handle: WorkflowHandle, marker: Path) -> None:
    """Cancel the activity only once its attempt runs, so the cancellation must reach a running attempt."""
    async with asyncio.timeout(30):
        while not Path(f"{marker}.started").exists():
            await asyncio.sleep(0.05)
    await handle.signal(CancelsItsActivityWorkflow.cancel_activity)


async def _event_types(handle: WorkflowHandle) -> list[str]:
    return [event["attributes"][0] for event in (await handle.fetch_history()).events]


@pytest.mark.parametrize(
    "cancellation_type", [ActivityCancellationType.TRY_CANCEL, ActivityCancellationType.WAIT_CANCELLATION_COMPLETED], ids=lambda t: t.name,
)
async def test_try_cancel_resolves_at_once_and_wait_cancellation_completed_waits_for_the_activity(
    client: Client, task_queue: str, tmp_path: Path, cancellation_type: ActivityCancellationType,
) -> None:
    marker = tmp_path / "activity"
    async with Worker(client, task_queue=task_queue, workflows=[CancelsItsActivityWorkflow], activities=[until_released]):
        handle = await client.start_workflow(
            CancelsItsActivityWorkflow.run, args=[str(marker), "report", cancellation_type, False],
            id=f"cancel-{cancellation_type.name.lower()}-{uuid.uuid4()}", task_queue=task_queue,
        )
        await _cancel_once_running(handle, marker)
        outcome = await asyncio.wait_for(handle.result(), 60)
        async with asyncio.timeout(30):
            while not marker.exists():  # TRY_CANCEL's run is over before the activity has cleaned up
                await asyncio.sleep(0.05)
    assert marker.read_text() == "cancelled"  # the attempt was told, in both
    kinds = await _event_types(handle)
    if cancellation_type is ActivityCancellationType.TRY_CANCEL:
        # The run went on in the workflow task that asked, and closed before the activity reported:
        # temporalio's core makes the error of no event (no event ids, no identity).
        assert outcome["result"] == RESOLVED_AT_ONCE
        assert outcome["waited_s"] == 0
        assert kinds.index("ActivityTaskCancelRequested") < kinds.index("WorkflowExecutionCompleted")
        assert "ActivityTaskCanceled" not in kinds
    else:
        # Made of ActivityTaskCanceled: its event ids and the identity of the worker that reported it.
        history = (await handle.fetch_history()).events
        scheduled = next(e["event_id"] for e in history if e["attributes"][0] == "ActivityTaskScheduled")
        started = next(e["event_id"] for e in history if e["attributes"][0] == "ActivityTaskStarted")
        assert outcome["result"] == {**RESOLVED_AT_ONCE, "scheduled_event_id": scheduled, "started_event_id": started, "identity": True}
        assert outcome["waited_s"] >= CLEANUP_S
        assert kinds.index("ActivityTaskCancelRequested") < kinds.index("ActivityTaskCanceled") < kinds.index("WorkflowExecutionCompleted")


# temporalio's for an activity resolved as cancelled without waiting for ActivityTaskCanceled.
RESOLVED_AT_ONCE = {
    "class": "ActivityError", "message": "Activity cancelled", "retry_state": RetryState.CANCEL_REQUESTED.name,
    "scheduled_event_id": 0, "started_event_id": 0, "identity": False, "activity_id": "1", "cause": CancelledError.__name__,
    "cause_message": "Cancelled", "cause_details": [],
}


async def test_wait_cancellation_completed_gives_the_result_of_an_activity_that_completes_anyway(
    client: Client, task_queue: str, tmp_path: Path,
) -> None:
    marker = tmp_path / "activity"
    async with Worker(client, task_queue=task_queue, workflows=[CancelsItsActivityWorkflow], activities=[until_released]):
        handle = await client.start_workflow(
            CancelsItsActivityWorkflow.run, args=[str(marker), "complete", ActivityCancellationType.WAIT_CANCELLATION_COMPLETED, False],
            id=f"cancel-completes-{uuid.uuid4()}", task_queue=task_queue,
        )
        await _cancel_once_running(handle, marker)
        outcome = await asyncio.wait_for(handle.result(), 60)
    assert outcome["result"] == "completed though cancelled" and outcome["waited_s"] >= CLEANUP_S
    kinds = await _event_types(handle)
    assert kinds.index("ActivityTaskCancelRequested") < kinds.index("ActivityTaskCompleted") < kinds.index("WorkflowExecutionCompleted")


async def test_abandon_resolves_at_once_and_never_asks_the_activity_to_cancel(client: Client, task_queue: str, tmp_path: Path) -> None:
    marker = tmp_path / "activity"
    async with Worker(client, task_queue=task_queue, workflows=[CancelsItsActivityWorkflow], activities=[until_released]):
        handle = await client.start_workflow(
            CancelsItsActivityWorkflow.run, args=[str(marker), "report", ActivityCancellationType.ABANDON, True],
            id=f"cancel-abandon-{uuid.uuid4()}", task_queue=task_queue,
        )
        await _cancel_once_running(handle, marker)
        async with asyncio.timeout(30):
            while (seen := await handle.query(CancelsItsActivityWorkflow.seen)) is None:
                await asyncio.sleep(0.1)
        assert seen == {"result": RESOLVED_AT_ONCE, "waited_s": 0}
        await asyncio.sleep(CLEANUP_S)  # time a cancellation would have had to reach the attempt
        assert not marker.exists()  # still running, never told
        Path(f"{marker}.release").touch()
        async with asyncio.timeout(30):
            while "ActivityTaskCompleted" not in await _event_types(handle):
                await asyncio.sleep(0.1)
        await handle.signal(CancelsItsActivityWorkflow.finish)
        assert await asyncio.wait_for(handle.result(), 60) == seen
    assert marker.read_text() == "released"
    kinds = await _event_types(handle)
    assert "ActivityTaskCancelRequested" not in kinds and "ActivityTaskCanceled" not in kinds


@activity.defn
async def leave_mark(path: str) -> None:
    Path(path).touch()


@workflow.defn
class CancelsBeforeRunningWorkflow:
    """Cancels an activity, and a local activity of each cancellation type, before their tasks ran
    (so before the activities were sent or run); what each await gave."""

    @workflow.run
    async def run(self, marker_dir: str) -> dict[str, str]:
        tasks = {"activity": workflow.start_activity(leave_mark, f"{marker_dir}/activity", start_to_close_timeout=timedelta(seconds=10))}
        for cancellation_type in ActivityCancellationType:
            tasks[cancellation_type.name] = workflow.start_local_activity(
                leave_mark, f"{marker_dir}/{cancellation_type.name}", start_to_close_timeout=timedelta(seconds=10),
                cancellation_type=cancellation_type,
            )
        for task in tasks.values():  # each before its task ran: it raises asyncio.CancelledError (temporalio's too)
            task.cancel()
        outcomes = {}
        for name, task in tasks.items():
            try:
                await task
                outcomes[name] = "ran"
            except asyncio.CancelledError:
                outcomes[name] = "asyncio.CancelledError"
        await workflow.sleep(0.01)  # the workflow waits: the abandoned local activity runs now
        return outcomes


async def test_an_activity_cancelled_before_it_ran_never_runs_unless_abandoned(client: Client, task_queue: str, tmp_path: Path) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[CancelsBeforeRunningWorkflow], activities=[leave_mark]):
        handle = await client.start_workflow(
            CancelsBeforeRunningWorkflow.run, str(tmp_path), id=f"cancel-before-{uuid.uuid4()}", task_queue=task_queue,
        )
        outcomes = await asyncio.wait_for(handle.result(), 60)
    assert outcomes == {name: "asyncio.CancelledError" for name in ["activity", *ActivityCancellationType.__members__]}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ABANDON"]
    kinds = await _event_types(handle)
    assert "ActivityTaskScheduled" not in kinds  # withdrawn before it was sent
    assert kinds.count("MarkerRecorded") == 1  # the abandoned local activity's outcome, recorded and ignored


@workflow.defn
class CancelsWaitingLocalActivitiesWorkflow:
    """Cancels a local activity of each cancellation type once its task waits for it (before the
    worker runs it, which it does once the code waits on history); what each await gave."""

    @workflow.run
    async def run(self, marker_dir: str) -> dict[str, Any]:
        outcomes: dict[str, Any] = {}
        for cancellation_type in ActivityCancellationType:
            task = workflow.start_local_activity(
                leave_mark, f"{marker_dir}/{cancellation_type.name}", start_to_close_timeout=timedelta(seconds=10),
                cancellation_type=cancellation_type,
            )
            await asyncio.sleep(0)  # the task runs up to its wait for the outcome
            task.cancel()
            try:
                await task
                outcomes[cancellation_type.name] = "ran"
            except (ActivityError, asyncio.CancelledError) as err:
                outcomes[cancellation_type.name] = described(err)
        await workflow.sleep(0.01)  # the workflow waits: the abandoned local activity runs now
        return outcomes


async def test_a_waiting_local_activity_cancelled_raises_temporalios_activity_error(
    client: Client, task_queue: str, tmp_path: Path,
) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[CancelsWaitingLocalActivitiesWorkflow], activities=[leave_mark]):
        handle = await client.start_workflow(
            CancelsWaitingLocalActivitiesWorkflow.run, str(tmp_path), id=f"cancel-local-{uuid.uuid4()}", task_queue=task_queue,
        )
        outcomes = await asyncio.wait_for(handle.result(), 60)
    assert outcomes == {
        cancellation_type.name: {
            **RESOLVED_AT_ONCE, "message": "Local Activity cancelled", "activity_id": str(seq), "cause_message": "Activity cancelled",
        } for seq, cancellation_type in enumerate(ActivityCancellationType, start=1)
    }
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ABANDON"]


@workflow.defn
class AwaitsItsActivityWorkflow:
    """Awaits an activity and lets whatever it raises out."""

    @workflow.run
    async def run(self, marker: str, cancellation_type: ActivityCancellationType) -> str:
        return await workflow.execute_activity(
            until_released, args=[marker, "report"], start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=5), cancellation_type=cancellation_type,
        )


@pytest.mark.parametrize("cancellation_type", list(ActivityCancellationType), ids=lambda t: t.name)
async def test_a_cancelled_run_that_lets_its_activitys_cancellation_out_ends_canceled(
    client: Client, task_queue: str, tmp_path: Path, cancellation_type: ActivityCancellationType,
) -> None:
    """temporalio's rule: a run asked to cancel whose code ends with a cancellation error (here the
    ActivityError caused by CancelledError its activity's await raised) ends canceled, not failed."""
    marker = tmp_path / "activity"
    async with Worker(client, task_queue=task_queue, workflows=[AwaitsItsActivityWorkflow], activities=[until_released]):
        handle = await client.start_workflow(
            AwaitsItsActivityWorkflow.run, args=[str(marker), cancellation_type],
            id=f"cancel-run-{cancellation_type.name.lower()}-{uuid.uuid4()}", task_queue=task_queue,
        )
        async with asyncio.timeout(30):
            while not Path(f"{marker}.started").exists():
                await asyncio.sleep(0.05)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as ended:
            await asyncio.wait_for(handle.result(), 60)
        assert isinstance(ended.value.cause, CancelledError)
        assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
        if cancellation_type is ActivityCancellationType.ABANDON:
            Path(f"{marker}.release").touch()  # never told: let it end
