"""A worker in its own process, for tests that kill workers: `python -m tests.worker_main QUEUE IDENTITY`."""

from __future__ import annotations

import sys

import uvloop

from kadence.client import Client
from kadence.protocol.logs import configure_logging
from kadence.worker import Worker
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS


async def main(task_queue: str, identity: str) -> None:
    client = await Client.connect(identity=identity)
    worker = Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES)
    await worker.run()


if __name__ == "__main__":
    configure_logging("test-worker")
    uvloop.run(main(sys.argv[1], sys.argv[2]))
