"""Workflows through the real broker, Postgres and services, with the history audited after each."""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
import warnings
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from examples.order import Order, OrderWorkflow, cancel_order, process_payment, ship_order
from kadence.client import Client
from kadence.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    CommandRejectedError,
    TerminatedError,
    TimeoutError,
    WorkflowAlreadyStartedError,
    WorkflowFailureError,
)
from kadence.ops.audit import AuditReport
from kadence.worker import Worker
from tests.changed_workflows import ApprovalWorkflowThatSleepsFirst
from tests.conftest import audit_of, wait_for_event
from tests.workflows import (
    ALL_ACTIVITIES,
    ALL_WORKFLOWS,
    FIXED,
    ApprovalWorkflow,
    BuggyUntilFixedWorkflow,
    CancelActivityWorkflow,
    CancellableWorkflow,
    CountdownWorkflow,
    DeclinedWorkflow,
    DrawingWorkflow,
    EchoWorkflow,
    FlakyWorkflow,
    HeartbeatWorkflow,
    HugeResultWorkflow,
    IndexedWorkflow,
    LocalStepsWorkflow,
    PipelineWorkflow,
    RetiredPatchWorkflow,
    SleepyWorkflow,
    UnservedActivityWorkflow,
)


def audited(stack: LocalStack, *workflow_ids: str) -> AuditReport:
    """The audit of the partitions these workflows' runs live on, which must find nothing wrong;
    the session stack's whole log is audited once more at its end (conftest's stack fixture)."""
    report = audit_of(stack, *workflow_ids)
    assert report.violations == []
    return report


async def test_order_workflow_ships_the_order(stack: LocalStack, client: Client, task_queue: str) -> None:
    order_id = f"order-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=[OrderWorkflow], activities=[process_payment, ship_order, cancel_order]):
        handle = await client.start_workflow(OrderWorkflow.run, Order(order_id, 99.99), id=order_id, task_queue=task_queue)
        assert await handle.result() == f"shipped_{order_id}"

    assert audited(stack, order_id).event_types(order_id, handle.result_run_id) == [
        "WorkflowExecutionStarted", "WorkflowTaskScheduled", "WorkflowTaskStarted", "WorkflowTaskCompleted",
        "ActivityTaskScheduled", "ActivityTaskStarted", "ActivityTaskCompleted",
        "WorkflowTaskScheduled", "WorkflowTaskStarted", "WorkflowTaskCompleted",
        "ActivityTaskScheduled", "ActivityTaskStarted", "ActivityTaskCompleted",
        "WorkflowTaskScheduled", "WorkflowTaskStarted", "WorkflowTaskCompleted",
        "WorkflowExecutionCompleted",
    ]


async def test_order_workflow_compensates_when_payment_fails(client: Client, task_queue: str) -> None:
    order_id = f"order-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=[OrderWorkflow], activities=[process_payment, ship_order, cancel_order]):
        # A zero amount fails the payment on every one of its 3 attempts (1 s, 2 s backoff).
        result = await client.execute_workflow(OrderWorkflow.run, Order(order_id, 0), id=order_id, task_queue=task_queue)
    assert result == f"cancelled_{order_id}"


async def test_activity_failing_twice_then_succeeding_records_every_attempt(stack: LocalStack, client: Client, task_queue: str) -> None:
    workflow_id = f"flaky-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        handle = await client.start_workflow(FlakyWorkflow.run, "charge", id=workflow_id, task_queue=task_queue)
        assert await handle.result() == "charge on attempt 3"

    history = audited(stack, workflow_id).history(workflow_id, handle.result_run_id)
    attempts = [e["attributes"][1] for e in history if e["attributes"][0] == "ActivityTaskStarted"]
    failures = [e["attributes"][1] for e in history if e["attributes"][0] == "ActivityTaskFailed"]
    assert [a["attempt"] for a in attempts] == [1, 2, 3]
    assert [(f["retry_state"], f["failure"]["message"]) for f in failures] == [
        ("IN_PROGRESS", "attempt 1 failed"), ("IN_PROGRESS", "attempt 2 failed"),
    ]
    assert sum(e["attributes"][0] == "ActivityTaskCompleted" for e in history) == 1


