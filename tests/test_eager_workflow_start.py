"""Eager workflow start (temporalio's start_workflow(request_eager_start=True)): a worker of the
client's process with a free workflow task slot runs the run's first workflow task, which history
records started by it in the start's batch and hands back in the start's answer, dispatching none;
without such a worker or slot, or for a start answered before, the task goes through the queue
(docs/architecture.md, "Eager workflow start")."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest

from kadence import activity, workflow
from kadence.client import Client, Interceptor, OutboundInterceptor, StartWorkflowInput, WorkflowHandle, _eager
from kadence.client._eager import EagerStart, EagerWorkers
from kadence.client._replies import ReplyListener
from kadence.dev.local_stack import LocalStack
from kadence.protocol import topics
from kadence.protocol.codec import codec, task_codec
from kadence.protocol.kafka import read_to_end, topic_partitions
from kadence.protocol.settings import KafkaSettings
from kadence.worker import Worker
from tests.workflows import EchoWorkflow, echo


class RecordEagerRequests(Interceptor):
    def __init__(self) -> None:
        self.requested: list[bool] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        requested = self.requested

        class Recording(OutboundInterceptor):
            async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle:
                requested.append(input.request_eager_start)
                return await super().start_workflow(input)

        return Recording(next)


HOLDING = asyncio.Event()  # set once the held local activity runs
RELEASE = asyncio.Event()  # set by the test to let it end


@activity.defn
async def held() -> str:
    HOLDING.set()
    await RELEASE.wait()
    return "released"


@workflow.defn
class HoldingWorkflow:
    """Its first workflow task waits on a local activity, holding its workflow task slot."""

    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_local_activity(held, start_to_close_timeout=timedelta(seconds=30))


def eagerly_started(handle: WorkflowHandle) -> bool:
    return bool(getattr(handle, "__temporal_eagerly_started"))  # noqa: B009 (as temporalio's sample reads it)


def dispatched_workflow_tasks(stack: LocalStack, task_queue: str, workflow_id: str) -> list[int]:
    """The scheduled_event_id of each workflow task of the workflow that went through the queue's topic."""
    topic, tasks = topics.task_queue_topic(task_queue, "workflow"), task_codec()
    starts = {p: 0 for p in range(topic_partitions(stack.settings, topic))}
    return [task["task"][1]["scheduled_event_id"] for task in (
        tasks.decode(msg.value(), msg.headers()) for msg in read_to_end(stack.settings, topic, starts) if msg.key() == workflow_id.encode()
    ) if task["task"][0] == "WorkflowTask"]


async def first_task_start(handle: WorkflowHandle) -> tuple[list[str], str, bool]:
    """The run's first three event kinds, who started its first workflow task, and whether that
    start was written with the run's WorkflowExecutionStarted (at its time: one batch)."""
    events = (await handle.fetch_history()).events
    return ([event["attributes"][0] for event in events[:3]], events[2]["attributes"][1]["identity"],
            events[2]["event_time_ms"] == events[0]["event_time_ms"])


async def test_a_worker_of_the_process_runs_the_first_workflow_task_handed_back_with_the_start(
    stack: LocalStack, task_queue: str,
) -> None:
    recorder = RecordEagerRequests()
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn, interceptors=[recorder])
    workflow_id = f"eager-start-{uuid.uuid4()}"
    try:
        async with Worker(client, task_queue=task_queue, workflows=[EchoWorkflow], activities=[echo], identity="the-worker"):
            handle = await client.start_workflow(EchoWorkflow.run, "hi", id=workflow_id, task_queue=task_queue, request_eager_start=True)
            assert eagerly_started(handle)
            assert await handle.result() == "hi"
        assert await first_task_start(handle) == (["WorkflowExecutionStarted", "WorkflowTaskScheduled", "WorkflowTaskStarted"],
                                                  "the-worker", True)
    finally:
        await client.close()
    assert recorder.requested == [True]
    # The first task never went through the queue; the one after the activity did.
    dispatched = dispatched_workflow_tasks(stack, task_queue, workflow_id)
    assert dispatched and 2 not in dispatched


