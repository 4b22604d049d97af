"""Task queues: which tasks reach workers, how workers share them, and what survives a crash."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Message, TopicPartition

from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.ops.audit import audit_history
from kadence.ops.task_queues import RATE_WINDOW_S, TaskQueueDescription, describe_task_queue
from kadence.protocol import topics
from kadence.protocol.kafka import make_consumer, make_producer, read_to_end, topic_partitions
from kadence.worker import Worker
from tests.conftest import wait_for_event
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, ElsewhereWorkflow, FanOutWorkflow, touch


async def until_logged(caplog: pytest.LogCaptureFixture, event: str, timeout: float = 30) -> None:
    async def poll() -> None:
        while not any(event in record.getMessage() for record in caplog.records):
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), timeout)


async def test_an_activity_task_of_a_closed_execution_never_runs(
    stack: LocalStack, client: Client, task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kadence.worker")
    ran = tmp_path / "ran"
    activity_queue = f"{task_queue}-activities"
    workflow_id = f"closed-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS):
        handle = await client.start_workflow(ElsewhereWorkflow.run, args=[activity_queue, str(ran)], id=workflow_id, task_queue=task_queue)
        await wait_for_event(stack, workflow_id, "ActivityTaskScheduled", timeout=30)
        await handle.terminate(reason="closed before any worker took the task")

    async with Worker(client, task_queue=activity_queue, activities=[touch]):
        await until_logged(caplog, "event=activity_task_dropped")
    assert not ran.exists()
    assert any("cause=WORKFLOW_CLOSED" in r.getMessage() for r in caplog.records if "activity_task_dropped" in r.getMessage())


async def test_an_activity_task_past_its_schedule_to_start_deadline_is_not_dispatched(
    client: Client, task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kadence.worker")
    ran = tmp_path / "ran"
    activity_queue = f"{task_queue}-activities"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        outcome = await client.execute_workflow(
            ElsewhereWorkflow.run, args=[activity_queue, str(ran), 0.5], id=f"late-{uuid.uuid4()}", task_queue=task_queue,
        )
    assert outcome == "TimeoutError"

    async with Worker(client, task_queue=activity_queue, activities=[touch]):
        await until_logged(caplog, "event=activity_task_expired")
    assert not ran.exists()


async def test_an_activity_task_delivered_twice_to_one_worker_runs_once(
    stack: LocalStack, client: Client, task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """Matching routes a task again when it re-reads history after a rebalance, and both copies
    may reach the same worker, even in one poll: the second start must be refused."""
    caplog.set_level(logging.INFO, logger="kadence.worker")
    ran = tmp_path / "ran"
    activity_queue = f"{task_queue}-activities"
    workflow_id = f"twice-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS):
        handle = await client.start_workflow(ElsewhereWorkflow.run, args=[activity_queue, str(ran)], id=workflow_id, task_queue=task_queue)
        activity_topic = topics.task_queue_topic(activity_queue, "activity")
        routed = await until_routed(stack, activity_topic, workflow_id)
        producer = make_producer(stack.settings)
        producer.produce(activity_topic, routed.value(), routed.key(), partition=routed.partition(), headers=routed.headers())
        assert producer.flush(30) == 0
        async with Worker(client, task_queue=activity_queue, activities=[touch]):
            assert await asyncio.wait_for(handle.result(), 60) == "touched"

            async def copy_handled() -> bool:  # refused, or run a second time
                return any("event=activity_task_dropped" in r.getMessage() for r in caplog.records) or len(ran.read_text().splitlines()) > 1

            await until(copy_handled)
    assert ran.read_text().splitlines() == ["ran"]


async def test_an_activity_task_lost_on_its_way_to_the_workers_is_dispatched_again(
    stack: LocalStack, client: Client, task_queue: str, tmp_path: Path,
) -> None:
    """The workers' group moves past the task record (as a worker that stored its offset and died
    before asking to start it): history dispatches the attempt again 10 s later."""
    ran = tmp_path / "ran"
    activity_queue = f"{task_queue}-activities"
    workflow_id = f"lost-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS):
        handle = await client.start_workflow(ElsewhereWorkflow.run, args=[activity_queue, str(ran)], id=workflow_id, task_queue=task_queue)
        activity_topic = topics.task_queue_topic(activity_queue, "activity")
        routed = await until_routed(stack, activity_topic, workflow_id)
        workers = make_consumer(stack.settings, topics.worker_group(activity_queue, "activity"))
        workers.commit(offsets=[TopicPartition(activity_topic, routed.partition(), routed.offset() + 1)], asynchronous=False)
        workers.close()
        async with Worker(client, task_queue=activity_queue, activities=[touch]):
            assert await asyncio.wait_for(handle.result(), 60) == "touched"
    assert ran.read_text().splitlines() == ["ran"]
    history_log = (stack.data_dir / "logs" / "history.log").read_text()
    assert f"event=task_redispatched task=activity workflow_id={workflow_id}" in history_log


async def until_routed(stack: LocalStack, topic: str, workflow_id: str, timeout: float = 30) -> Message:
    """The task matching routed for the workflow to `topic`, once it is there."""
    def find() -> Message | None:
        try:
            ends = {p: 0 for p in range(topic_partitions(stack.settings, topic))}
        except KafkaException:  # matching creates the topic as it routes the first task
            return None
        return next((msg for msg in read_to_end(stack.settings, topic, ends) if workflow_id.encode() in (msg.value() or b"")), None)

    async def poll() -> Message:
        while (found := await asyncio.to_thread(find)) is None:
            await asyncio.sleep(0.1)
        return found

    return await asyncio.wait_for(poll(), timeout)


async def until(condition: Callable[[], Awaitable[bool]], timeout: float = 30) -> None:
    async def poll() -> None:
        while not await condition():
            await asyncio.sleep(0.2)

    await asyncio.wait_for(poll(), timeout)


@pytest.mark.kafka_only  # the backlog is offsets subtracted, and Tansu's ListOffsets answers short of the end (kafka.is_tansu)
async def test_four_workers_share_a_queue_and_describe_shows_pollers_backlog_and_rate(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    activity_queue = f"{task_queue}-activities"
    workflow_id = f"fan-out-{uuid.uuid4()}"

    async def described() -> TaskQueueDescription:
        return await asyncio.get_running_loop().run_in_executor(None, describe_task_queue, stack.settings, activity_queue)

    async def backlog_is(count: int) -> bool:
        kinds = {k.kind: k for k in (await described()).kinds}
        return "activity" in kinds and kinds["activity"].backlog == count

    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS):
        waiting = await client.start_workflow(FanOutWorkflow.run, args=[activity_queue, 40], id=f"{workflow_id}-a", task_queue=task_queue)
        await until(lambda: backlog_is(40))  # routed, and no worker polls the queue yet

        workers = [Worker(client, task_queue=activity_queue, activities=ALL_ACTIVITIES, identity=f"worker-{i}") for i in range(4)]
        async with contextlib.AsyncExitStack() as running:
            for worker in workers:
                await running.enter_async_context(worker)
                await asyncio.wait_for(worker.ready.wait(), 30)
            assert await waiting.result() == 40
            # With the four in the group, new tasks spread over all of them.
            handle = await client.start_workflow(FanOutWorkflow.run, args=[activity_queue, 40], id=workflow_id, task_queue=task_queue)
            assert await handle.result() == 40
            await until(lambda: backlog_is(0))
            description = await described()

    events = audit_history(stack.settings).history(workflow_id, handle.result_run_id)
    started_by = [a["identity"] for kind, a in (e["attributes"] for e in events) if kind == "ActivityTaskStarted"]
    assert sorted(set(started_by)) == [f"worker-{i}" for i in range(4)], "every worker took tasks"
    pollers = [p for p in description.pollers if p.kind == "activity"]
    assert sorted(p.identity for p in pollers) == [f"worker-{i}" for i in range(4)]
    assert sorted(p for poller in pollers for p in poller.partitions) == list(range(stack.settings.task_queue_partitions))
    (activity,) = [k for k in description.kinds if k.kind == "activity"]
    assert activity.dispatch_rate_per_s == round(80 / RATE_WINDOW_S, 2)


async def test_the_queue_rate_limit_spaces_activity_starts(stack: LocalStack, client: Client, task_queue: str) -> None:
    workflow_id = f"limited-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES,
                      max_task_queue_activities_per_second=5):
        handle = await client.start_workflow(FanOutWorkflow.run, args=[task_queue, 10], id=workflow_id, task_queue=task_queue)
        assert await handle.result() == 10
    started = [e["event_time_ms"] for e in audit_history(stack.settings).history(workflow_id, handle.result_run_id)
               if e["attributes"][0] == "ActivityTaskStarted"]
    assert max(started) - min(started) >= 1500, "10 starts at 5 a second take at least 1.8 s"
