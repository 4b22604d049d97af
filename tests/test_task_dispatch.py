"""Task queues: which tasks reach workers, how workers share them, and what survives a crash."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Message, TopicPartition

from kadence import activity
from kadence.client import Client, WorkflowHandle
from kadence.dev.local_stack import LocalStack
from kadence.ops.task_queues import RATE_WINDOW_S, TaskQueueDescription, describe_task_queue
from kadence.protocol import topics
from kadence.protocol.codec import command_codec, task_codec
from kadence.protocol.kafka import make_consumer, make_producer, partition_for_key, read_to_end, topic_partitions, watermarks
from kadence.worker import Worker
from tests.conftest import audit_of, wait_for_event
from tests.test_crash_recovery import wait_for_file
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, ElsewhereWorkflow, FanOutWorkflow, TwoStepWorkflow, touch


async def until_logged(caplog: pytest.LogCaptureFixture, event: str, timeout: float = 30) -> None:
    async def poll() -> None:
        while not any(event in record.getMessage() for record in caplog.records):
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), timeout)


async def test_an_activity_task_of_a_closed_execution_is_refused_and_changes_nothing(
    stack: LocalStack, client: Client, task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """The worker runs the attempt at once; history refuses its start, the worker hears it and
    reports nothing, and the closed run's history stays as it was."""
    caplog.set_level(logging.INFO, logger="kadence.worker")
    ran = tmp_path / "ran"
    activity_queue = f"{task_queue}-activities"
    workflow_id = f"closed-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS):
        handle = await client.start_workflow(ElsewhereWorkflow.run, args=[activity_queue, str(ran)], id=workflow_id, task_queue=task_queue)
        await wait_for_event(stack, workflow_id, "ActivityTaskScheduled", timeout=30)
        await handle.terminate(reason="closed before any worker took the task")
    closed = [e["attributes"][0] for e in (await handle.fetch_history()).events]

    async with Worker(client, task_queue=activity_queue, activities=[touch]):
        await until_logged(caplog, "event=activity_start_refused")
    refusals = [r.getMessage() for r in caplog.records if "event=activity_start_refused" in r.getMessage()]
    assert len(refusals) == 1 and f"workflow_id={workflow_id}" in refusals[0] and "cause=WORKFLOW_CLOSED" in refusals[0]
    assert [e["attributes"][0] for e in (await handle.fetch_history()).events] == closed


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
    """A task is produced again when a crash or rebalance makes history's next owner decide its
    command again, and both copies may reach the same worker, even in one poll: the worker drops the copy of an attempt it asked
    to start (history would refuse its start, but not a report from the identity that started it)."""
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

            async def copy_handled() -> bool:  # dropped, or run a second time
                dropped = any("event=activity_task_duplicate" in r.getMessage() for r in caplog.records)
                return dropped or len(ran.read_text().splitlines()) > 1

            await until(copy_handled)
    assert ran.read_text().splitlines() == ["ran"]


async def test_an_activity_attempt_runs_without_waiting_for_history_to_accept_its_start(
    stack: LocalStack, client: Client, task_queue: str, tmp_path: Path,
) -> None:
    """With the history service paused, no start can be accepted: the attempt runs all the same,
    and its start and result count once history is back."""
    ran = tmp_path / "ran"
    activity_queue = f"{task_queue}-activities"
    workflow_id = f"unanswered-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS):
        handle = await client.start_workflow(ElsewhereWorkflow.run, args=[activity_queue, str(ran)], id=workflow_id, task_queue=task_queue)
        activity_topic = topics.task_queue_topic(activity_queue, "activity")
        routed = await until_routed(stack, activity_topic, workflow_id)
        skip_past(stack, activity_queue, routed)  # handed to the worker below, once history is paused
        async with Worker(client, task_queue=activity_queue, activities=[touch]) as worker:
            await asyncio.wait_for(worker.ready.wait(), 30)
            with paused(stack, "history"):
                produce_copy(stack, routed, routed.partition())
                await wait_for_file(ran, 10)
            assert await asyncio.wait_for(handle.result(), 60) == "touched"
    assert ran.read_text().splitlines() == ["ran"]
    assert [e["attributes"][0] for e in (await handle.fetch_history()).events].count("ActivityTaskStarted") == 1