async def test_activity_exhausting_its_attempts_fails_the_workflow_with_the_cause(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    workflow_id = f"declined-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        handle = await client.start_workflow(DeclinedWorkflow.run, "order-7", id=workflow_id, task_queue=task_queue)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()

    activity_error = failed.value.cause
    assert isinstance(activity_error, ActivityError)
    assert activity_error.retry_state is not None and activity_error.retry_state.value == "MAXIMUM_ATTEMPTS_REACHED"
    assert isinstance(activity_error.cause, ApplicationError)
    assert activity_error.cause.message == "payment declined for order-7"
    assert activity_error.cause.type == "Declined"
    event_types = audited(stack, workflow_id).event_types(workflow_id, handle.result_run_id)
    assert event_types.count("ActivityTaskStarted") == 3
    assert event_types[-1] == "WorkflowExecutionFailed"


async def test_a_fresh_client_waits_for_many_results_at_once(stack: LocalStack, client: Client, task_queue: str) -> None:
    fresh = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
    try:
        async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
            ids = [f"fresh-{i}-{uuid.uuid4()}" for i in range(10)]
            results = await asyncio.gather(*(fresh.execute_workflow(EchoWorkflow.run, i, id=i, task_queue=task_queue) for i in ids))
        assert results == ids
    finally:
        await fresh.close()


async def test_fifty_workflows_spread_over_two_workers(stack: LocalStack, client: Client, task_queue: str) -> None:
    workers = [
        Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES, identity=f"worker-{i}")
        for i in (1, 2)
    ]
    async with workers[0], workers[1]:
        await asyncio.wait_for(asyncio.gather(*(w.ready.wait() for w in workers)), 30)
        ids = [f"spread-{i}-{uuid.uuid4()}" for i in range(50)]
        handles = await asyncio.gather(*(client.start_workflow(EchoWorkflow.run, i, id=i, task_queue=task_queue) for i in ids))
        assert await asyncio.gather(*(h.result() for h in handles)) == ids

    report = audited(stack, *ids)
    identities = {
        e["attributes"][1]["identity"]
        for h in handles for e in report.history(h.id, h.result_run_id)
        if e["attributes"][0] in ("ActivityTaskStarted", "WorkflowTaskStarted")
    }
    assert identities == {"worker-1", "worker-2"}


async def test_durable_timers_fire_and_cancel(stack: LocalStack, client: Client, task_queue: str) -> None:
    workflow_id = f"sleepy-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        handle = await client.start_workflow(SleepyWorkflow.run, 1.0, id=workflow_id, task_queue=task_queue)
        result = await handle.result()
    slept = float(result.removeprefix("slept "))
    assert 1.0 <= slept < 5.0

    events = [e["attributes"] for e in audited(stack, workflow_id).history(workflow_id, handle.result_run_id)]
    # The short sleep runs first (timer 1): the long one's task starts when the workflow first yields.
    timers = [(kind, a["timer_id"]) for kind, a in events if kind.startswith("Timer")]
    assert timers == [("TimerStarted", "1"), ("TimerStarted", "2"), ("TimerFired", "1"), ("TimerCanceled", "2")]
    started = {a["timer_id"]: a["start_to_fire_timeout_ms"] for kind, a in events if kind == "TimerStarted"}
    assert started == {"1": 1000, "2": 3_600_000}


async def test_signals_reach_their_handlers_in_order_and_wake_the_workflow(stack: LocalStack, client: Client, task_queue: str) -> None:
    workflow_id = f"approval-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        handle = await client.start_workflow(ApprovalWorkflow.run, "order-9", id=workflow_id, task_queue=task_queue)
        await handle.signal(ApprovalWorkflow.add_note, "fragile")
        await handle.signal("add_note", "gift wrap")
        await handle.signal(ApprovalWorkflow.approve, "alice")
        assert await handle.result() == "order-9 approved by alice with notes ['fragile', 'gift wrap']"

    events = [e["attributes"] for e in audited(stack, workflow_id).history(workflow_id, handle.result_run_id)]
    signals = [a["signal_name"] for kind, a in events if kind == "WorkflowExecutionSignaled"]
    assert signals == ["add_note", "add_note", "approve"]


