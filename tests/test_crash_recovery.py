"""SIGKILL of workers and of the history service: nothing lost, nothing duplicated."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import itertools
import random
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from kadence.client import Client
from kadence.common import WorkflowIDReusePolicy
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import WorkflowAlreadyStartedError
from kadence.ops.audit import audit_history
from kadence.ops.task_queues import describe_task_queue
from kadence.protocol.kafka import partition_for_key
from kadence.worker import Worker
from tests.conftest import TEST_CACHE_RUNS, audit_of, local_stack, wait_for_event
from tests.workflows import (
    ALL_ACTIVITIES,
    ALL_WORKFLOWS,
    HangingActivityWorkflow,
    MixedWorkflow,
    ParentOfTwoStepWorkflow,
    RecordedStepsWorkflow,
    SignalOrTimerWorkflow,
    StallOnceWorkflow,
    TwoStepWorkflow,
)

REPO = Path(__file__).resolve().parents[1]


@contextlib.asynccontextmanager
async def doomed_worker(stack: LocalStack, task_queue: str) -> AsyncIterator[None]:
    """A worker in its own process, SIGKILLed when the block ends."""
    process = start_worker(stack, task_queue, "doomed-worker")
    try:
        yield
    finally:
        process.kill()
        process.wait()


def start_worker(stack: LocalStack, task_queue: str, identity: str) -> subprocess.Popen[bytes]:
    """A worker in its own process (tests/worker_main.py), to be killed."""
    return subprocess.Popen([sys.executable, "-m", "tests.worker_main", task_queue, identity], env=stack.env, cwd=REPO)


async def wait_for_file(path: Path, timeout: float) -> None:
    async def poll() -> None:
        while not path.exists():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), timeout)


async def test_worker_killed_mid_activity_gets_the_activity_retried_after_start_to_close(
    stack: LocalStack, client: Client, task_queue: str, tmp_path: Path,
) -> None:
    marker = tmp_path / "attempt-1-started"
    workflow_id = f"hang-{uuid.uuid4()}"
    async with doomed_worker(stack, task_queue):
        handle = await client.start_workflow(HangingActivityWorkflow.run, str(marker), id=workflow_id, task_queue=task_queue)
        await wait_for_file(marker, 60)
        await wait_for_event(stack, workflow_id, "ActivityTaskStarted", 60)

    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES, identity="rescuer"):
        assert await asyncio.wait_for(handle.result(), 60) == "done on attempt 2"

    history = audit_history(stack.settings)
    assert history.violations == []
    events = [e["attributes"] for e in history.history(workflow_id, handle.result_run_id)]
    started = [(a["attempt"], a["identity"]) for kind, a in events if kind == "ActivityTaskStarted"]
    timed_out = [(a["retry_state"], a["failure"]["timeout_type"]) for kind, a in events if kind == "ActivityTaskTimedOut"]
    assert started == [(1, "doomed-worker"), (2, "rescuer")]
    assert timed_out == [("IN_PROGRESS", "START_TO_CLOSE")]
    assert [kind for kind, _ in events].count("ActivityTaskCompleted") == 1


async def test_worker_killed_mid_workflow_task_gets_the_task_retried_after_its_timeout(
    stack: LocalStack, client: Client, task_queue: str, tmp_path: Path,
) -> None:
    marker = tmp_path / "workflow-task-stalled"
    workflow_id = f"stall-{uuid.uuid4()}"
    async with doomed_worker(stack, task_queue):
        handle = await client.start_workflow(
            StallOnceWorkflow.run, str(marker), id=workflow_id, task_queue=task_queue, task_timeout=timedelta(seconds=2),
        )
        await wait_for_file(marker, 60)
        await wait_for_event(stack, workflow_id, "WorkflowTaskStarted", 60)

    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES, identity="rescuer"):
        assert await asyncio.wait_for(handle.result(), 60) == "recovered"

    report = audit_history(stack.settings)
    assert report.violations == []
    events = [e["attributes"] for e in report.history(workflow_id, handle.result_run_id)]
    kinds = [kind for kind, _ in events]
    assert kinds[:4] == ["WorkflowExecutionStarted", "WorkflowTaskScheduled", "WorkflowTaskStarted", "WorkflowTaskTimedOut"]
    assert events[3][1]["timeout_type"] == "START_TO_CLOSE"
    assert events[4] == ("WorkflowTaskScheduled", {"task_queue": task_queue, "attempt": 2})
    completed_by = [a["identity"] for kind, a in events if kind == "WorkflowTaskCompleted"]
    assert completed_by == ["rescuer"]


UNDER_LOAD_WORKFLOWS = 150
UNDER_LOAD_START_INTERVAL_S = 0.04  # 25 a second, as the issue that found redelivered attempts running again
KILL_AFTER_STARTS = 60


async def test_a_worker_killed_under_load_never_runs_an_attempt_again(
    stack: LocalStack, client: Client, task_queue: str, tmp_path: Path,
) -> None:
    """Two workers share the queue; one is SIGKILLed while workflows stream in. The other is handed
    its partitions, with the task records it had read and not committed past: those that may be
    redeliveries start (and run their local activities) only once history accepts their start, so
    no attempt runs twice, and no local activity runs again once a completed workflow task recorded it."""
    workers = {identity: start_worker(stack, task_queue, identity) for identity in ("killed", "survivor")}
    try:
        await _until_both_poll(stack, task_queue, set(workers))
        handles = []
        for i in range(UNDER_LOAD_WORKFLOWS):
            if i == KILL_AFTER_STARTS:
                workers["killed"].kill()
            handles.append(await client.start_workflow(  # a workflow task of the killed worker's times out in 2 s
                RecordedStepsWorkflow.run, str(tmp_path), id=f"{task_queue}-{i}", task_queue=task_queue, task_timeout=timedelta(seconds=2),
            ))
            await asyncio.sleep(UNDER_LOAD_START_INTERVAL_S)
        results = await asyncio.wait_for(asyncio.gather(*(handle.result() for handle in handles)), 120)
    finally:
        for process in workers.values():
            process.kill()
            process.wait()
    assert all(len(result) == 3 for result in results)

    report = audit_of(stack, *(handle.id for handle in handles))
    assert report.violations == []
    pids = {str(process.pid): identity for identity, process in workers.items()}
    twice, ran_in_flight, ran_again = [], 0, []
    for handle in handles:
        events = [e["attributes"] for e in report.history(handle.id, handle.result_run_id)]
        assert [kind for kind, _ in events].count("WorkflowExecutionCompleted") == 1
        for step in ("a", "b"):
            runs = Counter(attempt for attempt, _ in _runs(tmp_path / f"{handle.id}.{step}"))
            twice += [(handle.id, step, attempt, count) for attempt, count in runs.items() if count > 1]
            ran_in_flight += sum(runs.values()) - 1
        # The local activity ran in the worker whose completion recorded its marker, and nowhere
        # else, unless in the killed worker before that completion (the task then timed out).
        recorded_by = next(a["identity"] for kind, a in events if kind == "WorkflowTaskCompleted")
        ran_by = [pids[pid] for _, pid in _runs(tmp_path / f"{handle.id}.local")]
        if ran_by not in ([recorded_by], ["killed", "survivor"] if recorded_by == "survivor" else None):
            ran_again.append((handle.id, ran_by, recorded_by))
    assert (twice, ran_again) == ([], []), (
        f"attempts that ran more than once (workflow, activity, attempt, runs): {twice[:10]}; local activities run "
        f"again after a completed workflow task recorded them (workflow, ran by, recorded by): {ran_again[:10]}"
    )
    print(f"\n{ran_in_flight} activity attempts were in flight in the killed worker and ran again as a later attempt")


def _runs(path: Path) -> list[tuple[int, str]]:
    """The runs record_run recorded in `path`: (attempt, pid) each."""
    return [(int(attempt), pid) for attempt, pid in (line.split() for line in path.read_text().splitlines())]


async def _until_both_poll(stack: LocalStack, task_queue: str, identities: set[str], timeout: float = 60) -> None:
    """Until each worker polls some of the queue's partitions of both kinds (their poller heartbeats)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        described = await asyncio.to_thread(describe_task_queue, stack.settings, task_queue)
        polling = {(p.identity, p.kind) for p in described.pollers if p.partitions and p.last_seen_s_ago < 5}
        if polling >= {(identity, kind) for identity in identities for kind in ("workflow", "activity")}:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"the workers {sorted(identities)} did not both poll {task_queue} within {timeout:.0f} s")


