"""A workflow program typed the way a temporalio user types one. It is never run: tests/test_typing.py
has mypy (strict) check it, which must find nothing: the arguments and results of the client's and
the workflow API's calls are of the types of the workflow's, activities', signal's, query's and
update's methods. `assert_type` checks that a type flowed (a call typed Any would not pass it).

wrong_types.py, beside it, makes the mistakes these types must catch."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import assert_type

from kadence import activity, workflow
from kadence.client import Client, WithStartWorkflowOperation, WorkflowHandle, WorkflowUpdateHandle, WorkflowUpdateStage
from kadence.common import WorkflowIDConflictPolicy

TIMEOUT = timedelta(seconds=10)


@dataclass
class OrderInput:
    order_id: str
    quantity: int


@dataclass
class OrderResult:
    order_id: str
    total_cents: int


@dataclass
class Discount:
    percent: int


@activity.defn
async def price(order: OrderInput) -> int:
    return 250 * order.quantity


@activity.defn
def add_tax(cents: int, region: str) -> int:
    return cents * (120 if region == "EU" else 110) // 100


@activity.defn
async def notify() -> None:
    pass


class Inventory:
    """Activities as methods of an object holding what they share (registered as `activities=[inventory.reserve]`)."""

    def __init__(self, stock: dict[str, int]) -> None:
        self.stock = stock

    @activity.defn
    async def reserve(self, order: OrderInput) -> bool:
        return self.stock.get(order.order_id, 0) >= order.quantity


@workflow.defn
class ShippingWorkflow:
    def __init__(self) -> None:
        self.express = False

    @workflow.run
    async def run(self, order_id: str) -> str:
        await workflow.wait_condition(lambda: self.express, timeout=timedelta(days=1))
        return f"track-{order_id}"

    @workflow.signal
    def expedite(self) -> None:
        self.express = True


@workflow.defn
class OrderWorkflow:
    def __init__(self) -> None:
        self.approved = False
        self.discount = Discount(0)
        self.quantity = 0

    @workflow.run
    async def run(self, order: OrderInput) -> OrderResult:
        self.quantity = order.quantity
        cents: int = await workflow.execute_activity(price, order, start_to_close_timeout=TIMEOUT)
        taxed: int = await workflow.execute_activity(add_tax, cents, "EU", start_to_close_timeout=TIMEOUT)
        from_args = await workflow.execute_activity(add_tax, args=[cents, "EU"], start_to_close_timeout=TIMEOUT)
        assert_type(from_args, int)
        reserved: bool = await workflow.execute_activity_method(Inventory.reserve, order, start_to_close_timeout=TIMEOUT)
        checked: int = await workflow.execute_local_activity(price, order, start_to_close_timeout=TIMEOUT)
        local_tax = await workflow.execute_local_activity(add_tax, checked, "EU", start_to_close_timeout=TIMEOUT)
        assert_type(local_tax, int)
        pricing = workflow.start_activity(price, order, start_to_close_timeout=TIMEOUT)
        assert_type(pricing, workflow.ActivityHandle[int])
        assert_type(workflow.start_local_activity(notify, start_to_close_timeout=TIMEOUT), workflow.ActivityHandle[None])
        assert_type(workflow.start_activity_method(Inventory.reserve, order, start_to_close_timeout=TIMEOUT), workflow.ActivityHandle[bool])
        assert_type(await workflow.execute_local_activity_method(Inventory.reserve, order, start_to_close_timeout=TIMEOUT), bool)
        await workflow.execute_activity(notify, start_to_close_timeout=TIMEOUT)
        by_name = await workflow.execute_activity("price", order, start_to_close_timeout=TIMEOUT, result_type=int)  # by name: Any

        shipping = await workflow.start_child_workflow(ShippingWorkflow.run, order.order_id, id=f"ship-{order.order_id}")
        assert_type(shipping, workflow.ChildWorkflowHandle[ShippingWorkflow, str])
        await shipping.signal(ShippingWorkflow.expedite)
        tracking: str = await shipping
        label: str = await workflow.execute_child_workflow(ShippingWorkflow.run, f"{order.order_id}-label")
        courier = workflow.get_external_workflow_handle_for(ShippingWorkflow.run, f"ship-{order.order_id}")
        assert_type(courier, workflow.ExternalWorkflowHandle[ShippingWorkflow])
        await courier.signal(ShippingWorkflow.expedite)

        await workflow.wait_condition(lambda: self.approved)
        total = (taxed + from_args + await pricing + by_name) * (100 - self.discount.percent) // 100
        workflow.logger.info("%s %s %s %s", reserved, tracking, label, self.quantity)
        return OrderResult(order.order_id, total)

    @workflow.signal
    def approve(self) -> None:
        self.approved = True

    @workflow.signal
    async def set_discount(self, discount: Discount) -> None:
        self.discount = discount

    @workflow.query
    def current_discount(self) -> Discount:
        return self.discount

    @workflow.query
    def price_of(self, quantity: int) -> int:
        return 250 * quantity

    @workflow.update
    async def add_items(self, quantity: int) -> int:
        self.quantity += quantity
        return self.quantity

    @add_items.validator
    def validate_add_items(self, quantity: int) -> None:
        if quantity <= 0:
            raise ValueError("add at least one item")

    @workflow.update(name="clear")
    def clear_items(self) -> int:
        self.quantity = 0
        return self.quantity


async def place_order(client: Client) -> None:
    order = OrderInput("o-1", 3)
    result: OrderResult = await client.execute_workflow(OrderWorkflow.run, order, id="order-1", task_queue="orders")
    handle = await client.start_workflow(OrderWorkflow.run, order, id="order-2", task_queue="orders")
    assert_type(handle, WorkflowHandle[OrderWorkflow, OrderResult])
    await handle.signal(OrderWorkflow.approve)
    await handle.signal(OrderWorkflow.set_discount, Discount(10))
    discount: Discount = await handle.query(OrderWorkflow.current_discount)
    assert_type(await handle.query(OrderWorkflow.price_of, 4), int)
    added: int = await handle.execute_update(OrderWorkflow.add_items, 2)
    assert_type(await handle.execute_update(OrderWorkflow.clear_items), int)
    update = await handle.start_update(OrderWorkflow.add_items, 1, wait_for_stage=WorkflowUpdateStage.ACCEPTED)
    assert_type(update, WorkflowUpdateHandle[int])
    assert_type(await update.result(), int)
    assert_type(handle.get_update_handle_for(OrderWorkflow.add_items, update.id), WorkflowUpdateHandle[int])
    finished: OrderResult = await handle.result()

    again = client.get_workflow_handle_for(OrderWorkflow.run, "order-1")
    assert_type(again, WorkflowHandle[OrderWorkflow, OrderResult])
    assert_type(await again.result(), OrderResult)
    untyped = client.get_workflow_handle("order-1")  # by id alone: WorkflowHandle[Any, Any]
    await untyped.signal("approve")

    operation = WithStartWorkflowOperation(
        OrderWorkflow.run, order, id="order-3", task_queue="orders", id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    assert_type(operation, WithStartWorkflowOperation[OrderWorkflow, OrderResult])
    count: int = await client.execute_update_with_start_workflow(OrderWorkflow.add_items, 1, start_workflow_operation=operation)
    assert_type(await operation.workflow_handle(), WorkflowHandle[OrderWorkflow, OrderResult])
    operation = WithStartWorkflowOperation(
        OrderWorkflow.run, order, id="order-4", task_queue="orders", id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    accepted = await client.start_update_with_start_workflow(
        OrderWorkflow.add_items, 2, start_workflow_operation=operation, wait_for_stage=WorkflowUpdateStage.ACCEPTED,
    )
    assert_type(accepted, WorkflowUpdateHandle[int])

    signalled = await client.signal_with_start(
        OrderWorkflow.run, order, signal=OrderWorkflow.approve, id="order-5", task_queue="orders",
    )
    assert_type(signalled, WorkflowHandle[OrderWorkflow, OrderResult])
    by_name = await client.execute_workflow("OrderWorkflow", order, id="order-6", task_queue="orders", result_type=OrderResult)
    print(result, discount, added, finished, count, by_name)
