"""kadence.contrib.pydantic as temporalio's: pydantic models (and what pydantic validates) written
as JSON by pydantic and rebuilt from type hints, through a workflow and an activity on the stack."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from pydantic import BaseModel, ValidationError, field_validator

from kadence import activity, workflow
from kadence.client import Client
from kadence.contrib.pydantic import PydanticPayloadConverter, ToJsonOptions, pydantic_data_converter
from kadence.dev.local_stack import LocalStack
from kadence.worker import Worker


class Line(BaseModel):
    sku: str
    quantity: int = 1
    price: Decimal

    @field_validator("sku")
    @classmethod
    def upper(cls, sku: str) -> str:
        return sku.upper()


class Order(BaseModel):
    order_id: str
    placed_at: datetime
    lines: list[Line]
    note: str | None = None


class Invoice(BaseModel):
    order_id: str
    total: Decimal
    skus: set[str]
    issued_at: datetime


def test_models_round_trip_through_their_type_hints() -> None:
    converter = pydantic_data_converter.payload_converter
    order = Order(order_id="o-1", placed_at=datetime(2026, 12, 5, 3, 0, tzinfo=UTC), lines=[Line(sku="ab", price=Decimal("2.50"))])
    payloads = converter.to_payloads([order, [order], {"first": order}, None, b"raw"])
    assert payloads[0].metadata["encoding"] == b"json/plain"
    assert converter.from_payloads(payloads, [Order, list[Order], dict[str, Order], None, bytes]) == [
        order, [order], {"first": order}, None, b"raw",
    ]
    # Without a hint, plain JSON; with one, pydantic validates (and says what is wrong).
    assert converter.from_payload(payloads[0])["lines"] == [{"sku": "AB", "quantity": 1, "price": "2.50"}]
    with pytest.raises(ValidationError, match="placed_at"):
        converter.from_payload(converter.to_payload({"order_id": "o-2", "lines": []}), Order)
    # ToJsonOptions(exclude_unset=True) leaves out the fields a model was not given.
    unset = PydanticPayloadConverter(ToJsonOptions(exclude_unset=True)).to_payload(Line(sku="x", price=Decimal(1)))
    assert unset.data == b'{"sku":"X","price":"1"}'


def test_without_pydantic_the_module_says_which_extra_to_install() -> None:
    found = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['pydantic'] = None; import kadence.contrib.pydantic"],
        capture_output=True, text=True,
    )
    assert found.returncode == 1
    assert "kadence.contrib.pydantic needs the pydantic extra: pip install 'kadence[pydantic]'" in found.stderr


@activity.defn
async def invoice(order: Order) -> Invoice:
    assert isinstance(order, Order) and isinstance(order.lines[0], Line)
    total = sum((line.price * line.quantity for line in order.lines), Decimal(0))
    return Invoice(order_id=order.order_id, total=total, skus={line.sku for line in order.lines}, issued_at=order.placed_at)


@workflow.defn
class InvoiceOrder:
    @workflow.run
    async def run(self, order: Order) -> Invoice:
        assert isinstance(order.placed_at, datetime)
        return await workflow.execute_activity(invoice, order, start_to_close_timeout=timedelta(seconds=10))


async def test_a_workflow_and_an_activity_take_and_return_models(stack: LocalStack, task_queue: str) -> None:
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn, data_converter=pydantic_data_converter)
    order = Order(order_id=f"order-{uuid.uuid4()}", placed_at=datetime(2026, 12, 5, 3, 0, tzinfo=UTC), lines=[
        Line(sku="tea", quantity=2, price=Decimal("3.20")), Line(sku="cup", price=Decimal("7.00")),
    ])
    try:
        async with Worker(client, task_queue=task_queue, workflows=[InvoiceOrder], activities=[invoice]):
            result = await client.execute_workflow(InvoiceOrder.run, order, id=order.order_id, task_queue=task_queue)
    finally:
        await client.close()
    assert result == Invoice(order_id=order.order_id, total=Decimal("13.40"), skus={"TEA", "CUP"}, issued_at=order.placed_at)