async def test_the_caller_learns_whether_its_start_and_signals_applied(client: Client, task_queue: str) -> None:
    workflow_id = f"outcomes-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        handle = await client.start_workflow(ApprovalWorkflow.run, "order-1", id=workflow_id, task_queue=task_queue, request_id="start-1")
        with pytest.raises(WorkflowAlreadyStartedError) as duplicate:
            await client.start_workflow(ApprovalWorkflow.run, "order-1", id=workflow_id, task_queue=task_queue)
        assert duplicate.value.cause == "WORKFLOW_ALREADY_STARTED" and handle.result_run_id in duplicate.value.reason
        retried = await client.start_workflow(ApprovalWorkflow.run, "order-1", id=workflow_id, task_queue=task_queue, request_id="start-1")
        assert retried.result_run_id == handle.result_run_id

        await handle.signal(ApprovalWorkflow.approve, "bob")
        assert await handle.result() == "order-1 approved by bob with notes []"
        with pytest.raises(CommandRejectedError) as closed:
            await handle.signal(ApprovalWorkflow.approve, "too late")
        assert closed.value.cause == "WORKFLOW_CLOSED"

    with pytest.raises(CommandRejectedError) as unknown:
        await client.get_workflow_handle(f"nobody-{uuid.uuid4()}").signal("approve", "x")
    assert unknown.value.cause == "WORKFLOW_NOT_FOUND"


async def test_cancel_reaches_the_workflow_which_cleans_up_and_ends_canceled(stack: LocalStack, client: Client, task_queue: str) -> None:
    workflow_id = f"cancel-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        handle = await client.start_workflow(CancellableWorkflow.run, "order-3", id=workflow_id, task_queue=task_queue)
        # Asking twice is fine while the run is open: sent together, both reach history before the
        # worker can have run the cleanup (one after the other, the run may have closed in between).
        await asyncio.gather(handle.cancel(), handle.cancel())
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    assert isinstance(failed.value.cause, CancelledError)

    events = [e["attributes"] for e in audited(stack, workflow_id).history(workflow_id, handle.result_run_id)]
    kinds = [kind for kind, _ in events]
    assert kinds.count("WorkflowExecutionCancelRequested") == 1
    assert kinds[-1] == "WorkflowExecutionCanceled"
    assert "TimerCanceled" in kinds
    cleanup = [a["input"] for kind, a in events if kind == "ActivityTaskScheduled"]
    assert len(cleanup) == 1 and b"cleanup order-3" in cleanup[0][0]["data"]


async def test_terminate_ends_the_run_at_once_with_the_reason(stack: LocalStack, client: Client, task_queue: str) -> None:
    workflow_id = f"terminate-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        handle = await client.start_workflow(ApprovalWorkflow.run, "order-4", id=workflow_id, task_queue=task_queue)
        await handle.terminate("operator", reason="stuck order")
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        with pytest.raises(CommandRejectedError):
            await handle.signal(ApprovalWorkflow.approve, "too late")
    assert isinstance(failed.value.cause, TerminatedError) and failed.value.cause.message == "stuck order"
    events = audited(stack, workflow_id).history(workflow_id, handle.result_run_id)
    kind, attrs = events[-1]["attributes"]
    assert kind == "WorkflowExecutionTerminated" and attrs["reason"] == "stuck order"


