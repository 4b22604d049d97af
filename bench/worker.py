"""The benchmark's worker, in its own process: `python -m bench.worker`."""

import uvloop

from bench.bench_workflows import TASK_QUEUE, BenchWorkflow, echo_input
from kadence.client import Client
from kadence.worker import Worker


async def main() -> None:
    client = await Client.connect()
    await Worker(client, task_queue=TASK_QUEUE, workflows=[BenchWorkflow], activities=[echo_input]).run()


if __name__ == "__main__":
    uvloop.run(main())
