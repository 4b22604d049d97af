"""The examples' workflows, run against the real stack (their `main()` does the same on a `kadence dev` stack)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from examples.batch import BatchWorkflow, ImageWorkflow, resize_image
from examples.expense import ExpenseWorkflow, notify
from examples.subscription import Subscription, SubscriptionWorkflow, charge
from examples.trip import Trip, TripWorkflow, book_car, book_flight, book_hotel, cancel_booking
from examples.upload import UploadWorkflow, upload
from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.worker import Worker
from tests.conftest import audit_of

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = [ExpenseWorkflow, BatchWorkflow, ImageWorkflow, TripWorkflow, SubscriptionWorkflow, UploadWorkflow]
ACTIVITIES = [notify, resize_image, book_flight, book_hotel, book_car, cancel_booking, charge, upload]


@pytest.mark.also_on_tansu
def test_the_order_example_runs_as_the_readme_runs_it(stack: LocalStack) -> None:
    """What the README's first command runs on a fresh `kadence dev` stack, on this stack's settings."""
    order_id = f"order-{uuid.uuid4()}"
    ran = subprocess.run([sys.executable, "examples/order.py"], env={**stack.env, "ORDER_ID": order_id}, cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert f"workflow {order_id} result: shipped_{order_id}" in ran.stdout


async def test_expense_waits_for_a_signal_answers_queries_and_escalates_when_late(client: Client, task_queue: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=WORKFLOWS, activities=ACTIVITIES):
        decided = await client.start_workflow(ExpenseWorkflow.run, 50.0, id=f"expense-{uuid.uuid4()}", task_queue=task_queue)
        assert await decided.query(ExpenseWorkflow.current_status) == "awaiting decision"
        await decided.signal(ExpenseWorkflow.decide, args=[True, "grace"])
        assert await decided.result() == "approved by grace"
        assert await decided.query(ExpenseWorkflow.current_status) == "approved"

        late = await client.start_workflow(ExpenseWorkflow.run, args=[900.0, 0.5], id=f"expense-{uuid.uuid4()}", task_queue=task_queue)
        while await late.query(ExpenseWorkflow.current_status) != "escalated":
            await asyncio.sleep(0.1)
        await late.signal(ExpenseWorkflow.decide, args=[False, "heidi"])
        assert await late.result() == "rejected by heidi"


async def test_batch_runs_a_child_per_item_and_reports_the_failed_one(client: Client, task_queue: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=WORKFLOWS, activities=ACTIVITIES):
        result = await client.execute_workflow(BatchWorkflow.run, args=[["a.png", "b.jpg", "c.gif", "notes.txt"], 2],
                                               id=f"batch-{uuid.uuid4()}", task_queue=task_queue)
    assert result == {
        "a.png": "thumb-a.png", "b.jpg": "thumb-b.jpg", "c.gif": "thumb-c.gif", "notes.txt": "failed: notes.txt is not an image",
    }


async def test_trip_books_everything_or_undoes_what_it_booked(client: Client, task_queue: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=WORKFLOWS, activities=ACTIVITIES):
        booked = await client.execute_workflow(TripWorkflow.run, Trip("ada"), id=f"trip-{uuid.uuid4()}", task_queue=task_queue)
        undone = await client.execute_workflow(TripWorkflow.run, Trip("bob", "limousine"), id=f"trip-{uuid.uuid4()}", task_queue=task_queue)
    assert booked == ["flight-for-ada", "hotel-for-ada", "car-for-ada"]
    assert undone == ["failed: no limousine available", "cancelled hotel-for-bob", "cancelled flight-for-bob"]


async def test_subscription_charges_each_period_across_continue_as_new_runs(stack: LocalStack, client: Client, task_queue: str) -> None:
    workflow_id = f"subscription-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=WORKFLOWS, activities=ACTIVITIES):
        demo = Subscription("ada", period_s=0.2, cycles_left=5, cycles_per_run=2)
        result = await client.execute_workflow(SubscriptionWorkflow.run, demo, id=workflow_id, task_queue=task_queue)
    assert result == "ada: 5 cycles charged"
    runs = [key for key in audit_of(stack, workflow_id).runs if key[0] == workflow_id]
    assert len(runs) == 3  # 2 + 2 + 1 cycles


async def test_upload_heartbeats_and_is_cancelled_midway(stack: LocalStack, client: Client, task_queue: str) -> None:
    workflow_id = f"upload-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=WORKFLOWS, activities=ACTIVITIES):
        handle = await client.start_workflow(UploadWorkflow.run, 1000, id=workflow_id, task_queue=task_queue)
        await asyncio.sleep(1)
        await handle.signal(UploadWorkflow.stop_upload)
        assert await asyncio.wait_for(handle.result(), timedelta(seconds=30).total_seconds()) == "upload stopped"
    kinds = audit_of(stack, workflow_id).event_types(workflow_id, handle.result_run_id)
    assert "ActivityTaskCancelRequested" in kinds and kinds[-1] == "WorkflowExecutionCompleted"
