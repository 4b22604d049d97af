"""A saga: book a flight, a hotel and a car; when a step fails for good, undo the steps that
succeeded, in reverse order, and report the failure.

Run it against a local stack: `kadence dev --run "python examples/trip.py"`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import uvloop

from kadence import activity, workflow
from kadence.client import Client
from kadence.common import RetryPolicy
from kadence.exceptions import ActivityError, ApplicationError, FailureError
from kadence.worker import Worker

TASK_QUEUE = "trips"


@dataclass
class Trip:
    traveller: str
    car_class: str = "compact"


@activity.defn
async def book_flight(trip: Trip) -> str:
    return f"flight-for-{trip.traveller}"


@activity.defn
async def book_hotel(trip: Trip) -> str:
    return f"hotel-for-{trip.traveller}"


@activity.defn
async def book_car(trip: Trip) -> str:
    if trip.car_class == "limousine":
        raise ApplicationError("no limousine available", type="SoldOut", non_retryable=True)
    return f"car-for-{trip.traveller}"


@activity.defn
async def cancel_booking(booking: str) -> str:
    return f"cancelled {booking}"


@workflow.defn
class TripWorkflow:
    @workflow.run
    async def run(self, trip: Trip) -> list[str]:
        options: dict[str, Any] = {"start_to_close_timeout": timedelta(seconds=10), "retry_policy": RetryPolicy(maximum_attempts=3)}
        booked: list[str] = []
        steps: list[Callable[..., Any]] = [book_flight, book_hotel, book_car]
        try:
            for step in steps:
                booked.append(await workflow.execute_activity(step, trip, **options))
        except ActivityError as failure:
            undone = [await workflow.execute_activity(cancel_booking, booking, **options) for booking in reversed(booked)]
            reason = failure.cause
            return [f"failed: {reason.message if isinstance(reason, FailureError) else reason}", *undone]
        return booked


async def main() -> None:
    client = await Client.connect()
    async with Worker(client, task_queue=TASK_QUEUE, workflows=[TripWorkflow],
                      activities=[book_flight, book_hotel, book_car, cancel_booking]):
        for car_class in ("compact", "limousine"):
            result = await client.execute_workflow(TripWorkflow.run, Trip("ada", car_class), id=f"trip-{car_class}-{os.getpid()}",
                                                   task_queue=TASK_QUEUE)
            print(f"{car_class}: {result}")
    await client.close()


if __name__ == "__main__":
    uvloop.run(main())
