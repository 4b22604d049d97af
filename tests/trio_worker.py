"""A worker and a starter on trio, as temporalio's trio sample runs them: trio_asyncio's loop, its
executor for the sync activities and the workflow tasks. Run as a program by
tests/test_worker_options.py (`python -m tests.trio_worker TASK_QUEUE`, the stack in KADENCE_*),
it prints the workflow's result and whether every activation ran off the loop's thread, as JSON.

trio_asyncio is imported first: it replaces asyncio.get_running_loop, which psycopg binds when it
is imported (docs/temporal-differences.md, "Workers")."""

from __future__ import annotations

import trio_asyncio  # isort: skip  # first: see above

import asyncio
import json
import sys
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import trio

from kadence import activity, workflow
from kadence.client import Client
from kadence.worker import PollerBehaviorAutoscaling, PollerBehaviorSimpleMaximum, Worker

ACTIVATION_THREADS: set[int] = set()


@trio_asyncio.trio_as_aio
async def wave_in_trio(name: str) -> str:
    await trio.sleep(0.01)
    return f"{name} waved from trio"


@activity.defn
async def wave(name: str) -> str:
    await asyncio.sleep(0.01)
    return await wave_in_trio(name)


@activity.defn
def nod(name: str) -> str:
    time.sleep(0.01)
    return f"{name} nodded"


@workflow.defn
class GreetingsWorkflow:
    @workflow.run
    async def run(self, name: str) -> list[str]:
        ACTIVATION_THREADS.add(threading.get_ident())  # bookkeeping for the test, not workflow state
        return [
            await workflow.execute_activity(wave, name, start_to_close_timeout=timedelta(seconds=30)),
            await workflow.execute_activity(nod, name, start_to_close_timeout=timedelta(seconds=30)),
        ]


class CountingExecutor(trio_asyncio.TrioExecutor):
    """trio_asyncio's executor (the only kind its loop runs work on), counting what it is given."""

    submitted = 0

    async def submit(self, func: Any, *args: Any) -> Any:
        CountingExecutor.submitted += 1
        return await super().submit(func, *args)


@trio_asyncio.aio_as_trio
async def main(task_queue: str) -> dict[str, Any]:
    client = await Client.connect()
    try:
        with CountingExecutor(max_workers=8) as executor:
            async with Worker(
                client, task_queue=task_queue, workflows=[GreetingsWorkflow], activities=[wave, nod],
                activity_executor=executor, workflow_task_executor=executor, max_concurrent_workflow_tasks=2,
                workflow_task_poller_behavior=PollerBehaviorSimpleMaximum(2),
                activity_task_poller_behavior=PollerBehaviorAutoscaling(minimum=1, initial=2, maximum=4),
            ):
                result = await client.execute_workflow(GreetingsWorkflow.run, "ada", id=f"trio-{uuid.uuid4()}", task_queue=task_queue)
    finally:
        await client.close()
    return {
        "result": result, "submitted": CountingExecutor.submitted,
        "activations_off_the_loop": bool(ACTIVATION_THREADS) and threading.get_ident() not in ACTIVATION_THREADS,
    }


if __name__ == "__main__":
    print(json.dumps(trio_asyncio.run(main, sys.argv[1])))
