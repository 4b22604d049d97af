"""The benchmark's worker, in its own process: `python -m bench.worker`."""

import uvloop

from bench.bench_workflows import bench_worker
from kadence.client import Client


async def main() -> None:
    client = await Client.connect()
    await bench_worker(client).run()


if __name__ == "__main__":
    uvloop.run(main())