async def test_id_policies_through_the_client(client: Client, task_queue: str) -> None:
    workflow_id = f"policies-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        first = await client.start_workflow(ApprovalWorkflow.run, "o", id=workflow_id, task_queue=task_queue)
        existing = await client.start_workflow(
            ApprovalWorkflow.run, "o", id=workflow_id, task_queue=task_queue, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        assert existing.result_run_id == first.result_run_id
        await first.signal(ApprovalWorkflow.approve, "carol")
        await first.result()
        with pytest.raises(WorkflowAlreadyStartedError, match="REJECT_DUPLICATE"):
            await client.start_workflow(
                ApprovalWorkflow.run, "o", id=workflow_id, task_queue=task_queue, id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            )
        second = await client.start_workflow(ApprovalWorkflow.run, "o", id=workflow_id, task_queue=task_queue)
        assert second.result_run_id != first.result_run_id
        third = await client.start_workflow(
            ApprovalWorkflow.run, "o", id=workflow_id, task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.TERMINATE_EXISTING,
        )
        assert third.result_run_id not in (first.result_run_id, second.result_run_id)
        with pytest.raises(WorkflowFailureError) as terminated:
            await second.result()
        assert isinstance(terminated.value.cause, TerminatedError)
        await third.terminate(reason="done testing")


async def test_run_timeout_and_schedule_to_close_timeout(stack: LocalStack, client: Client, task_queue: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        ids = [f"run-timeout-{uuid.uuid4()}", f"s2c-{uuid.uuid4()}", f"s2s-{uuid.uuid4()}"]
        waiting = await client.start_workflow(
            ApprovalWorkflow.run, "o", id=ids[0], task_queue=task_queue, run_timeout=timedelta(seconds=1),
        )
        unserved = await client.execute_workflow(UnservedActivityWorkflow.run, 1.0, id=ids[1], task_queue=task_queue)
        unstarted = await client.execute_workflow(
            UnservedActivityWorkflow.run, args=[1.0, "schedule_to_start"], id=ids[2], task_queue=task_queue,
        )
        with pytest.raises(WorkflowFailureError) as timed_out:
            await waiting.result()
    assert unserved == "SCHEDULE_TO_CLOSE TIMEOUT"
    assert unstarted == "SCHEDULE_TO_START TIMEOUT"
    assert isinstance(timed_out.value.cause, TimeoutError)
    assert audited(stack, *ids).event_types(waiting.id, waiting.result_run_id)[-1] == "WorkflowExecutionTimedOut"


async def test_heartbeat_timeout_retries_and_the_next_attempt_resumes_from_the_details(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    workflow_id = f"heartbeat-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        handle = await client.start_workflow(HeartbeatWorkflow.run, 6, id=workflow_id, task_queue=task_queue)
        assert await handle.result() == "attempt 2 resumed from 3"
    events = [e["attributes"] for e in audited(stack, workflow_id).history(workflow_id, handle.result_run_id)]
    timed_out = [a for kind, a in events if kind == "ActivityTaskTimedOut"]
    assert [(a["retry_state"], a["failure"]["timeout_type"], a["failure"]["details"][0]["data"]) for a in timed_out] == [
        ("IN_PROGRESS", "HEARTBEAT", b"3"),
    ]


async def test_oversized_payloads_get_clear_errors_and_the_partition_keeps_moving(client: Client, task_queue: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        with pytest.raises(CommandRejectedError, match="exceeds the 2 MB limit") as rejected:
            await client.start_workflow(EchoWorkflow.run, "x" * (3 * 1024 * 1024), id=f"big-{uuid.uuid4()}", task_queue=task_queue)
        assert rejected.value.cause == "INVALID_ARGUMENT"
        result = await client.execute_workflow(HugeResultWorkflow.run, 2.5, id=f"huge-{uuid.uuid4()}", task_queue=task_queue)
        assert result == "BlobSizeLimitError: non_retryable=True"
        assert await client.execute_workflow(EchoWorkflow.run, "small", id=f"after-{uuid.uuid4()}", task_queue=task_queue) == "small"


async def test_signal_with_start_starts_once_and_signals_the_running_run(client: Client, task_queue: str) -> None:
    workflow_id = f"sws-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        first = await client.start_workflow(
            ApprovalWorkflow.run, "o", id=workflow_id, task_queue=task_queue, start_signal="add_note", start_signal_args=["first"],
        )
        second = await client.start_workflow(
            ApprovalWorkflow.run, "o", id=workflow_id, task_queue=task_queue, start_signal="add_note", start_signal_args=["second"],
        )
        assert second.result_run_id == first.result_run_id
        await first.signal(ApprovalWorkflow.approve, "erin")
        assert await first.result() == "o approved by erin with notes ['first', 'second']"


async def test_continue_as_new_chains_runs_and_result_follows_them(stack: LocalStack, client: Client, task_queue: str) -> None:
    workflow_id = f"countdown-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        handle = await client.start_workflow(CountdownWorkflow.run, 3, id=workflow_id, task_queue=task_queue)
        assert await handle.result() == "liftoff"
    report = audited(stack, workflow_id)
    run_id, runs = handle.result_run_id, 0
    while True:
        events = [e["attributes"] for e in report.history(workflow_id, run_id)]
        runs += 1
        kind, attrs = events[-1]
        if kind == "WorkflowExecutionCompleted":
            break
        assert kind == "WorkflowExecutionContinuedAsNew"
        following = report.history(workflow_id, attrs["new_execution_run_id"])[0]["attributes"][1]
        assert following["continued_execution_run_id"] == run_id
        run_id = attrs["new_execution_run_id"]
    assert runs == 4


async def test_a_cancelled_activity_hears_of_it_and_history_records_it(
    stack: LocalStack, client: Client, task_queue: str, tmp_path: Path,
) -> None:
    marker = tmp_path / "activity-saw-cancellation"
    workflow_id = f"cancel-activity-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        handle = await client.start_workflow(CancelActivityWorkflow.run, str(marker), id=workflow_id, task_queue=task_queue)
        started = Path(f"{marker}.started")
        async with asyncio.timeout(30):
            while not started.exists():  # the attempt runs: now its cancellation must reach it, not a task never started
                await asyncio.sleep(0.05)
        await handle.signal(CancelActivityWorkflow.cancel_activity)
        assert await asyncio.wait_for(handle.result(), 60) == "activity cancelled"
    assert marker.read_text() == "cancelled"
    kinds = audited(stack, workflow_id).event_types(workflow_id, handle.result_run_id)
    assert kinds.index("ActivityTaskCancelRequested") < kinds.index("ActivityTaskCanceled") < kinds.index("WorkflowExecutionCompleted")


async def test_search_attributes_from_the_start_and_from_workflow_code_reach_the_read_model(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    workflow_id = f"indexed-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        handle = await client.start_workflow(
            IndexedWorkflow.run, "shipped", id=workflow_id, task_queue=task_queue, search_attributes={"CustomerId": "c-42"},
        )
        assert await handle.result() == "shipped"
    await handle.describe()  # the result came on kadence.replies: this waits until the read model holds the close too
    async with await psycopg.AsyncConnection.connect(stack.postgres_dsn) as conn:
        row = await (await conn.execute(
            "SELECT search_attributes FROM kadence_executions WHERE workflow_id = %s AND run_id = %s", (workflow_id, handle.result_run_id),
        )).fetchone()
    assert row is not None and row[0] == {"CustomerId": "c-42", "OrderStatus": "shipped", "Amount": 12.5}
    assert audited(stack, workflow_id).event_types(workflow_id, handle.result_run_id).count("UpsertWorkflowSearchAttributes") == 2


async def test_random_and_uuid4_draw_the_same_on_replay(stack: LocalStack, client: Client, task_queue: str) -> None:
    workflow_id = f"drawing-{uuid.uuid4()}"
    # No cache: the last workflow task replays the first, which drew the UUID it recorded.
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES, max_cached_workflows=0):
        result = await client.execute_workflow(DrawingWorkflow.run, id=workflow_id, task_queue=task_queue)
    report = audited(stack, workflow_id)
    (run_id,) = [run for wid, run in report.runs if wid == workflow_id]
    events = [e["attributes"] for e in report.history(workflow_id, run_id)]
    (upsert,) = [attrs for kind, attrs in events if kind == "UpsertWorkflowSearchAttributes"]
    assert client.data_converter.payload_converter.from_payload(upsert["search_attributes"]["Drawn"]) == result["drawn"]
    assert uuid.UUID(result["drawn"]).version == 4 and 1 <= result["roll"] <= 6
    assert result["history_length"] == 9 and result["suggested"] is False


async def test_a_start_delay_holds_the_first_workflow_task_and_signal_with_start_does_not_wait(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    delayed_id, signalled_id = f"delayed-{uuid.uuid4()}", f"signalled-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        delayed = await client.start_workflow(EchoWorkflow.run, "later", id=delayed_id, task_queue=task_queue,
                                              start_delay=timedelta(seconds=1))
        signalled = await client.signal_with_start(ApprovalWorkflow.run, "order-2", signal=ApprovalWorkflow.approve,
                                                   signal_args=["frank"], id=signalled_id, task_queue=task_queue)
        assert await signalled.result() == "order-2 approved by frank with notes []"
        assert await delayed.result() == "later"
    events = audited(stack, delayed_id, signalled_id).history(delayed_id, delayed.result_run_id)
    started, task_started = events[0], next(e for e in events if e["attributes"][0] == "WorkflowTaskStarted")
    assert started["attributes"][1]["first_workflow_task_backoff_ms"] == 1000
    assert task_started["event_time_ms"] - started["event_time_ms"] >= 1000


@pytest.mark.parametrize("cache", [1000, 0], ids=["cached", "replayed-every-task"])
async def test_local_activities_run_in_the_workflow_task_and_are_recorded_as_markers(
    stack: LocalStack, client: Client, task_queue: str, tmp_path: Path, cache: int,
) -> None:
    workflow_id = f"local-{uuid.uuid4()}"
    runs = tmp_path / "runs"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES, max_cached_workflows=cache):
        result = await client.execute_workflow(LocalStepsWorkflow.run, str(runs), id=workflow_id, task_queue=task_queue)
    assert result == [1, "local on attempt 3", "MAXIMUM_ATTEMPTS_REACHED: Declined: payment declined for card"]
    assert runs.read_text() == "ran\n"  # replays read the marker, they do not run it again
    report = audited(stack, workflow_id)
    kinds = report.event_types(workflow_id, next(r for w, r in report.runs if w == workflow_id))
    assert kinds.count("MarkerRecorded") == 3
    assert "ActivityTaskScheduled" not in kinds and "WorkflowTaskFailed" not in kinds


@pytest.mark.parametrize("cache", [1000, 0], ids=["cached", "replayed-every-task"])
async def test_asyncio_queue_lock_and_event_behave_deterministically(
    stack: LocalStack, client: Client, task_queue: str, cache: int,
) -> None:
    workflow_id = f"pipeline-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES, max_cached_workflows=cache):
        result = await client.execute_workflow(PipelineWorkflow.run, ["c", "a", "b", "d"], id=workflow_id, task_queue=task_queue)
        retired = await client.start_workflow(RetiredPatchWorkflow.run, id=f"retired-{uuid.uuid4()}", task_queue=task_queue)
        assert await retired.result() == "v2 only"
    assert result == ["a", "b", "c", "d"]
    report = audited(stack, workflow_id, retired.id)
    (run_id,) = [run for wid, run in report.runs if wid == workflow_id]
    # A timer may fire while the closing task is in flight (UNHANDLED_COMMAND, retried): that is
    # the protocol; a replay that differs is not.
    causes = [a["cause"] for kind, a in (e["attributes"] for e in report.history(workflow_id, run_id)) if kind == "WorkflowTaskFailed"]
    assert "NON_DETERMINISTIC_ERROR" not in causes
    assert report.event_types(retired.id, retired.result_run_id).count("MarkerRecorded") == 1


async def test_a_workflow_task_that_keeps_failing_records_one_failure_and_counts_its_attempts(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    """As Temporal's transient workflow task: the first failure is recorded, the retries after it
    (after 1 s, 2 s, ...) only counted, visible in describe with the last failure; the attempt
    that completes is recorded with its attempt number."""
    workflow_id = f"buggy-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=[BuggyUntilFixedWorkflow]):
        handle = await client.start_workflow(BuggyUntilFixedWorkflow.run, id=workflow_id, task_queue=task_queue)
        deadline = time.monotonic() + 30
        while (pending := (await handle.describe()).pending_workflow_task) is None or pending.attempt < 3:
            assert time.monotonic() < deadline, f"no third attempt within 30 s: {pending}"
            await asyncio.sleep(0.1)
        assert pending.last_cause == "WORKFLOW_WORKER_UNHANDLED_FAILURE"
        assert pending.last_failure is not None and "a bug the next deploy fixes" in pending.last_failure["message"]
        FIXED.add(workflow_id)
        assert await handle.result() == "fixed"
    assert (await handle.describe()).pending_workflow_task is None
    events = [e["attributes"] for e in audited(stack, workflow_id).history(workflow_id, handle.result_run_id)]
    assert [kind for kind, _ in events].count("WorkflowTaskFailed") == 1
    attempts = [attrs["attempt"] for kind, attrs in events if kind == "WorkflowTaskScheduled"]
    assert attempts[0] == 1 and attempts[1] >= 3 and len(attempts) == 2, attempts


async def test_changed_workflow_code_fails_the_workflow_task_not_the_workflow(stack: LocalStack, client: Client, task_queue: str) -> None:
    workflow_id = f"changed-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        handle = await client.start_workflow(ApprovalWorkflow.run, "order-8", id=workflow_id, task_queue=task_queue)
        await wait_for_event(stack, workflow_id, "WorkflowTaskCompleted", timeout=30)
    # A deployment of changed code replays the history, finds other commands, and fails the task,
    # dropping the run with the signal's handler never run: its coroutine is closed, not left to warn.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with Worker(client, task_queue=task_queue, workflows=[ApprovalWorkflowThatSleepsFirst]):
            await handle.signal(ApprovalWorkflow.approve, "ivan")
            await wait_for_event(stack, workflow_id, "WorkflowTaskFailed", timeout=30)
        gc.collect()
    assert not [str(w.message) for w in caught if "never awaited" in str(w.message)]
    # Rolled back, the original code takes the retried task and the workflow goes on.
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        assert await handle.result() == "order-8 approved by ivan with notes []"
    events = [e["attributes"] for e in audited(stack, workflow_id).history(workflow_id, handle.result_run_id)]
    failed = [attrs for kind, attrs in events if kind == "WorkflowTaskFailed"]
    assert failed[0]["cause"] == "NON_DETERMINISTIC_ERROR" and "TimerStarted" not in [kind for kind, _ in events]
