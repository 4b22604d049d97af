"""Child workflows: a batch starts one child workflow per item, at most `parallelism` at a
time, and collects their results; a failed child is reported, not fatal.

Run it against a local stack: `kadence dev --run "python examples/batch.py"`.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

import uvloop

from kadence import activity, workflow
from kadence.client import Client
from kadence.exceptions import ApplicationError, ChildWorkflowError, FailureError
from kadence.worker import Worker

TASK_QUEUE = "batches"


@activity.defn
async def resize_image(name: str) -> str:
    if name.endswith(".txt"):
        raise ApplicationError(f"{name} is not an image", type="NotAnImage", non_retryable=True)
    return f"thumb-{name}"


@workflow.defn
class ImageWorkflow:
    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(resize_image, name, start_to_close_timeout=timedelta(seconds=30))


@workflow.defn
class BatchWorkflow:
    @workflow.run
    async def run(self, names: list[str], parallelism: int = 4) -> dict[str, str]:
        slots = asyncio.Semaphore(parallelism)

        async def one(name: str) -> tuple[str, str]:
            async with slots:
                child_id = f"{workflow.info().workflow_id}/{name}"
                try:
                    return name, await workflow.execute_child_workflow(ImageWorkflow.run, name, id=child_id)
                except ChildWorkflowError as err:
                    reason = err.cause.cause if err.cause else err
                    return name, f"failed: {reason.message if isinstance(reason, FailureError) else reason}"

        return dict(await asyncio.gather(*(one(name) for name in names)))


async def main() -> None:
    client = await Client.connect()
    async with Worker(client, task_queue=TASK_QUEUE, workflows=[BatchWorkflow, ImageWorkflow], activities=[resize_image]):
        result = await client.execute_workflow(
            BatchWorkflow.run, args=[["a.png", "b.jpg", "notes.txt"]], id=f"batch-{os.getpid()}", task_queue=TASK_QUEUE,
        )
        print("result:", result)
    await client.close()


if __name__ == "__main__":
    uvloop.run(main())
