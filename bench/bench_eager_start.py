"""Eager workflow start against the task queue: start-to-result of workflows one at a time, with and
without request_eager_start, in alternating blocks on one local stack (two stacks differ more than
the two ways do), the worker in the client's process; then of starts right after a worker of a new
queue starts, as temporalio's eager start sample starts one (--fresh-workers of each way).

    python -m bench.bench_eager_start [--workload no-activity|one-activity|...] [--blocks 20] [--per-block 20] [--fresh-workers 6]

Prints each way's p50, p90 and p99 and how many starts the worker took eagerly, with the broker's
produce-to-consume round trip measured in the same run. bench.bench_workflows --eager measures one
way per stack, with its CPU and records per workflow.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import uvloop

from bench.bench_workflows import TASK_QUEUE, WORKLOADS, bench_worker, broker_round_trip, echo_input, percentile, run_workflows
from bench.local import add_broker_option, describe_broker
from kadence.client import Client
from kadence.dev.local_stack import PROCESS_LAYOUTS, LocalStack
from kadence.worker import Worker

WARM_UP = 200  # each way, before the measured blocks


async def right_after_worker_start(client: Client, workload: str, eager: bool) -> float:
    """Milliseconds from the start to the result of a workflow started as a new worker of a queue of
    its own starts: its consumers have no partitions yet, so a task from the queue waits for them."""
    task_queue = f"{TASK_QUEUE}-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=task_queue, workflows=list(WORKLOADS.values()), activities=[echo_input]):
        began = time.perf_counter()
        value = f"fresh-{uuid.uuid4().hex[:8]}"
        handle = await client.start_workflow(WORKLOADS[workload].run, value, id=value, task_queue=task_queue, request_eager_start=eager)
        assert await handle.result() == value
        return (time.perf_counter() - began) * 1000


async def compare(stack: LocalStack, workload: str, blocks: int, per_block: int, fresh_workers: int) -> None:
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
    latencies: dict[bool, list[float]] = {False: [], True: []}
    taken: list[bool] = []
    async with bench_worker(client):
        for eager in (False, True):
            await run_workflows(client, workload, WARM_UP, 1, eager=eager)
        for block in range(blocks):
            for eager in (False, True) if block % 2 == 0 else (True, False):
                _, measured = await run_workflows(client, workload, per_block, 1, eager=eager, taken=taken if eager else None)
                latencies[eager] += measured
    fresh: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(fresh_workers):
        for eager in (False, True):
            fresh[eager].append(await right_after_worker_start(client, workload, eager))
    await client.close()
    round_trip = broker_round_trip(stack.settings, 500)
    print(describe_broker(stack))
    print(f"workflows:            {blocks * per_block} each way ({workload}), one at a time, in {blocks} alternating blocks")
    for eager, way in ((False, "through the queue:"), (True, "eager start:")):
        samples = latencies[eager]
        print(f"{way:<22}p50 {percentile(samples, 50):.2f} ms, p90 {percentile(samples, 90):.2f} ms, p99 {percentile(samples, 99):.2f} ms")
    print(f"taken eagerly:        {sum(taken)} of {len(taken)}")
    if fresh_workers:
        print(f"right after a worker starts, median of {fresh_workers}: through the queue {statistics.median(fresh[False]):.0f} ms, "
              f"eager start {statistics.median(fresh[True]):.0f} ms")
    print(f"broker round trip:    p50 {percentile(round_trip, 50):.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=list(WORKLOADS), default="no-activity")
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--per-block", type=int, default=20)
    parser.add_argument("--fresh-workers", type=int, default=6)
    add_broker_option(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="kadence-bench-") as data_dir:
        stack = LocalStack(Path(data_dir), broker_kind=args.broker)
        stack.start(PROCESS_LAYOUTS["one"])
        try:
            uvloop.run(compare(stack, args.workload, args.blocks, args.per_block, args.fresh_workers))
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
