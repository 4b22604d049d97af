"""Sync activities on a process pool (as temporalio): heartbeats and cancellation cross the process
boundary through the worker's shared_state_manager, and a worker without one is refused."""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import os
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from kadence import activity, workflow
from kadence.client import Client
from kadence.common import RetryPolicy
from kadence.exceptions import ActivityError, CancelledError
from kadence.worker import SharedStateManager, Worker
from tests.test_crash_recovery import wait_for_file

ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)


@activity.defn
def count_slowly(target: int) -> list[int]:
    """Longer than its heartbeat timeout: it lives only if its heartbeats reach history."""
    for step in range(target):
        activity.heartbeat(step)
        time.sleep(0.5)
    return [os.getpid(), target]


def spawned_and_imported() -> int:
    """Run once in each pool process before the worker starts: a spawned process imports this module
    the first time it unpickles one of its functions, seconds on a loaded machine, which would
    otherwise count against the first attempt's heartbeat timeout."""
    time.sleep(0.2)  # holds this process busy so the pool spawns the other one for its twin
    return os.getpid()


@activity.defn
def wait_for_cancellation_in_process(marker: str) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            activity.heartbeat()
        except CancelledError:
            Path(marker).write_text(str(os.getpid()))
            raise
        time.sleep(0.1)
    return "never cancelled"


@workflow.defn
class ProcessPoolWorkflow:
    @workflow.run
    async def run(self, marker: str) -> list[object]:
        counted = await workflow.execute_activity(
            # Heartbeats go out every 80 % of the timeout: 0.8 s of margin for each to reach history,
            # which a loaded 2-core machine needed (a 1.5 s timeout left 0.3 s, and the attempt timed out).
            count_slowly, 10, start_to_close_timeout=timedelta(seconds=30), heartbeat_timeout=timedelta(seconds=4),
            retry_policy=ONE_ATTEMPT,
        )
        waiting = workflow.start_activity(
            wait_for_cancellation_in_process, marker, start_to_close_timeout=timedelta(seconds=30),
            heartbeat_timeout=timedelta(seconds=5), retry_policy=ONE_ATTEMPT,
        )
        await workflow.sleep(1)
        waiting.cancel()
        try:
            await waiting
        except ActivityError as err:  # a cancelled activity's await raises it, caused by CancelledError (temporalio's)
            if not isinstance(err.cause, CancelledError):
                raise
            return [*counted, "cancelled"]
        return [*counted, "not cancelled"]


@pytest.fixture(scope="module")
def spawning() -> Iterator[multiprocessing.context.SpawnContext]:
    yield multiprocessing.get_context("spawn")  # no fork of a process running librdkafka's threads


async def test_sync_activities_run_on_a_process_pool_with_heartbeats_and_cancellation(
    client: Client, task_queue: str, tmp_path: Path, spawning: multiprocessing.context.SpawnContext,
) -> None:
    marker = tmp_path / "cancelled"
    with spawning.Manager() as manager, concurrent.futures.ProcessPoolExecutor(2, mp_context=spawning) as pool:
        warm = [asyncio.wrap_future(pool.submit(spawned_and_imported)) for _ in range(2)]
        assert len(set(await asyncio.gather(*warm))) == 2
        async with Worker(
            client, task_queue=task_queue, workflows=[ProcessPoolWorkflow], activities=[count_slowly, wait_for_cancellation_in_process],
            activity_executor=pool, shared_state_manager=SharedStateManager.create_from_multiprocessing(manager),
        ):
            result = await client.execute_workflow(
                ProcessPoolWorkflow.run, str(marker), id=f"process-pool-{uuid.uuid4()}", task_queue=task_queue,
            )
            # The run closes in the batch that requests the cancellation: the result can reach the
            # client before the cancellation reaches the attempt, which a worker shut down would miss.
            await wait_for_file(marker, 10)
    pid, counted, cancelled = result
    assert pid != os.getpid() and counted == 10 and cancelled == "cancelled"
    assert int(marker.read_text()) != os.getpid()


async def test_a_process_pool_without_a_shared_state_manager_is_refused(client: Client) -> None:
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        with pytest.raises(ValueError, match=(
            "Activity count_slowly is not async and executor is not thread-pool executor, so a shared_state_manager must be present"
        )):
            Worker(client, task_queue="unused", activities=[count_slowly], activity_executor=pool)
        with multiprocessing.Manager() as manager, pytest.raises(TypeError, match="must be picklable when using a process executor"):
            Worker(
                client, task_queue="unused", activities=[activity.defn(name="unpicklable")(lambda: None)], activity_executor=pool,
                shared_state_manager=SharedStateManager.create_from_multiprocessing(manager),
            )
