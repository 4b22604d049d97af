"""A heartbeating activity cancelled midway: an upload reports its progress in heartbeats (a
retried attempt resumes from the last one); the workflow cancels it when told to stop, and the
upload, an async activity, is cancelled where it awaits.

Run it against a local stack: `kadence dev --run "python examples/upload.py"`.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

import uvloop

from kadence import activity, workflow
from kadence.client import Client
from kadence.exceptions import ActivityError
from kadence.worker import Worker

TASK_QUEUE = "uploads"


@activity.defn
async def upload(chunks: int) -> str:
    start = activity.info().heartbeat_details[0] if activity.info().heartbeat_details else 0  # resume a retried attempt
    for chunk in range(start, chunks):
        await asyncio.sleep(0.1)  # send one chunk
        activity.heartbeat(chunk + 1)
    return f"uploaded {chunks} chunks"


@workflow.defn
class UploadWorkflow:
    def __init__(self) -> None:
        self.stop = False

    @workflow.signal
    def stop_upload(self) -> None:
        self.stop = True

    @workflow.run
    async def run(self, chunks: int) -> str:
        uploading = workflow.start_activity(upload, chunks, start_to_close_timeout=timedelta(minutes=10),
                                            heartbeat_timeout=timedelta(seconds=2))
        stopping = asyncio.ensure_future(workflow.wait_condition(lambda: self.stop))
        await asyncio.wait([uploading, stopping], return_when=asyncio.FIRST_COMPLETED)
        if uploading.done():
            stopping.cancel()
            return await uploading
        uploading.cancel()
        try:
            await uploading
        except ActivityError:  # caused by CancelledError, as temporalio raises it
            pass
        return "upload stopped"


async def main() -> None:
    client = await Client.connect()
    async with Worker(client, task_queue=TASK_QUEUE, workflows=[UploadWorkflow], activities=[upload]):
        handle = await client.start_workflow(UploadWorkflow.run, 1000, id=f"upload-{os.getpid()}", task_queue=TASK_QUEUE)
        await asyncio.sleep(1)
        await handle.signal(UploadWorkflow.stop_upload)
        print("result:", await handle.result())
    await client.close()


if __name__ == "__main__":
    uvloop.run(main())
