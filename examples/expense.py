"""Signals and queries: an expense report waits for a manager's decision, which arrives as a
signal; anyone can ask its status with a query. Without a decision in time it escalates.

Run it against a local stack: `kadence dev --run "python examples/expense.py"`.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

import uvloop

from kadence import activity, workflow
from kadence.client import Client
from kadence.worker import Worker

TASK_QUEUE = "expenses"


@activity.defn
async def notify(message: str) -> str:
    return f"sent: {message}"  # a real activity would send an email or a chat message


@workflow.defn
class ExpenseWorkflow:
    def __init__(self) -> None:
        self.status = "submitted"
        self.decision: tuple[str, str] | None = None

    @workflow.signal
    def decide(self, approved: bool, manager: str) -> None:
        self.decision = ("approved" if approved else "rejected", manager)

    @workflow.query
    def current_status(self) -> str:
        return self.status

    @workflow.run
    async def run(self, amount: float, decision_within_s: float = 3600) -> str:
        self.status = "awaiting decision"
        try:
            await workflow.wait_condition(lambda: self.decision is not None, timeout=timedelta(seconds=decision_within_s))
        except asyncio.TimeoutError:
            self.status = "escalated"
            await workflow.execute_activity(notify, f"expense of {amount} waits for a decision",
                                            start_to_close_timeout=timedelta(seconds=10))
            await workflow.wait_condition(lambda: self.decision is not None)
        assert self.decision is not None
        verdict, manager = self.decision
        self.status = verdict
        await workflow.execute_activity(notify, f"expense of {amount} {verdict} by {manager}", start_to_close_timeout=timedelta(seconds=10))
        return f"{verdict} by {manager}"


async def main() -> None:
    client = await Client.connect()
    report_id = f"expense-{os.getpid()}"
    async with Worker(client, task_queue=TASK_QUEUE, workflows=[ExpenseWorkflow], activities=[notify]):
        handle = await client.start_workflow(ExpenseWorkflow.run, 120.0, id=report_id, task_queue=TASK_QUEUE)
        print("status:", await handle.query(ExpenseWorkflow.current_status))
        await handle.signal(ExpenseWorkflow.decide, args=[True, "grace"])
        print("result:", await handle.result())
    await client.close()


if __name__ == "__main__":
    uvloop.run(main())
