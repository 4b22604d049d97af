"""Reset end to end (decision 0005): a run stuck on a failing workflow task is reset to its last
completed workflow task once the bug is fixed; the new run replays the past with the values it drew
then, draws new ones after the point, gets the signal sent after the point again, and completes;
the old run is terminated and its result() raises. A failed run is reset from its checkpoint row
after a kill of the history service, and left as it failed."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from typing import Any

import psycopg
import pytest

from kadence import workflow
from kadence.client import Client, ResetType
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import ApplicationError, CommandRejectedError, TerminatedError, WorkflowFailureError
from kadence.worker import Replayer, Worker
from tests.conftest import audit_of, wait_for_event
from tests.test_memo import memo_shown

BUG = {"on": True}


@workflow.defn
class ResettableWorkflow:
    def __init__(self) -> None:
        self.approvals: list[str] = []

    @workflow.signal
    def approve(self, who: str) -> None:
        self.approvals.append(who)

    @workflow.run
    async def run(self) -> dict[str, Any]:
        first = str(workflow.uuid4())
        workflow.upsert_memo({"first": first})
        await workflow.sleep(0.05)
        second = str(workflow.uuid4())
        workflow.upsert_memo({"second": second})
        await workflow.wait_condition(lambda: len(self.approvals) >= 2)
        if BUG["on"]:
            raise RuntimeError("a bug: this workflow task fails until the worker is fixed")
        return {
            "first": first, "second": second, "third": str(workflow.uuid4()), "approvals": self.approvals,
            "original_execution_run_id": workflow.info().original_execution_run_id,
        }


async def test_a_run_stuck_on_a_bug_is_reset_to_its_last_workflow_task_and_completes(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    workflow_id = f"reset-{uuid.uuid4()}"
    BUG["on"] = True
    try:
        async with Worker(client, task_queue=task_queue, workflows=[ResettableWorkflow]):
            handle = await client.start_workflow(ResettableWorkflow.run, id=workflow_id, task_queue=task_queue)
            await memo_shown(client, workflow_id, "second")  # both drawn, in the first two workflow tasks
            await handle.signal(ResettableWorkflow.approve, "ada")
            await wait_for_event(stack, workflow_id, "WorkflowTaskCompleted", 30, count=3)  # "ada"'s: the last completed, the point
            await handle.signal(ResettableWorkflow.approve, "bob")
            await wait_for_event(stack, workflow_id, "WorkflowTaskFailed", 30)
            base = await handle.describe()
            drawn = await base.memo()

            BUG["on"] = False  # the fixed worker
            reset = await handle.reset(reset_type=ResetType.LAST_WORKFLOW_TASK, reason="bug fixed", request_id=f"{workflow_id}/r1")
            again = await handle.reset(reset_type=ResetType.LAST_WORKFLOW_TASK, reason="bug fixed", request_id=f"{workflow_id}/r1")
            assert again.result_run_id == reset.result_run_id != handle.result_run_id
            result = await asyncio.wait_for(reset.result(), 60)
    finally:
        BUG["on"] = False
    assert result["approvals"] == ["ada", "bob"]  # "bob" came after the point: reapplied
    assert result["original_execution_run_id"] == handle.result_run_id  # the run whose Started event the reset copied
    assert (result["first"], result["second"]) == (drawn["first"], drawn["second"])  # the past drew what it drew
    with pytest.raises(WorkflowFailureError) as raised:
        await client.get_workflow_handle(workflow_id, run_id=handle.result_run_id).result()
    assert isinstance(raised.value.cause, TerminatedError)
    terminated = await client.get_workflow_handle(workflow_id, run_id=handle.result_run_id).describe()
    assert terminated.status.value == "Terminated"
    latest = await client.get_workflow_handle(workflow_id).describe()  # the latest run: the reset's, started at the reset
    assert latest.run_id == reset.result_run_id and latest.start_time > terminated.start_time
    with pytest.raises(CommandRejectedError) as closed:
        await client.get_workflow_handle(workflow_id, run_id=handle.result_run_id).reset(
            reset_type=ResetType.FIRST_WORKFLOW_TASK, reason="again")
    assert closed.value.cause in ("WORKFLOW_NOT_FOUND", "WORKFLOW_CLOSED")
    report = audit_of(stack, workflow_id)
    assert report.violations == []
    assert report.event_types(workflow_id, reset.result_run_id or "").count("WorkflowExecutionSignaled") == 2
    # The reset run's history replays offline too (its copied past, the reset's WorkflowTaskFailed, what came after).
    await Replayer(workflows=[ResettableWorkflow]).replay_workflow(await reset.fetch_history())


DECLINE = {"on": True}


@workflow.defn
class ChargeWorkflow:
    @workflow.run
    async def run(self, order: str) -> str:
        drawn = str(workflow.uuid4())
        await workflow.sleep(0.05)
        if DECLINE["on"]:
            raise ApplicationError(f"{order}: declined by a bug", non_retryable=True)
        return f"{order} charged as {drawn}"


async def test_a_failed_run_is_reset_from_its_checkpoint_row_after_a_kill_and_completes(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    workflow_id = f"reset-failed-{uuid.uuid4()}"
    DECLINE["on"] = True
    try:
        async with Worker(client, task_queue=task_queue, workflows=[ChargeWorkflow]):
            handle = await client.start_workflow(ChargeWorkflow.run, "order-3", id=workflow_id, task_queue=task_queue)
            with pytest.raises(WorkflowFailureError):
                await handle.result()
            await events_kept_in_row(stack, workflow_id)
            stack.kill_service("history")  # memory lost: the reset reads the closed run back from its row
            stack.start_service("history")
            DECLINE["on"] = False
            reset = await handle.reset(reset_type=ResetType.LAST_WORKFLOW_TASK, reason="declines fixed")
            result = await asyncio.wait_for(reset.result(), 60)
    finally:
        DECLINE["on"] = False
    assert result.startswith("order-3 charged as ")
    failed = await client.get_workflow_handle(workflow_id, run_id=handle.result_run_id).describe()
    assert failed.status.value == "Failed"  # left as it closed
    history = (await reset.fetch_history()).to_json()["events"]
    assert [e["attributes"]["base_run_id"] for e in history if e["attributes"].get("cause") == "RESET_WORKFLOW"] == [
        handle.result_run_id]
    assert audit_of(stack, workflow_id).violations == []
    await Replayer(workflows=[ChargeWorkflow]).replay_workflow(await reset.fetch_history())


async def events_kept_in_row(stack: LocalStack, workflow_id: str) -> None:
    """Until a checkpoint has stored the closed run's events in its row."""
    async with await psycopg.AsyncConnection.connect(stack.postgres_dsn, autocommit=True) as conn, asyncio.timeout(30):
        while not await (await conn.execute(
                "SELECT 1 FROM kadence_history_closed_runs WHERE workflow_id = %s AND state IS NOT NULL", (workflow_id,))).fetchall():
            await asyncio.sleep(0.1)


def test_the_cli_resets_a_run(stack: LocalStack, task_queue: str) -> None:
    async def started() -> str:
        client = await Client.connect()
        try:
            async with Worker(client, task_queue=task_queue, workflows=[ResettableWorkflow]):
                handle = await client.start_workflow(ResettableWorkflow.run, id=f"reset-cli-{uuid.uuid4()}", task_queue=task_queue)
                await wait_for_event(stack, handle.id, "WorkflowTaskCompleted", 30, count=2)
                return handle.id
        finally:
            await client.close()

    workflow_id = asyncio.run(started())
    done = subprocess.run(
        [sys.executable, "-m", "kadence.ops.cli", "workflow", "reset", "-w", workflow_id, "--type", "FirstWorkflowTask",
         "--reason", "from the shell", "--json"], env=stack.env, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert '"run_id"' in done.stdout
    refused = subprocess.run(
        [sys.executable, "-m", "kadence.ops.cli", "workflow", "reset", "-w", workflow_id, "--reason", "no point"],
        env=stack.env, capture_output=True, text=True, timeout=60,
    )
    assert refused.returncode == 2 and "--event-id or --type" in refused.stderr