@pytest.mark.also_on_tansu
@pytest.mark.parametrize("service", ["history", "matching"])
async def test_a_service_killed_mid_run_finishes_every_workflow_exactly_once(
    stack: LocalStack, client: Client, task_queue: str, service: str,
) -> None:
    """History: recovery from the log. Matching (mid-dispatch): no task lost, every scheduled task
    reaches a worker (faust re-reads from its last commit) or times out into a retry."""
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        ids = [f"crash-{service}-{i}-{uuid.uuid4()}" for i in range(30)]
        handles = await asyncio.gather(*(client.start_workflow(TwoStepWorkflow.run, i, id=i, task_queue=task_queue) for i in ids))
        results = [asyncio.ensure_future(h.result()) for h in handles]
        await asyncio.wait(results, return_when=asyncio.FIRST_COMPLETED, timeout=60)
        assert not all(r.done() for r in results), "the kill must land mid-run"

        stack.kill_service(service)
        stack.start_service(service)

        assert await asyncio.wait_for(asyncio.gather(*results), 120) == [f"{i}!" for i in ids]

    report = audit_history(stack.settings)
    assert report.violations == []
    for handle in handles:
        event_types = report.event_types(handle.id, handle.result_run_id)
        assert event_types.count("ActivityTaskScheduled") == 2
        assert event_types.count("ActivityTaskCompleted") == 2
        assert event_types.count("WorkflowExecutionCompleted") == 1
        assert event_types[-1] == "WorkflowExecutionCompleted"


