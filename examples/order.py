"""The seed's order workflow: charge the payment (10 s start-to-close, at most 3 attempts), then
ship the order, or compensate when the payment failed for good.

Run it against a local stack: `kadence dev --run "python examples/order.py"`. With the argument
`worker` it only runs the worker, until SIGTERM: the example worker Deployment in deploy/ runs
`python -m examples.order worker`, and the start Job starts orders with `kadence workflow start`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass
from datetime import timedelta

import uvloop

from kadence import activity, workflow
from kadence.client import Client
from kadence.common import RetryPolicy
from kadence.exceptions import ActivityError
from kadence.protocol.logs import configure_logging
from kadence.protocol.observability import serve
from kadence.protocol.runner import refusing_bad_settings
from kadence.worker import Worker

TASK_QUEUE = "orders"


@dataclass
class Order:
    order_id: str
    amount: float


@activity.defn
async def process_payment(order: Order) -> str:
    # Here a real activity would call the payment gateway.
    if order.amount <= 0:
        raise ValueError(f"cannot charge {order.amount}")
    return f"payment_success_{order.order_id}"


@activity.defn
async def ship_order(order: Order) -> str:
    return f"shipped_{order.order_id}"


@activity.defn
async def cancel_order(order: Order) -> str:
    return f"cancelled_{order.order_id}"


@workflow.defn
class OrderWorkflow:
    @workflow.run
    async def run(self, order: Order) -> str:
        try:
            payment = await workflow.execute_activity(
                process_payment, order,
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=3),
            )
        except ActivityError:
            # Compensation: the payment failed for good.
            return await workflow.execute_activity(cancel_order, order, start_to_close_timeout=timedelta(seconds=10))
        if payment.startswith("payment_success"):
            return await workflow.execute_activity(ship_order, order, start_to_close_timeout=timedelta(seconds=10))
        return await workflow.execute_activity(cancel_order, order, start_to_close_timeout=timedelta(seconds=10))


def order_worker(client: Client) -> Worker:
    return Worker(client, task_queue=TASK_QUEUE, workflows=[OrderWorkflow], activities=[process_payment, ship_order, cancel_order])


async def run_worker() -> None:
    """The worker alone until SIGTERM, with /healthz, /readyz and /metrics on KADENCE_HTTP_PORT."""
    client = await Client.connect()
    worker = order_worker(client)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(worker.shutdown()))
    endpoints = await serve("order-worker", worker.readiness_problems)
    try:
        await worker.run()
    finally:
        if endpoints is not None:
            await endpoints.cleanup()
        await client.close()


async def main() -> None:
    client = await Client.connect()
    order_id = os.environ.get("ORDER_ID", f"order-{os.getpid()}")
    async with order_worker(client):
        result = await client.execute_workflow(OrderWorkflow.run, Order(order_id, 99.99), id=order_id, task_queue=TASK_QUEUE)
        print(f"workflow {order_id} result: {result}")
    await client.close()


if __name__ == "__main__":
    with refusing_bad_settings("order-worker"):
        configure_logging("order-worker")
        uvloop.run(run_worker() if sys.argv[1:] == ["worker"] else main())
