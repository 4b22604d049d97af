"""A long timer with continue-as-new: a subscription charges once per period, forever; every
`cycles_per_run` periods it continues as new, so its history stays short.

Run it against a local stack: `kadence dev --run "python examples/subscription.py"`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import uvloop

from kadence import activity, workflow
from kadence.client import Client
from kadence.worker import Worker

TASK_QUEUE = "subscriptions"


@dataclass
class Subscription:
    customer: str
    period_s: float = 30 * 24 * 3600.0
    cycles_left: int = -1  # -1: until cancelled
    cycles_per_run: int = 12
    charged: int = 0


@activity.defn
async def charge(customer: str, cycle: int) -> str:
    return f"charged {customer} for cycle {cycle}"


@workflow.defn
class SubscriptionWorkflow:
    @workflow.run
    async def run(self, sub: Subscription) -> str:
        for _ in range(sub.cycles_per_run):
            if sub.cycles_left == 0:
                return f"{sub.customer}: {sub.charged} cycles charged"
            await workflow.sleep(timedelta(seconds=sub.period_s))  # a durable timer: a month is fine
            await workflow.execute_activity(charge, args=[sub.customer, sub.charged + 1], start_to_close_timeout=timedelta(seconds=30))
            sub.charged += 1
            sub.cycles_left -= 1
        workflow.continue_as_new(sub)


async def main() -> None:
    client = await Client.connect()
    async with Worker(client, task_queue=TASK_QUEUE, workflows=[SubscriptionWorkflow], activities=[charge]):
        demo = Subscription("ada", period_s=0.5, cycles_left=5, cycles_per_run=2)
        print(await client.execute_workflow(SubscriptionWorkflow.run, demo, id=f"subscription-{os.getpid()}", task_queue=TASK_QUEUE))
    await client.close()


if __name__ == "__main__":
    uvloop.run(main())
