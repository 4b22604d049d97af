"""Queries: answered by the worker holding the run, or from a replay of its history."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest

from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import ApplicationError, WorkflowQueryFailedError, WorkflowQueryTimeoutError
from kadence.worker import Worker
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, ApprovalWorkflow


@pytest.mark.parametrize("cached", [True, False], ids=["from-the-cache", "replayed"])
async def test_a_query_reads_the_running_and_the_closed_workflow(client: Client, task_queue: str, cached: bool) -> None:
    workflow_id = f"queried-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES,
                      max_cached_workflows=1000 if cached else 0):
        handle = await client.start_workflow(ApprovalWorkflow.run, "order-5", id=workflow_id, task_queue=task_queue)
        await handle.signal(ApprovalWorkflow.add_note, "fragile")
        await handle.signal(ApprovalWorkflow.add_note, "gift")
        assert await handle.query(ApprovalWorkflow.notes_so_far) == "fragile, gift"
        assert await handle.query("notes_so_far", " + ") == "fragile + gift"
        assert await handle.query(ApprovalWorkflow.approver_name) is None
        with pytest.raises(WorkflowQueryFailedError) as unknown:
            await handle.query("nothing_like_this")
        assert isinstance(unknown.value.__cause__, ApplicationError) and "known queries" in str(unknown.value)

        await handle.signal(ApprovalWorkflow.approve, "carol")
        await handle.result()
        assert await handle.query("approved_by") == "carol"  # closed: replayed from its history


async def test_a_query_no_worker_answers_times_out_with_the_reason(client: Client, task_queue: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        handle = await client.start_workflow(ApprovalWorkflow.run, "order-6", id=f"unanswered-{uuid.uuid4()}", task_queue=task_queue)
        await handle.signal(ApprovalWorkflow.add_note, "before the worker stops")
    with pytest.raises(WorkflowQueryTimeoutError, match="is a worker polling task queue"):
        await handle.query(ApprovalWorkflow.notes_so_far, timeout=timedelta(seconds=1))
    await handle.terminate(reason="test over")


async def test_a_query_held_by_history_survives_its_restart(stack: LocalStack, client: Client, task_queue: str) -> None:
    """History holds a query while the run's workflow task is in flight, in memory only. Killed
    meanwhile, it forgets the query; the client's resend gets it answered, not timed out."""
    handle = await client.start_workflow(ApprovalWorkflow.run, "order-7", id=f"held-{uuid.uuid4()}", task_queue=task_queue)
    history_log = stack.data_dir / "logs" / "history.log"
    held_before = history_log.read_text().count(f"event=query_held workflow_id={handle.id}")
    # No worker yet: the first workflow task waits, so history holds the query.
    query = asyncio.ensure_future(handle.query(ApprovalWorkflow.notes_so_far, timeout=timedelta(seconds=60)))

    async def held() -> None:
        while history_log.read_text().count(f"event=query_held workflow_id={handle.id}") == held_before:
            await asyncio.sleep(0.05)

    await asyncio.wait_for(held(), 30)
    # A later command of the partition, recorded: the restarted service resumes past the query.
    await handle.signal(ApprovalWorkflow.add_note, "after the query")
    stack.kill_service("history")
    stack.start_service("history")
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        assert await query == "after the query"
        await handle.terminate(reason="test over")
