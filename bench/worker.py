"""A benchmark's worker, in its own process: `python -m bench.worker [workflows|open-runs]`
(the bench it serves; workflows when not named)."""

import sys
from collections.abc import Callable

import uvloop

from kadence.client import Client
from kadence.worker import Worker


def worker_of(bench: str) -> Callable[[Client], Worker]:
    if bench == "workflows":
        from bench.bench_workflows import bench_worker
        return bench_worker
    if bench == "open-runs":
        from bench.bench_open_runs import open_runs_worker
        return open_runs_worker
    raise SystemExit(f"no benchmark worker named {bench!r}: name workflows or open-runs")


async def main(bench: str) -> None:
    client = await Client.connect()
    await worker_of(bench)(client).run()


if __name__ == "__main__":
    uvloop.run(main(sys.argv[1] if len(sys.argv) > 1 else "workflows"))