async def test_matching_and_history_killed_while_parents_run_children_start_and_report_each_child_once(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        ids = [f"parent-{i}-{uuid.uuid4()}" for i in range(40)]
        handles = await asyncio.gather(*(
            client.start_workflow(ParentOfTwoStepWorkflow.run, str(i), id=workflow_id, task_queue=task_queue)
            for i, workflow_id in enumerate(ids)
        ))
        results = [asyncio.ensure_future(h.result()) for h in handles]
        await asyncio.wait(results, return_when=asyncio.FIRST_COMPLETED, timeout=60)
        assert not all(r.done() for r in results), "the kills must land mid-run"

        stack.kill_service("matching")  # the relay of child starts and of the children's answers
        stack.start_service("matching")
        stack.kill_service("history")
        stack.start_service("history")

        assert await asyncio.wait_for(asyncio.gather(*results), 120) == [f"{i}!" for i in range(40)]

    report = audit_history(stack.settings)
    assert report.violations == []
    for handle in handles:
        kinds = report.event_types(handle.id, handle.result_run_id)
        assert (kinds.count("ChildWorkflowExecutionStarted"), kinds.count("ChildWorkflowExecutionCompleted")) == (1, 1)
        assert len([key for key in report.runs if key[0] == f"{handle.id}-child"]) == 1


async def test_history_service_killed_at_random_points_under_500_workflows_with_timers_signals_and_retries(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    chaos = random.Random(20261130)
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES, max_concurrent_activities=200):
        async def run_one(i: int) -> tuple[str, str, str]:
            workflow_id = f"chaos-{i}-{uuid.uuid4()}"
            handle = await client.start_workflow(MixedWorkflow.run, f"order-{i}", id=workflow_id, task_queue=task_queue)
            await handle.signal(MixedWorkflow.deliver, f"signal-{i}")
            return workflow_id, handle.result_run_id or "", await handle.result()

        async def kill_history_now_and_then() -> int:
            kills = 0
            while not runs.done():
                await asyncio.sleep(chaos.uniform(0.5, 2.0))
                if runs.done() or kills == 4:
                    break
                stack.kill_service("history")
                stack.start_service("history")
                kills += 1
            return kills

        runs = asyncio.ensure_future(asyncio.gather(*(run_one(i) for i in range(500))))
        kills = await kill_history_now_and_then()
        results = await asyncio.wait_for(runs, 240)

    assert kills >= 2, "the history service must have died mid-run more than once"
    assert [r for _, _, r in results] == [f"ORDER-{i}+signal-{i}" for i in range(500)]
    report = audit_history(stack.settings)
    assert report.violations == []
    for workflow_id, run_id, _ in results:
        kinds = report.event_types(workflow_id, run_id)
        assert (kinds.count("TimerFired"), kinds.count("WorkflowExecutionSignaled"), kinds.count("ActivityTaskCompleted")) == (1, 1, 1)
        assert kinds.count("ActivityTaskStarted") == 2 and kinds[-1] == "WorkflowExecutionCompleted"


async def test_a_restarted_history_service_recovers_from_its_checkpoint(stack: LocalStack, client: Client, task_queue: str) -> None:
    async def checkpoints_stored() -> int:
        async with await psycopg.AsyncConnection.connect(stack.postgres_dsn, autocommit=True) as conn:
            row = await (await conn.execute("SELECT count(*) FROM kadence_history_checkpoints WHERE history_offset > 0")).fetchone()
            return row[0] if row else 0

    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        before = await asyncio.gather(*(
            client.execute_workflow(TwoStepWorkflow.run, f"a{i}", id=f"ckpt-a{i}-{uuid.uuid4()}", task_queue=task_queue) for i in range(20)
        ))
        while await checkpoints_stored() == 0:
            await asyncio.sleep(0.1)
        history_log = stack.data_dir / "logs" / "history.log"
        restored_before = history_log.read_text().count("event=checkpoint_restored")
        stack.kill_service("history")
        stack.start_service("history")
        after = await asyncio.gather(*(
            client.execute_workflow(TwoStepWorkflow.run, f"b{i}", id=f"ckpt-b{i}-{uuid.uuid4()}", task_queue=task_queue) for i in range(20)
        ))
    assert before == [f"a{i}!" for i in range(20)] and after == [f"b{i}!" for i in range(20)]
    assert history_log.read_text().count("event=checkpoint_restored") > restored_before
    # The log is read on from the checkpoints' offsets, not from its start.
    recovered = [line for line in history_log.read_text().splitlines() if "event=partitions_recovered" in line][-1]
    read_from = ast.literal_eval(re.search(r"read_from=(\{[^}]*\})", recovered).group(1))  # type: ignore[union-attr]
    assert any(offset > 0 for offset in read_from.values()), recovered
    assert audit_history(stack.settings).violations == []


async def test_a_partition_with_no_new_batch_is_not_checkpointed_again(task_queue: str) -> None:
    """Every change to a partition's state comes with a batch: while workflows run on one partition,
    its checkpoint is stored again each interval, and a partition that wrote nothing since its
    last checkpoint (its checkpoint's history offset the same) keeps it. On a stack of its own: on
    the session's, other tests' runs (timers, retries) may write to every partition meanwhile."""
    with local_stack() as stack:
        client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
        try:
            await _checkpointed_only_when_written(stack, client, task_queue)
        finally:
            await client.close()


async def _checkpointed_only_when_written(stack: LocalStack, client: Client, task_queue: str) -> None:

    async def checkpoints() -> dict[int, tuple[int, object]]:
        """Per partition, the history offset its checkpoint holds and when it was taken."""
        async with await psycopg.AsyncConnection.connect(stack.postgres_dsn, autocommit=True) as conn:
            rows = await (await conn.execute("SELECT partition, history_offset, taken_at FROM kadence_history_checkpoints")).fetchall()
            return {partition: (offset, taken_at) for partition, offset, taken_at in rows}

    busy = 0
    ids = (f"ckpt-busy-{uuid.uuid4()}" for _ in itertools.count())
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        async with asyncio.timeout(30):  # each partition's first checkpoint (on a fresh stack, of an empty partition)
            while len(before := await checkpoints()) < stack.partitions:
                await asyncio.sleep(0.1)
        busy_taken = [before.get(busy)]
        while len(set(busy_taken)) < 3:  # two checkpoints of the busy partition after the first look
            workflow_id = next(i for i in ids if partition_for_key(i.encode(), stack.partitions) == busy)
            assert await client.execute_workflow(TwoStepWorkflow.run, "x", id=workflow_id, task_queue=task_queue) == "x!"
            busy_taken.append((await checkpoints()).get(busy))
        after = await checkpoints()
    quiet = [p for p in range(stack.partitions) if p != busy and after[p][0] == before[p][0]]
    assert quiet, f"every partition wrote a batch meanwhile: {before} -> {after}"
    assert {p: after[p] for p in quiet} == {p: before[p] for p in quiet}, "a partition that wrote nothing was checkpointed again"


async def test_a_closed_run_evicted_from_memory_still_decides_id_reuse_and_retried_starts(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    workflow_id = f"evicted-{uuid.uuid4()}"

    async def evicted() -> bool:
        async with await psycopg.AsyncConnection.connect(stack.postgres_dsn, autocommit=True) as conn:
            cursor = await conn.execute("SELECT 1 FROM kadence_history_closed_runs WHERE workflow_id = %s", (workflow_id,))
            return await cursor.fetchone() is not None

    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        first = await client.start_workflow(TwoStepWorkflow.run, "x", id=workflow_id, task_queue=task_queue, request_id="first")
        assert await first.result() == "x!"
        while not await evicted():  # the next checkpoint stores the closed run and drops it from memory
            await asyncio.sleep(0.1)
        with pytest.raises(WorkflowAlreadyStartedError):
            await client.start_workflow(
                TwoStepWorkflow.run, "y", id=workflow_id, task_queue=task_queue, id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            )
        retried = await client.start_workflow(TwoStepWorkflow.run, "x", id=workflow_id, task_queue=task_queue, request_id="first")
        assert retried.result_run_id == first.result_run_id
        second = await client.start_workflow(TwoStepWorkflow.run, "z", id=workflow_id, task_queue=task_queue)
        assert second.result_run_id != first.result_run_id and await second.result() == "z!"
    assert audit_history(stack.settings).violations == []


def _history_counter(stack: LocalStack, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{stack.http_ports['history']}/metrics", timeout=5) as scraped:
        return sum(float(line.split()[-1]) for line in scraped.read().decode().splitlines() if line.startswith(f"{name} "))


async def test_runs_the_cache_let_go_are_read_back_and_finish_across_a_kill(stack: LocalStack, client: Client, task_queue: str) -> None:
    """More runs open than history keeps in memory (the test stack's cache holds TEST_CACHE_RUNS):
    once checkpoints stored them, the least used leave memory; a signal to each reads its run
    back from its row, before and after a SIGKILL of history, and every run finishes once."""
    count = 3 * TEST_CACHE_RUNS
    evicted_before = _history_counter(stack, "kadence_history_runs_evicted_total")
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        handles = await asyncio.gather(*(
            client.start_workflow(SignalOrTimerWorkflow.run, args=[f"v{i}", 3600], id=f"cache-{i}-{uuid.uuid4()}", task_queue=task_queue)
            for i in range(count)
        ))
        async with asyncio.timeout(60):  # each run's first activity done, then two checkpoints to store and evict them
            while _history_counter(stack, "kadence_history_runs_evicted_total") - evicted_before < count - TEST_CACHE_RUNS:
                await asyncio.sleep(0.2)
        await asyncio.gather(*(handle.signal(SignalOrTimerWorkflow.proceed, "a") for handle in handles[: count // 2]))
        stack.kill_service("history")
        stack.start_service("history")
        await asyncio.gather(*(handle.signal(SignalOrTimerWorkflow.proceed, "b") for handle in handles[count // 2:]))
        results = await asyncio.gather(*(handle.result() for handle in handles))
    assert results == [f"v{i} after signal {'a' if i < count // 2 else 'b'}" for i in range(count)]
    assert _history_counter(stack, "kadence_history_runs_read_back_total") > 0, "the restarted history read runs back"
    assert audit_of(stack, *(handle.id for handle in handles)).violations == []
