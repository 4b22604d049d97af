"""kadence.testing's environments as a test suite uses them, next to the broker's round trip.

    python -m bench.bench_test_environment [--tests 20] [--days 30]

Times `WorkflowEnvironment.start_local()` to a connected client and its `shutdown()`, then
`start_time_skipping()`, and on it `--tests` tests as temporalio's users write them (a worker per
test, `execute_workflow` of a workflow that sleeps `--days`): each test's wall time (the first,
cold, apart), the suite's, and the CPU-seconds each of the stack's processes spent in the tests.
The same tests on temporalio with Temporal's dev server are bench/peer_temporal_testing.py,
run with the peers' Python (../shared/peers/).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from datetime import timedelta

import uvloop

from bench.bench_workflows import broker_round_trip, percentile
from bench.local import cpu_seconds, stack_processes
from kadence import workflow
from kadence.testing import WorkflowEnvironment
from kadence.worker import Worker


@workflow.defn
class ReminderWorkflow:
    @workflow.run
    async def run(self, days: int) -> float:
        started = workflow.now()
        await workflow.sleep(timedelta(days=days))
        return (workflow.now() - started) / timedelta(days=1)


async def one_test(env: WorkflowEnvironment, days: int) -> tuple[float, float]:
    """A test as a temporalio user writes it: its own worker (on a task queue of its own), one
    workflow; its wall seconds, and the workflow's (execute_workflow) within them."""
    began = time.perf_counter()
    task_queue = f"bench-{uuid.uuid4()}"
    async with Worker(env.client, task_queue=task_queue, workflows=[ReminderWorkflow]):
        executed = time.perf_counter()
        slept = await env.client.execute_workflow(ReminderWorkflow.run, days, id=f"reminder-{uuid.uuid4()}", task_queue=task_queue)
        workflow_s = time.perf_counter() - executed
    assert slept >= days, f"slept {slept} days of {days}"
    return time.perf_counter() - began, workflow_s


async def bench(tests: int, days: int) -> None:
    began = time.perf_counter()
    local = await WorkflowEnvironment.start_local()
    started_s = time.perf_counter() - began
    began = time.perf_counter()
    await local.shutdown()
    print(f"start_local:          {started_s:.2f} s to a connected client; shutdown {time.perf_counter() - began:.2f} s")

    began = time.perf_counter()
    env = await WorkflowEnvironment.start_time_skipping()
    print(f"start_time_skipping:  {time.perf_counter() - began:.2f} s to a connected client")
    try:
        stack = env._stack  # type: ignore[attr-defined]  # the environment's own: its processes' CPU
        round_trip_ms = statistics.median(broker_round_trip(stack.settings, 50))
        processes = stack_processes(stack)
        cpu_before = {name: cpu_seconds(pid, with_children=True) for name, pid in processes.items()}
        suite_began = time.perf_counter()
        timed = [await one_test(env, days) for _ in range(tests)]
        suite_s = time.perf_counter() - suite_began
        cpu = {name: cpu_seconds(pid, with_children=True) - cpu_before[name] for name, pid in processes.items()}
    finally:
        began = time.perf_counter()
        await env.shutdown()
        print(f"shutdown:             {time.perf_counter() - began:.2f} s")
    print(f"broker round trip:    {round_trip_ms:.1f} ms (median of 50)")
    for name, samples in (("a test", [test for test, _ in timed]), (f"a {days}-day sleep", [run for _, run in timed])):
        warm = samples[1:] or samples
        print(f"{name + ':':<22}first {samples[0] * 1000:.0f} ms; then p50 {percentile(warm, 50) * 1000:.0f} ms, "
              f"p99 {percentile(warm, 99) * 1000:.0f} ms ({percentile(warm, 50) * 1000 / round_trip_ms:.0f} broker round trips)")
    print(f"{tests} tests:{'':<13}{suite_s:.2f} s with a session environment")
    print("CPU-seconds in the tests: " + ", ".join(f"{name} {seconds:.2f}" for name, seconds in sorted(cpu.items())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", type=int, default=20)
    parser.add_argument("--days", type=int, default=30)
    args = parser.parse_args()
    uvloop.run(bench(args.tests, args.days))


if __name__ == "__main__":
    main()
