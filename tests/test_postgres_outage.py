"""A Postgres outage under load: Postgres stopped as a switchover stops it (every connection
closed), for 10 s and then for 15 s, while workflows with activities and a durable timer are in
flight and more are started. Every process rides it out: the same service processes, not ready
(saying Postgres is the reason) while it is away and ready again after; the worker says so too;
the client made before the outage starts workflows during and after it and gets their results;
every workflow completes once.

One test for both outages, on one stack of its own (it stops that stack's Postgres). Run with -s
to see the recovery times.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import time
import uuid
from pathlib import Path

import pytest

from kadence.client import Client, WorkflowHandle
from kadence.dev.local_stack import LocalStack
from kadence.ops.audit import audit_history
from kadence.worker import Worker
from tests.broker_load import ReadinessLog, logging_to, stably_ready
from tests.conftest import local_stack
from tests.workflows import SignalOrTimerWorkflow, echo

# Both past every wait the outage can outlast: the retry backoff's 2 s cap, libpq's 5 s connect
# timeout, and the 10 s a workflow task, the activities (start-to-close) and a task's redispatch
# are given, by 5 s for the second (so their timers fall due while Postgres is away). The 30 s the
# second one lasted before tested nothing 15 s does not: no wait in the services is between the
# two (the next, max.poll.interval.ms, is 10 minutes), and the client's 30 s wait for a pooled
# connection is still waited out (a result lookup that began in the first outage resumed on its
# third attempt, 30.6 s later).
OUTAGES_S = (10.0, 15.0)
WORKFLOWS_PER_OUTAGE = 60  # started before each outage, spread so it finds them at every step
STARTS_DURING_OUTAGE = 5  # started by the pre-outage client while Postgres is away
START_INTERVAL_S = 0.02
TIMER_SECONDS = 1.5
UNREADY_WITHIN_S = 5.0  # from Postgres stopping to every Postgres user's /readyz saying so
COMPLETION_TIMEOUT_S = 60.0  # from Postgres coming back to every workflow of the round completed
TEST_DEADLINE_S = 240.0
POSTGRES_USERS = ("history", "timer", "visibility")  # matching does not touch Postgres: it stays ready
PROJECTIONS_WAITING_S = 3.0  # for the timer and visibility services to be retrying the records' store
STOP_GRACE_S = 10.0  # within Kubernetes's 30 s grace period, and past libpq's 5 s connect timeout


async def test_every_process_rides_out_a_postgres_outage(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with local_stack() as stack, logging_to(tmp_path / "logs" / "test-process.log"):
        for key, value in stack.kadence_env.items():
            monkeypatch.setenv(key, value)
        try:
            try:
                async with asyncio.timeout(TEST_DEADLINE_S):
                    await _run_through_outages(stack)
                    await _stop_during_an_outage(stack)
            except TimeoutError:
                pytest.fail(f"the Postgres outage test did not end within {TEST_DEADLINE_S:.0f} s; see the logs in {tmp_path / 'logs'}")
        finally:
            shutil.copytree(stack.data_dir / "logs", tmp_path / "logs", dirs_exist_ok=True)
            print(f"logs: {tmp_path / 'logs'}")
        service_logs = "".join((tmp_path / "logs" / f"{name}.log").read_text() for name in POSTGRES_USERS)
        assert "event=postgres_unreachable" in service_logs and "event=postgres_reachable_again" in service_logs
        assert "event=stopped_while_waiting" in service_logs, "a service stopped while it waited for Postgres"
        assert "event=history_record_dead_lettered" not in service_logs, "a stop is no record's fault"
        assert "event=postgres_listen_restored" in (tmp_path / "logs" / "test-process.log").read_text()


async def _run_through_outages(stack: LocalStack) -> None:
    task_queue = f"pg-outage-{uuid.uuid4().hex[:8]}"
    processes = dict(stack.services)
    readiness = ReadinessLog({name: stack.http_ports[name] for name in processes})
    stop_sampling = asyncio.Event()
    sampling = asyncio.create_task(readiness.sample_until(stop_sampling))
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
    worker = Worker(client, task_queue=task_queue, workflows=[SignalOrTimerWorkflow], activities=[echo], max_concurrent_activities=100)
    working = asyncio.create_task(worker.run())
    handles: list[WorkflowHandle] = []
    summaries = []
    try:
        assert await stably_ready(readiness, time.monotonic()) is not None, f"the stack never got ready:\n{readiness.describe(0)}"
        await asyncio.wait_for(worker.ready.wait(), 60)
        assert await client.execute_workflow(SignalOrTimerWorkflow.run, args=["warm-up", 0.01], id=f"{task_queue}-warm-up",
                                             task_queue=task_queue) == "warm-up after timer"
        for round_, outage_s in enumerate(OUTAGES_S):
            summaries.append(await _one_outage(stack, client, worker, readiness, task_queue, round_, outage_s, handles))
        await worker.shutdown()
        await asyncio.wait_for(working, 30)
    finally:
        if not working.done():
            working.cancel()
            await asyncio.gather(working, return_exceptions=True)
        stop_sampling.set()
        await sampling
        await client.close()
    print("\n" + "\n".join(summaries))

    for name, process in processes.items():
        assert process.poll() is None and stack.services[name] is process, (
            f"the {name} service did not survive the Postgres outages (exit code {process.returncode})"
        )
    report = await asyncio.to_thread(audit_history, stack.settings)
    assert report.violations == [], "\n".join(report.violations[:20])
    for handle in handles:
        assert [key for key in report.runs if key[0] == handle.id] == [(handle.id, handle.result_run_id)]
        kinds = report.event_types(handle.id, handle.result_run_id or "")
        assert kinds.count("ActivityTaskCompleted") == 2 and kinds.count("TimerFired") == 1, f"{handle.id}: {kinds}"
        assert kinds.count("WorkflowExecutionCompleted") == 1 and kinds[-1] == "WorkflowExecutionCompleted", f"{handle.id}: {kinds}"


async def _one_outage(
    stack: LocalStack, client: Client, worker: Worker, readiness: ReadinessLog, task_queue: str, round_: int, outage_s: float,
    handles: list[WorkflowHandle],
) -> str:
    """Workflows in flight, Postgres stopped for `outage_s` (more workflows started meanwhile),
    then started again: every workflow of the round completes with its result."""

    async def run_one(i: int, delay_s: float) -> str:
        await asyncio.sleep(delay_s)
        handle = await client.start_workflow(SignalOrTimerWorkflow.run, args=[f"r{round_}-{i}", TIMER_SECONDS],
                                             id=f"{task_queue}-r{round_}-{i}", task_queue=task_queue)
        handles.append(handle)
        return await handle.result()

    runs = [asyncio.ensure_future(run_one(i, i * START_INTERVAL_S)) for i in range(WORKFLOWS_PER_OUTAGE)]
    await asyncio.sleep(WORKFLOWS_PER_OUTAGE * START_INTERVAL_S / 2)
    stopped_at = time.monotonic()
    await asyncio.to_thread(stack.stop_postgres)
    try:
        unready = await _postgres_users_unready(readiness, stopped_at)
        assert unready is not None, f"not every Postgres user said so within {UNREADY_WITHIN_S} s:\n{readiness.describe(stopped_at)}"
        problems = await worker.readiness_problems()
        assert any("Postgres" in problem for problem in problems), f"the worker's readiness during the outage: {problems}"
        runs += [asyncio.ensure_future(run_one(WORKFLOWS_PER_OUTAGE + i, 0)) for i in range(STARTS_DURING_OUTAGE)]
        await asyncio.sleep(stopped_at + outage_s - time.monotonic())
        for name, process in stack.services.items():
            assert process.poll() is None, f"the {name} service exited during the Postgres outage (exit code {process.returncode})"
    finally:
        await asyncio.to_thread(stack.start_postgres)
    back_at = time.monotonic()
    try:
        results = await asyncio.wait_for(asyncio.gather(*runs), COMPLETION_TIMEOUT_S)
    except TimeoutError:
        pytest.fail(f"round {round_}: workflows not completed {COMPLETION_TIMEOUT_S:.0f} s after Postgres came back "
                    f"from a {outage_s:.0f} s outage; readiness:\n{readiness.describe(stopped_at)}")
    completed_at = time.monotonic()
    ready_at = await stably_ready(readiness, back_at)
    assert ready_at is not None, f"not every service ready again after the {outage_s:.0f} s outage:\n{readiness.describe(stopped_at)}"
    assert await worker.readiness_problems() == []
    assert results == [f"r{round_}-{i} after timer" for i in range(WORKFLOWS_PER_OUTAGE + STARTS_DURING_OUTAGE)]
    return (
        f"{outage_s:.0f} s outage: every Postgres user not ready {unready - stopped_at:.1f} s after the stop; "
        f"all workflows completed {completed_at - back_at:.1f} s and all services ready {ready_at - back_at:.1f} s after Postgres came back"
    )


async def _stop_during_an_outage(stack: LocalStack) -> None:
    """Stopped (SIGTERM, as Kubernetes stops a pod) while Postgres is away and records wait to be
    stored, each Postgres user stops within the grace period, cleanly, instead of waiting for it."""
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
    try:
        for i in range(6):  # records the projections wait to store; the first starts the client's read model
            if i == 1:
                await asyncio.to_thread(stack.stop_postgres)
            await client.start_workflow(SignalOrTimerWorkflow.run, args=[f"s{i}", TIMER_SECONDS], id=f"stopping-{uuid.uuid4()}",
                                        task_queue="nobody-polls")
        await asyncio.sleep(PROJECTIONS_WAITING_S)
        stopped = {}
        for name in POSTGRES_USERS:
            process, asked_at = stack.services[name], time.monotonic()
            await asyncio.to_thread(stack.kill_service, name, signal.SIGTERM)
            stopped[name] = (process.returncode, round(time.monotonic() - asked_at, 1))
    finally:
        await asyncio.to_thread(stack.start_postgres)
        await client.close()
    print(f"stopped while Postgres was away (exit code, seconds): {stopped}")
    assert all(code == 0 and seconds < STOP_GRACE_S for code, seconds in stopped.values()), stopped


async def _postgres_users_unready(readiness: ReadinessLog, since: float) -> float | None:
    """When every service that uses Postgres answered not ready saying why, or None."""
    deadline = since + UNREADY_WITHIN_S
    while time.monotonic() < deadline:
        said = {name for at, name, status, body in readiness.changes if at >= since and status == 503 and "Postgres" in body}
        if said >= set(POSTGRES_USERS):
            return time.monotonic()
        await asyncio.sleep(0.1)
    return None
