"""Task queues: which tasks reach workers, how workers share them, and what survives a crash."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path

import pytest

from kadence.client import Client
from kadence.local_stack import LocalStack
from kadence.worker import Worker
from tests.conftest import wait_for_event
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, ElsewhereWorkflow, touch


async def until_logged(caplog: pytest.LogCaptureFixture, event: str, timeout: float = 30) -> None:
    async def poll() -> None:
        while not any(event in record.getMessage() for record in caplog.records):
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), timeout)


async def test_an_activity_task_of_a_closed_execution_never_runs(
    stack: LocalStack, client: Client, task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kadence.worker")
    ran = tmp_path / "ran"
    activity_queue = f"{task_queue}-activities"
    workflow_id = f"closed-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS):
        handle = await client.start_workflow(ElsewhereWorkflow.run, args=[activity_queue, str(ran)], id=workflow_id, task_queue=task_queue)
        await wait_for_event(stack, workflow_id, "ActivityTaskScheduled", timeout=30)
        await handle.terminate(reason="closed before any worker took the task")

    async with Worker(client, task_queue=activity_queue, activities=[touch]):
        await until_logged(caplog, "event=activity_task_dropped")
    assert not ran.exists()
    assert any("cause=WORKFLOW_CLOSED" in r.getMessage() for r in caplog.records if "activity_task_dropped" in r.getMessage())


async def test_an_activity_task_past_its_schedule_to_start_deadline_is_not_dispatched(
    client: Client, task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kadence.worker")
    ran = tmp_path / "ran"
    activity_queue = f"{task_queue}-activities"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        outcome = await client.execute_workflow(
            ElsewhereWorkflow.run, args=[activity_queue, str(ran), 0.5], id=f"late-{uuid.uuid4()}", task_queue=task_queue,
        )
    assert outcome == "TimeoutError"

    async with Worker(client, task_queue=activity_queue, activities=[touch]):
        await until_logged(caplog, "event=activity_task_expired")
    assert not ran.exists()