async def test_without_a_worker_in_the_process_the_first_task_goes_through_the_queue(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    """The worker runs on a client of its own (as in another process): the start finds no worker."""
    worker_client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
    workflow_id = f"eager-start-{uuid.uuid4()}"
    try:
        async with Worker(worker_client, task_queue=task_queue, workflows=[EchoWorkflow], activities=[echo], identity="elsewhere"):
            handle = await client.start_workflow(EchoWorkflow.run, "hi", id=workflow_id, task_queue=task_queue, request_eager_start=True)
            assert not eagerly_started(handle)
            assert await handle.result() == "hi"
    finally:
        await worker_client.close()
    assert await first_task_start(handle) == (["WorkflowExecutionStarted", "WorkflowTaskScheduled", "WorkflowTaskStarted"],
                                              "elsewhere", False)
    assert 2 in dispatched_workflow_tasks(stack, task_queue, workflow_id)


async def test_with_no_workflow_task_slot_free_the_first_task_goes_through_the_queue(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    """One slot, held by an eagerly started run's first task while its local activity runs: the
    next eager start finds none, and its task waits in the queue until the worker is free."""
    HOLDING.clear()
    RELEASE.clear()
    async with Worker(client, task_queue=task_queue, workflows=[HoldingWorkflow, EchoWorkflow], activities=[held, echo],
                      max_concurrent_workflow_tasks=1):
        holding = await client.start_workflow(HoldingWorkflow.run, id=f"holding-{uuid.uuid4()}", task_queue=task_queue,
                                              request_eager_start=True)
        assert eagerly_started(holding)
        await asyncio.wait_for(HOLDING.wait(), 10)
        queued = await client.start_workflow(EchoWorkflow.run, "queued", id=f"queued-{uuid.uuid4()}", task_queue=task_queue,
                                             request_eager_start=True)
        assert not eagerly_started(queued)
        RELEASE.set()
        assert await holding.result() == "released"
        assert await queued.result() == "queued"
    assert 2 in dispatched_workflow_tasks(stack, task_queue, queued.id)


async def test_a_start_answered_before_does_not_hand_the_task_over_again(stack: LocalStack, client: Client, task_queue: str) -> None:
    """The same request id again (a retry) is answered with the run it started, and no task: the
    first answer handed it over, once."""
    workflow_id, request_id = f"eager-start-{uuid.uuid4()}", str(uuid.uuid4())
    async with Worker(client, task_queue=task_queue, workflows=[EchoWorkflow], activities=[echo]):
        first = await client.start_workflow(EchoWorkflow.run, "once", id=workflow_id, task_queue=task_queue, request_id=request_id,
                                            request_eager_start=True)
        again = await client.start_workflow(EchoWorkflow.run, "once", id=workflow_id, task_queue=task_queue, request_id=request_id,
                                            request_eager_start=True)
        assert (eagerly_started(first), eagerly_started(again)) == (True, False)
        assert again.result_run_id == first.result_run_id
        assert await again.result() == "once"
    assert 2 not in dispatched_workflow_tasks(stack, task_queue, workflow_id)


class Slot:
    """A worker's slot as the client sees it (kadence.client._eager.EagerSlot)."""

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self.ran: list[tuple[dict[str, Any], int]] = []
        self.released = 0

    def run(self, task: dict[str, Any], started_time_ms: int) -> None:
        self.ran.append((task, started_time_ms))

    def release(self) -> None:
        self.released += 1


class SlotsOf:
    def __init__(self, free: int, identity: str) -> None:
        self.free, self.identity = free, identity

    def reserve_eager_slot(self, workflow_type: str, workflow_id: str) -> Slot | None:
        if not self.free:
            return None
        self.free -= 1
        return Slot(self.identity)


FIRST_TASK = {"task_queue": "q", "workflow_type": "W", "scheduled_event_id": 2, "attempt": 1, "history": [], "first_event_id": 3,
              "redispatched": False, "clock_offset_ms": 0}


def answered(replies: ReplyListener, request_id: str, eager_task: dict[str, Any] | None) -> None:
    """The history service's answer to the start arrives on kadence.replies."""
    reply = codec("Reply")
    replies._settle_reply(reply.encode({"reply": ("CommandAnswer", {
        "request_id": request_id, "workflow_id": "w", "run_id": "r", "accepted": True, "cause": None, "reason": None,
        "eager_workflow_task": eager_task,
    })}), reply.headers())


async def test_a_start_takes_the_first_worker_of_its_queue_with_a_slot_and_hands_it_the_task_its_answer_brings() -> None:
    workers, replies = EagerWorkers(), ReplyListener(KafkaSettings.from_env())
    full, free = SlotsOf(0, "full"), SlotsOf(1, "free")
    for worker in (full, free):
        workers.register("q", worker)
    assert EagerStart.reserve(workers, replies, "other-queue", "W", "w", "s0") is None
    assert EagerStart.reserve(workers, None, "q", "W", "w", "s0") is None  # no reply listener: the task could not come back
    start = EagerStart.reserve(workers, replies, "q", "W", "w", "s1")
    assert start is not None and start.slot.identity == "free"
    answered(replies, "s1", {"task": FIRST_TASK, "started_time_ms": 1234})
    assert await start.hand_over("w", "r")
    assert start.slot.ran == [({"workflow_id": "w", "run_id": "r", "task": ("WorkflowTask", FIRST_TASK), "history_length": 0}, 1234)]
    assert EagerStart.reserve(workers, replies, "q", "W", "w", "s2") is None  # both full now
    workers.unregister("q", free)
    workers.unregister("q", full)
    assert EagerStart.reserve(workers, replies, "q", "W", "w", "s3") is None


async def test_a_start_without_its_task_gives_the_slot_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its answer brings none (history started the task otherwise), or no answer comes on
    kadence.replies in time (the read model answered, the reply was lost), or the caller gives up."""
    workers, replies = EagerWorkers(), ReplyListener(KafkaSettings.from_env())
    workers.register("q", SlotsOf(3, "worker"))
    monkeypatch.setattr(_eager, "EAGER_TASK_WAIT_S", 0.05)
    starts = [EagerStart.reserve(workers, replies, "q", "W", "w", f"s{i}") for i in range(3)]
    assert all(starts)
    plain, unanswered, cancelled = (start for start in starts if start is not None)
    answered(replies, "s0", None)
    assert not await plain.hand_over("w", "r") and (plain.slot.released, plain.slot.ran) == (1, [])
    assert not await unanswered.hand_over("w", "r") and unanswered.slot.released == 1
    waiting = asyncio.create_task(cancelled.hand_over("w", "r"))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert cancelled.slot.released == 1 and replies.eager_tasks == {}