@dataclasses.dataclass
class ContestedAttempts:
    """The runs of the activity `touch` on two workers. The first run for a path (the original
    task) waits until released; a later one (a copy) returns at once, or waits until cancelled
    when its path ends in "cancelled"."""

    ran_on: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    released: dict[str, asyncio.Event] = dataclasses.field(default_factory=dict)
    cancelled: set[str] = dataclasses.field(default_factory=set)

    def on(self, worker: str) -> Callable[..., Any]:
        @activity.defn(name="touch")
        async def contested(path: str) -> str:
            runs = self.ran_on.setdefault(path, [])
            runs.append(worker)
            if len(runs) == 1:
                await self.released.setdefault(path, asyncio.Event()).wait()
                return "first"
            if path.endswith("cancelled"):
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    self.cancelled.add(path)
                    raise
            return "copy"

        return contested


async def test_a_copy_whose_start_is_refused_is_cancelled_or_has_its_result_refused(
    stack: LocalStack, client: Client, task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A copy of a started attempt's task reaches another worker (as after a crash or rebalance of
    the history service) and runs at once. If it still runs when the refusal of its start arrives, it is
    cancelled and reports nothing; if it finished first (history paused meanwhile), history
    refuses its result. Either way the workflow sees the first attempt's result only."""
    caplog.set_level(logging.INFO, logger="kadence.worker")
    attempts = ContestedAttempts()
    activity_queue = f"{task_queue}-activities"
    activity_topic = topics.task_queue_topic(activity_queue, "activity")
    history_log = stack.data_dir / "logs" / "history.log"
    async with (
        Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS),
        Worker(client, task_queue=activity_queue, activities=[attempts.on("worker-a")], identity="worker-a") as worker_a,
        Worker(client, task_queue=activity_queue, activities=[attempts.on("worker-b")], identity="worker-b") as worker_b,
    ):
        workers = {"worker-a": worker_a, "worker-b": worker_b}
        partitions = stack.settings.task_queue_partitions

        async def shared() -> bool:  # each worker holds some of the queue's partitions
            held = [worker._context.assignment.partitions.get("activity", []) for worker in workers.values()]
            return all(held) and sorted(p for mine in held for p in mine) == list(range(partitions))

        await until(shared)

        async def started_elsewhere(path: str) -> tuple[WorkflowHandle[Any, Any], Message, int]:
            """The workflow, its attempt started on one worker; its task, and a partition of the other worker."""
            handle = await client.start_workflow(ElsewhereWorkflow.run, args=[activity_queue, path], id=f"contested-{uuid.uuid4()}",
                                                 task_queue=task_queue)
            await wait_for_event(stack, handle.id, "ActivityTaskStarted", timeout=30)
            routed = await until_routed(stack, activity_topic, handle.id)
            other = next(worker for name, worker in workers.items() if name != attempts.ran_on[path][0])
            return handle, routed, other._context.assignment.partitions["activity"][0]

        cancelled = str(tmp_path / "cancelled")
        first, routed, elsewhere = await started_elsewhere(cancelled)
        produce_copy(stack, routed, elsewhere)
        async def copy_cancelled() -> bool:
            return cancelled in attempts.cancelled

        await until(copy_cancelled)
        refusals = [r.getMessage() for r in caplog.records if f"event=activity_start_refused workflow_id={first.id}" in r.getMessage()]
        assert len(refusals) == 1 and "running=True" in refusals[0]
        attempts.released[cancelled].set()
        assert await asyncio.wait_for(first.result(), 30) == "first"

        returned = str(tmp_path / "returned")
        second, routed, elsewhere = await started_elsewhere(returned)
        copy_identity = next(name for name in workers if name != attempts.ran_on[returned][0])
        since = await asyncio.to_thread(command_offset, stack, second.id)

        async def copy_reported() -> bool:
            commands = await asyncio.to_thread(commands_of, stack, second.id, since)
            return ("RespondActivityTaskCompleted", copy_identity) in commands

        async def copy_result_refused() -> bool:
            return any(f"event=command_rejected workflow_id={second.id} " in line and "command=RespondActivityTaskCompleted" in line
                       for line in history_log.read_text().splitlines())

        with paused(stack, "history"):
            produce_copy(stack, routed, elsewhere)
            await until(copy_reported)
        await until(copy_result_refused)
        attempts.released[returned].set()
        assert await asyncio.wait_for(second.result(), 30) == "first"
    for handle, path in ((first, cancelled), (second, returned)):
        assert len(attempts.ran_on[path]) == 2 and len(set(attempts.ran_on[path])) == 2
        events = [e["attributes"] for e in (await handle.fetch_history()).events]
        assert [attrs["identity"] for kind, attrs in events if kind == "ActivityTaskStarted"] == [attempts.ran_on[path][0]]
        assert [kind for kind, _ in events].count("ActivityTaskCompleted") == 1


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


