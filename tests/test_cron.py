"""Cron schedules as Temporal reads them, and cron workflows: each run at the schedule's next time,
the next run started when one completes, fails or times out, the chain ended by a cancel or a
terminate."""

from __future__ import annotations

import asyncio
import datetime
import uuid

import pytest

from kadence.client import Client
from kadence.exceptions import WorkflowFailureError
from kadence.protocol.cron import CronError, parse_cron
from kadence.worker import Worker
from services.history.machine.dispatch import decide
from services.history.machine.lifecycle import decide_start
from services.history.machine.transition import Rejected
from services.history.partition import PartitionState
from services.history.step import commit
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, EchoWorkflow

AT = "2026-12-01T02:30:15+00:00"  # a Tuesday


def next_time(expression: str, after: str = AT) -> str:
    after_ms = int(datetime.datetime.fromisoformat(after).timestamp() * 1000)
    fires_ms = parse_cron(expression).next_after_ms(after_ms)
    return datetime.datetime.fromtimestamp(fires_ms / 1000, datetime.UTC).isoformat()


@pytest.mark.parametrize(("expression", "expected"), [
    ("* * * * *", "2026-12-01T02:31:00+00:00"),
    ("*/15 * * * *", "2026-12-01T02:45:00+00:00"),
    ("30 2 * * *", "2026-12-02T02:30:00+00:00"),
    ("0 9 * * MON-FRI", "2026-12-01T09:00:00+00:00"),
    ("0 0 1,15 * 0", "2026-12-06T00:00:00+00:00"),  # both day fields restricted: either day runs
    ("0 0 * * 7", "2026-12-06T00:00:00+00:00"),  # 7 is Sunday too
    ("0 0 29 2 *", "2028-02-29T00:00:00+00:00"),
    ("0 12 * JAN,jul ?", "2027-01-01T12:00:00+00:00"),
    ("@hourly", "2026-12-01T03:00:00+00:00"),
    ("@weekly", "2026-12-06T00:00:00+00:00"),
    ("@every 1h30m", "2026-12-01T04:00:15+00:00"),
    ("CRON_TZ=America/New_York 0 9 * * *", "2026-12-01T14:00:00+00:00"),
])
def test_the_next_time_of_a_schedule(expression: str, expected: str) -> None:
    assert next_time(expression) == expected


@pytest.mark.parametrize(("expression", "reason"), [
    ("* * * *", "has 4 fields"),
    ("61 * * * *", "minute field '61'"),
    ("* * * * MOO", "day-of-week field 'MOO'"),
    ("@fortnightly", "unknown descriptor"),
    ("@every soon", "@every takes a duration"),
    ("CRON_TZ=Mars/Olympus 0 * * * *", "unknown time zone"),
    ("0 0 30 2 *", "matches no day"),
])
def test_a_schedule_that_cannot_be_read_says_why(expression: str, reason: str) -> None:
    with pytest.raises(CronError, match=reason):
        next_time(expression)


START = {
    "workflow_type": "Report", "task_queue": "reports", "input": [], "request_id": "", "workflow_task_timeout_ms": 0,
    "id_reuse_policy": "ALLOW_DUPLICATE", "id_conflict_policy": "FAIL", "execution_timeout_ms": 0, "run_timeout_ms": 0,
    "search_attributes": {}, "initiated_by": None, "start_delay_ms": 0, "cron_schedule": "*/15 * * * *",
}
NOW = int(datetime.datetime.fromisoformat(AT).timestamp() * 1000)


def test_a_cron_run_waits_for_its_time_and_each_completed_run_is_followed_by_the_next() -> None:
    state = PartitionState(0)
    first = decide_start(None, "report", START, "client", NOW, 0, 0)
    assert first.events[0]["attributes"][1]["first_workflow_task_backoff_ms"] == 14 * 60_000 + 45_000
    batch = commit(state, first, 0, 0).batch
    ex = state.executions["report"]
    run_id = batch["run_id"]
    commit(state, decide(ex, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, "w", NOW), 0, 1)
    done_at = NOW + 15 * 60_000 + 20_000  # 02:45:35
    completed = decide(ex, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("CompleteWorkflowExecution", {"result": None})]}, "w", done_at)
    kind, attrs = completed.events[-1]["attributes"]
    assert kind == "WorkflowExecutionCompleted" and attrs["new_execution_run_id"] == completed.next_run.execution.run_id
    started = completed.next_run.events[0]["attributes"][1]
    assert started["initiator"] == "CRON_SCHEDULE" and started["cron_schedule"] == "*/15 * * * *"
    assert started["continued_execution_run_id"] == run_id
    assert started["first_workflow_task_backoff_ms"] == 14 * 60_000 + 25_000  # to 03:00
    commit(state, completed, 0, 2)
    following = state.executions["report"]
    assert following.run_id == attrs["new_execution_run_id"]
    canceled = decide(following, "RequestCancelWorkflowExecution", {"run_id": "", "reason": "", "request_id": "", "initiated_by": None},
                      "client", done_at)
    assert canceled.next_run is None  # the cancel request only; a run that closes canceled ends the schedule


def test_a_start_whose_cron_schedule_cannot_run_is_refused_with_the_reason() -> None:
    with pytest.raises(Rejected, match="has 3 fields"):
        decide_start(None, "report", {**START, "cron_schedule": "* * *"}, "client", NOW, 0, 0)
    with pytest.raises(Rejected, match="start delay and a cron schedule"):
        decide_start(None, "report", {**START, "start_delay_ms": 1000}, "client", NOW, 0, 0)


async def test_a_cron_workflow_runs_on_its_schedule_until_terminated(client: Client, task_queue: str) -> None:
    workflow_id = f"cron-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        handle = await client.start_workflow(EchoWorkflow.run, "tick", id=workflow_id, task_queue=task_queue, cron_schedule="@every 1s")

        async def completed_runs() -> list[str]:
            return [e.run_id async for e in client.list_workflows(f"WorkflowId = '{workflow_id}' AND ExecutionStatus = 'Completed'")]

        async def three_runs() -> None:
            while len(await completed_runs()) < 3:
                await asyncio.sleep(0.2)

        await asyncio.wait_for(three_runs(), 30)
        await client.get_workflow_handle(workflow_id).terminate(reason="enough")
        with pytest.raises(WorkflowFailureError):  # result() follows the chain to its terminated run
            await asyncio.wait_for(handle.result(), 30)
    first = (await client.get_workflow_handle(workflow_id, run_id=handle.result_run_id).fetch_history()).events
    assert first[-1]["attributes"][0] == "WorkflowExecutionCompleted" and first[-1]["attributes"][1]["new_execution_run_id"]
    assert first[0]["attributes"][1]["first_workflow_task_backoff_ms"] > 0  # the first run waited for its time too
    with pytest.raises(CronError, match="has 2 fields"):
        await client.start_workflow(EchoWorkflow.run, "x", id=f"{workflow_id}-bad", task_queue=task_queue, cron_schedule="* *")
