"""`kadence server`: every service in one process. Its readiness is each service's, named; on a
stack of that layout workflows that use every service (tasks, a durable timer, a child through
matching's relay) finish exactly once across a SIGKILL of the one process, and its /metrics carries
each service's series."""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from collections.abc import Iterator

import pytest

from kadence.client import Client
from kadence.dev.local_stack import PROCESS_LAYOUTS, LocalStack
from kadence.ops.audit import audit_history
from kadence.protocol.observability import ProcessReadiness
from kadence.worker import Worker
from services.history.service import CONSUMER_GROUP as HISTORY_GROUP
from services.matching.app import APP_ID as MATCHING_GROUP
from services.server import PROJECTIONS_GROUP
from tests.conftest import local_stack
from tests.test_observability import METRICS
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, ParentOfTwoStepWorkflow, SleepyWorkflow, TwoStepWorkflow

# The one process's consumer groups: history's, matching's, and the one reader's of the timer and the read model.
SERVER_GROUPS = {HISTORY_GROUP, MATCHING_GROUP, PROJECTIONS_GROUP}


async def test_a_process_is_ready_when_each_of_its_services_is_and_says_which_is_not() -> None:
    readiness = ProcessReadiness()
    assert await readiness.problems() == ["no service started yet"]
    history, timer = readiness.of("history"), readiness.of("timer")
    history.assign({0, 1})
    history.reached_end(0)
    timer.assign({0})
    timer.reached_end(0)
    assert await readiness.problems() == ["history: partitions [1] not caught up yet"]
    history.reached_end(1)
    assert await readiness.problems() == []
    timer.revoke()
    assert await readiness.problems() == ["timer: no partitions assigned yet"]


async def test_a_service_expected_but_not_started_keeps_the_process_unready() -> None:
    readiness = ProcessReadiness()
    readiness.expect(["history", "timer"])
    timer = readiness.of("timer")
    timer.assign({0})
    timer.reached_end(0)
    assert await readiness.problems() == ["history: no partitions assigned yet"]


def test_a_process_of_one_service_names_no_service() -> None:
    readiness = ProcessReadiness()
    readiness.of("history")
    assert asyncio.run(readiness.problems()) == ["no partitions assigned yet"]


@pytest.fixture(scope="module")
def one_process_stack() -> Iterator[LocalStack]:
    with local_stack(services=PROCESS_LAYOUTS["one"]) as stack:
        yield stack


def scrape(stack: LocalStack, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{stack.http_ports['server']}{path}", timeout=5) as response:
        return response.status, response.read().decode()


async def test_every_workflow_finishes_once_across_a_kill_of_the_one_process(
    one_process_stack: LocalStack, monkeypatch: pytest.MonkeyPatch,
) -> None:
    stack = one_process_stack
    for key, value in stack.kadence_env.items():
        monkeypatch.setenv(key, value)
    assert scrape(stack, "/readyz") == (200, "ready\n")
    task_queue = f"server-{uuid.uuid4()}"
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
    try:
        async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
            ids = [f"server-{i}-{uuid.uuid4()}" for i in range(30)]
            handles = await asyncio.gather(*(client.start_workflow(TwoStepWorkflow.run, i, id=i, task_queue=task_queue) for i in ids))
            parent = await client.start_workflow(ParentOfTwoStepWorkflow.run, "p", id=f"parent-{uuid.uuid4()}", task_queue=task_queue)
            sleepy = await client.start_workflow(SleepyWorkflow.run, 2.0, id=f"sleepy-{uuid.uuid4()}", task_queue=task_queue)
            results = [asyncio.ensure_future(h.result()) for h in handles]
            await asyncio.wait(results, return_when=asyncio.FIRST_COMPLETED, timeout=60)
            assert not all(r.done() for r in results), "the kill must land mid-run"

            stack.kill_service("server")
            stack.start_service("server")

            assert await asyncio.wait_for(asyncio.gather(*results), 120) == [f"{i}!" for i in ids]
            assert await asyncio.wait_for(parent.result(), 60) == "p!"
            await asyncio.wait_for(sleepy.result(), 60)
    finally:
        await client.close()

    report = audit_history(stack.settings)
    assert report.violations == []
    for handle in handles:
        assert report.event_types(handle.id, handle.result_run_id).count("ActivityTaskScheduled") == 2

    await asyncio.to_thread(stack.wait_until_ready)
    lagging: set[str] = set()
    for _ in range(150):  # librdkafka's statistics (the lag of two of the three) come every 5 s
        metrics = scrape(stack, "/metrics")[1]
        lagging = {line.split('group="')[1].split('"')[0] for line in metrics.splitlines() if line.startswith("kadence_consumer_lag{")}
        if lagging == SERVER_GROUPS:
            break
        await asyncio.sleep(0.1)
    assert lagging == SERVER_GROUPS, "each consumer group reports its lag"
    for service, names in METRICS.items():
        for name in names:
            assert any(line.startswith(name) for line in metrics.splitlines()), f"{service}'s {name} is not on the server's /metrics"