async def test_a_task_history_decides_again_after_recovering_its_partition_is_marked_a_possible_copy(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    """A start sent while history is down is decided by the next instance below the partition's end
    at its recovery: the previous one may have decided it and dispatched its workflow task, so the
    task goes out marked, and a worker that reads it after a rebalance waits for its start's answer.
    A start read after the recovery is new to every instance: its task goes out unmarked."""
    workflow_topic = topics.task_queue_topic(task_queue, "workflow")
    stack.kill_service("history")
    end = command_offset(stack, f"{task_queue}-down")
    sent_while_down = asyncio.ensure_future(client.start_workflow(TwoStepWorkflow.run, "x", id=f"{task_queue}-down", task_queue=task_queue))
    await until(lambda: asyncio.to_thread(lambda: command_offset(stack, f"{task_queue}-down") > end))  # in the log, no one deciding it
    stack.start_service("history")
    await asyncio.wait_for(sent_while_down, 60)
    await client.start_workflow(TwoStepWorkflow.run, "y", id=f"{task_queue}-up", task_queue=task_queue)
    tasks = task_codec()
    marked = {}
    for workflow_id in (f"{task_queue}-down", f"{task_queue}-up"):
        routed = await until_routed(stack, workflow_topic, workflow_id)
        marked[workflow_id] = tasks.decode(routed.value(), routed.headers())["task"][1]["redispatched"]
    assert marked == {f"{task_queue}-down": True, f"{task_queue}-up": False}
    assert "event=tasks_marked_as_copies_below" in (stack.data_dir / "logs" / "history.log").read_text()


async def test_a_copy_of_a_workflow_task_its_worker_answered_is_dropped_without_a_replay(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    """History dispatches a workflow task again when no start came within 10 s, as when the first
    waits in a backlog. The copy lands after the first on its partition, so the worker that answered
    the first meets it after: it drops it rather than replay the run, whose answer would only be
    refused (the run is closed here, and the worker caches nothing)."""
    workflow_id = f"{task_queue}-copied"
    workflow_topic = topics.task_queue_topic(task_queue, "workflow")
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES, max_cached_workflows=0):
        await client.execute_workflow(TwoStepWorkflow.run, "x", id=workflow_id, task_queue=task_queue)
        first = await until_routed(stack, workflow_topic, workflow_id)
        since = await asyncio.to_thread(command_offset, stack, workflow_id)
        await asyncio.to_thread(produce_copy, stack, first, first.partition())
        end = await asyncio.to_thread(end_of, stack, workflow_topic, first.partition())
        await until(lambda: asyncio.to_thread(committed, stack, topics.worker_group(task_queue, "workflow"), workflow_topic,
                                              first.partition(), end))
    assert await asyncio.to_thread(commands_of, stack, workflow_id, since) == []


def end_of(stack: LocalStack, topic: str, partition: int) -> int:
    consumer = make_consumer(stack.settings, "kadence-test-reader")
    try:
        return watermarks(consumer, topic, [partition])[partition][1]
    finally:
        consumer.close()


def committed(stack: LocalStack, group: str, topic: str, partition: int, offset: int) -> bool:
    """Whether the group committed `offset` or past it on the partition."""
    consumer = make_consumer(stack.settings, group)
    try:
        [position] = consumer.committed([TopicPartition(topic, partition)], timeout=10)
        return bool(position.offset >= offset)
    finally:
        consumer.close()


async def until_routed(stack: LocalStack, topic: str, workflow_id: str, timeout: float = 30) -> Message:
    """The task the history service dispatched for the workflow to `topic`, once it is there."""
    def find() -> Message | None:
        try:
            ends = {p: 0 for p in range(topic_partitions(stack.settings, topic))}
        except KafkaException:  # the history service creates the topic as it dispatches the first task
            return None
        return next((msg for msg in read_to_end(stack.settings, topic, ends) if workflow_id.encode() in (msg.value() or b"")), None)

    async def poll() -> Message:
        while (found := await asyncio.to_thread(find)) is None:
            await asyncio.sleep(0.1)
        return found

    return await asyncio.wait_for(poll(), timeout)


def records_in(stack: LocalStack, topic: str) -> int:
    consumer = make_consumer(stack.settings, "kadence-test-reader")
    try:
        return sum(end - first for first, end in watermarks(consumer, topic, range(topic_partitions(stack.settings, topic))).values())
    finally:
        consumer.close()


def skip_past(stack: LocalStack, task_queue: str, routed: Message) -> None:
    """The workers' group of the queue's activity topic moves past the routed task (no worker of
    the queue may have joined yet)."""
    workers = make_consumer(stack.settings, topics.worker_group(task_queue, "activity"))
    workers.commit(offsets=[TopicPartition(routed.topic(), routed.partition(), routed.offset() + 1)], asynchronous=False)
    workers.close()


def produce_copy(stack: LocalStack, routed: Message, partition: int) -> None:
    producer = make_producer(stack.settings)
    producer.produce(routed.topic(), routed.value(), routed.key(), partition=partition, headers=routed.headers())
    assert producer.flush(30) == 0


@contextlib.contextmanager
def paused(stack: LocalStack, instance: str) -> Iterator[None]:
    """The service stopped (SIGSTOP) for the block: it reads and answers nothing until it goes on."""
    process = stack.services[instance]
    process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        process.send_signal(signal.SIGCONT)


def command_offset(stack: LocalStack, workflow_id: str) -> int:
    """The end of the workflow's partition of kadence.commands: where its next command goes."""
    return end_of(stack, topics.COMMANDS, partition_for_key(workflow_id.encode(), topic_partitions(stack.settings, topics.COMMANDS)))


def commands_of(stack: LocalStack, workflow_id: str, since: int) -> list[tuple[str, str]]:
    """The workflow's commands from offset `since` of its partition: (kind, identity) each."""
    partition = partition_for_key(workflow_id.encode(), topic_partitions(stack.settings, topics.COMMANDS))
    commands = command_codec()
    decoded = (commands.decode(msg.value(), msg.headers()) for msg in read_to_end(stack.settings, topics.COMMANDS, {partition: since}))
    return [(c["command"][0], c["identity"]) for c in decoded if c["workflow_id"] == workflow_id]


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

    async def backlog(matches: Callable[[int], bool]) -> bool:
        kinds = {k.kind: k for k in (await described()).kinds}
        return "activity" in kinds and matches(kinds["activity"].backlog)

    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS):
        waiting = await client.start_workflow(FanOutWorkflow.run, args=[activity_queue, 40], id=f"{workflow_id}-a", task_queue=task_queue)
        # Routed, and no worker polls the queue yet (10 s on, history dispatches them again: a
        # loaded machine may first look after that).
        await until(lambda: backlog(lambda count: count >= 40))

        workers = [Worker(client, task_queue=activity_queue, activities=ALL_ACTIVITIES, identity=f"worker-{i}") for i in range(4)]
        async with contextlib.AsyncExitStack() as running:
            for worker in workers:
                await running.enter_async_context(worker)
                await asyncio.wait_for(worker.ready.wait(), 30)
            assert await waiting.result() == 40
            # With the four in the group, new tasks spread over all of them.
            handle = await client.start_workflow(FanOutWorkflow.run, args=[activity_queue, 40], id=workflow_id, task_queue=task_queue)
            assert await handle.result() == 40
            await until(lambda: backlog(lambda count: count == 0))
            description = await described()
            routed = await asyncio.to_thread(records_in, stack, topics.task_queue_topic(activity_queue, "activity"))

    events = audit_of(stack, workflow_id).history(workflow_id, handle.result_run_id)
    started_by = [a["identity"] for kind, a in (e["attributes"] for e in events) if kind == "ActivityTaskStarted"]
    assert sorted(set(started_by)) == [f"worker-{i}" for i in range(4)], "every worker took tasks"
    pollers = [p for p in description.pollers if p.kind == "activity"]
    assert sorted(p.identity for p in pollers) == [f"worker-{i}" for i in range(4)]
    assert sorted(p for poller in pollers for p in poller.partitions) == list(range(stack.settings.task_queue_partitions))
    (activity,) = [k for k in description.kinds if k.kind == "activity"]
    assert routed >= 80 and activity.dispatch_rate_per_s == round(routed / RATE_WINDOW_S, 2)  # the test is shorter than the window


async def test_the_queue_rate_limit_spaces_activity_starts(stack: LocalStack, client: Client, task_queue: str) -> None:
    workflow_id = f"limited-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES,
                      max_task_queue_activities_per_second=5):
        handle = await client.start_workflow(FanOutWorkflow.run, args=[task_queue, 10], id=workflow_id, task_queue=task_queue)
        assert await handle.result() == 10
    started = [e["event_time_ms"] for e in audit_of(stack, workflow_id).history(workflow_id, handle.result_run_id)
               if e["attributes"][0] == "ActivityTaskStarted"]
    assert max(started) - min(started) >= 1500, "10 starts at 5 a second take at least 1.8 s"
