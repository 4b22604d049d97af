"""Testing a workflow as temporalio's users do: one time-skipping environment for the session, a
worker per test. The expense report's hour for a decision passes in a moment.

Run it: `.venv/bin/pytest examples/test_expense.py` (it starts a local stack of its own).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from examples.expense import ExpenseWorkflow, notify
from kadence.testing import WorkflowEnvironment
from kadence.worker import Worker


@pytest.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    async with await WorkflowEnvironment.start_time_skipping() as env:
        yield env


async def test_an_expense_nobody_decides_on_escalates_after_an_hour(env: WorkflowEnvironment) -> None:
    async with Worker(env.client, task_queue="expenses", workflows=[ExpenseWorkflow], activities=[notify]):
        handle = await env.client.start_workflow(ExpenseWorkflow.run, 120.0, id="expense-late", task_queue="expenses")
        assert await handle.query(ExpenseWorkflow.current_status) == "awaiting decision"
        await env.sleep(timedelta(hours=2))  # past the hour the manager had
        assert await handle.query(ExpenseWorkflow.current_status) == "escalated"
        await handle.signal(ExpenseWorkflow.decide, args=[True, "grace"])
        assert await handle.result() == "approved by grace"
