"""Mistakes the typed client and workflow API must catch: tests/test_typing.py has mypy (strict)
check this module, which must fail on each line marked `# wrong` and on no other. Never run.

Each mistake is a call of one line: an argument of the wrong type, or a result taken as the wrong type."""

from __future__ import annotations

from datetime import timedelta

from kadence import workflow
from kadence.client import Client
from tests.typing.typed_example import (
    Discount,
    Inventory,
    OrderInput,
    OrderResult,
    OrderWorkflow,
    ShippingWorkflow,
    add_tax,
    price,
)

TIMEOUT = timedelta(seconds=10)


async def client_mistakes(client: Client) -> None:
    order = OrderInput("o-1", 3)
    await client.execute_workflow(OrderWorkflow.run, "o-1", id="order-1", task_queue="orders")  # wrong
    total: int = await client.execute_workflow(OrderWorkflow.run, order, id="order-1", task_queue="orders")  # wrong
    await client.execute_workflow(OrderWorkflow.run, order, id="order-1", task_queue="orders", run_timeout=60)  # wrong
    handle = await client.start_workflow(OrderWorkflow.run, order, id="order-2", task_queue="orders")
    percent: int = await handle.query(OrderWorkflow.current_discount)  # wrong
    await handle.query(OrderWorkflow.price_of, "four")  # wrong
    await handle.signal(OrderWorkflow.set_discount, 10)  # wrong
    await handle.signal(ShippingWorkflow.expedite)  # wrong
    await handle.execute_update(OrderWorkflow.add_items, "2")  # wrong
    summary: str = await handle.result()  # wrong
    result: OrderResult = await handle.result()
    discount: Discount = await handle.query(OrderWorkflow.current_discount)
    print(total, percent, summary, result, discount)


@workflow.defn
class MistakenWorkflow:
    @workflow.run
    async def run(self, order: OrderInput) -> None:
        await workflow.execute_activity(price, order.order_id, start_to_close_timeout=TIMEOUT)  # wrong
        label: str = await workflow.execute_activity(price, order, start_to_close_timeout=TIMEOUT)  # wrong
        await workflow.execute_activity(add_tax, 100, 20, start_to_close_timeout=TIMEOUT)  # wrong
        await workflow.execute_activity_method(Inventory.reserve, order.quantity, start_to_close_timeout=TIMEOUT)  # wrong
        local: str = await workflow.execute_local_activity(price, order, start_to_close_timeout=TIMEOUT)  # wrong
        await workflow.execute_child_workflow(ShippingWorkflow.run, order, id="ship-1")  # wrong
        tracking: int = await workflow.execute_child_workflow(ShippingWorkflow.run, order.order_id, id="ship-2")  # wrong
        child = await workflow.start_child_workflow(ShippingWorkflow.run, order.order_id, id="ship-3")
        await child.signal(OrderWorkflow.approve)  # wrong
        cents: int = await workflow.execute_activity(price, order, start_to_close_timeout=TIMEOUT)
        print(label, local, tracking, cents)
