"""Eager activity execution: the worker that completes a workflow task runs the activities it
schedules on its own queue itself, with no task on the queue's topic (docs/architecture.md,
"Task dispatch")."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kadence import activity, workflow
from kadence.client import Client, WorkflowHandle
from kadence.dev.local_stack import LocalStack
from kadence.protocol import topics
from kadence.protocol.codec import Record, build_codec, command_codec, writes_field
from kadence.protocol.kafka import read_to_end, topic_partitions
from kadence.worker import Worker
from kadence.worker._activity import ActivityWorker, EagerStarts
from kadence.worker._workflow import _activity_task
from tests.workflows import FanOutWorkflow, HeartbeatWorkflow, count_with_heartbeats, echo


@workflow.defn
class NotEagerWorkflow:
    @workflow.run
    async def run(self, value: str) -> str:
        return await workflow.execute_activity(echo, value, start_to_close_timeout=timedelta(seconds=10), disable_eager_execution=True)


TAKEN: Counter[str] = Counter()  # how often take_a_moment ran, by value


@activity.defn
async def take_a_moment(value: str) -> str:
    """Long enough for the task history dispatched to arrive first, short enough to end before
    the refusal of an eager start would come through the read model."""
    TAKEN[value] += 1
    await asyncio.sleep(0.03)
    return value


@activity.defn
async def hold(value: str) -> str:
    await asyncio.sleep(60)
    return value


HELD_STARTED = asyncio.Event()  # set by the test once the held activity's start is in the history


@activity.defn
async def until_the_held_activity_started() -> None:
    await HELD_STARTED.wait()


@workflow.defn
class ShiftedWorkflow:
    """Schedules an activity on another queue, then, in its second workflow task, waits (in a
    local activity) until that one started, and runs two activities at once: the start written
    while the task ran shifts every id its worker foresees."""

    @workflow.run
    async def run(self, other_queue: str) -> list[str]:
        workflow.start_activity(hold, "held", task_queue=other_queue, start_to_close_timeout=timedelta(seconds=120))
        await workflow.sleep(0.01)
        await workflow.execute_local_activity(until_the_held_activity_started, start_to_close_timeout=timedelta(seconds=30))
        return list(await asyncio.gather(*(
            workflow.execute_activity(take_a_moment, value, start_to_close_timeout=timedelta(seconds=30)) for value in ("b", "c")
        )))


def dispatched_activity_tasks(stack: LocalStack, task_queue: str, workflow_id: str) -> int:
    """How many activity tasks of the workflow went through the queue's topic."""
    topic = topics.task_queue_topic(task_queue, "activity")
    starts = {p: 0 for p in range(topic_partitions(stack.settings, topic))}
    return sum(1 for msg in read_to_end(stack.settings, topic, starts) if (msg.key() or b"").startswith(f"{workflow_id}/".encode()))


def commands_sent(stack: LocalStack, workflow_id: str) -> list[str]:
    """The kinds of the commands on kadence.commands for the workflow, in order."""
    commands = command_codec()
    starts = {p: 0 for p in range(topic_partitions(stack.settings, topics.COMMANDS))}
    return [commands.decode(msg.value(), msg.headers())["command"][0]
            for msg in read_to_end(stack.settings, topics.COMMANDS, starts) if msg.key() == workflow_id.encode()]


async def started_by(handle: WorkflowHandle) -> list[str]:
    """The identity each ActivityTaskStarted event of the run records."""
    events = (await handle.fetch_history()).events
    return [attrs["identity"] for kind, attrs in (e["attributes"] for e in events) if kind == "ActivityTaskStarted"]


async def test_the_completing_worker_runs_the_activities_it_schedules_with_no_task_on_the_queue(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    """Three activities at once: each runs once on the worker that scheduled them, started by the
    workflow task's completion itself (no RecordActivityTaskStarted), and none went through the
    activity topic. An eager attempt that times out (here its heartbeat) is retried as any attempt
    is: through the queue."""
    async with Worker(client, task_queue=task_queue, workflows=[FanOutWorkflow, HeartbeatWorkflow],
                      activities=[echo, count_with_heartbeats]) as worker:
        await asyncio.wait_for(worker.ready.wait(), 30)
        fan_out = await client.start_workflow(FanOutWorkflow.run, args=[task_queue, 3], id=f"eager-{uuid.uuid4()}", task_queue=task_queue)
        assert await asyncio.wait_for(fan_out.result(), 60) == 3
        heartbeats = await client.start_workflow(HeartbeatWorkflow.run, 3, id=f"eager-{uuid.uuid4()}", task_queue=task_queue)
        assert (await asyncio.wait_for(heartbeats.result(), 60)).startswith("attempt 2 resumed")
    assert await started_by(fan_out) == [worker.identity] * 3
    assert await asyncio.to_thread(dispatched_activity_tasks, stack, task_queue, fan_out.id) == 0
    assert "RecordActivityTaskStarted" not in await asyncio.to_thread(commands_sent, stack, fan_out.id)
    assert await started_by(heartbeats) == [worker.identity] * 2
    assert await asyncio.to_thread(dispatched_activity_tasks, stack, task_queue, heartbeats.id) == 1


async def test_eager_execution_is_off_per_activity_or_per_worker(stack: LocalStack, client: Client, task_queue: str) -> None:
    """temporalio's switches: `disable_eager_execution` on the call, `disable_eager_activity_execution`
    on the worker; either sends the activity through the task queue."""
    async with Worker(client, task_queue=task_queue, workflows=[NotEagerWorkflow, FanOutWorkflow], activities=[echo]) as worker:
        await asyncio.wait_for(worker.ready.wait(), 30)
        per_call = await client.start_workflow(NotEagerWorkflow.run, "hi", id=f"not-eager-{uuid.uuid4()}", task_queue=task_queue)
        assert await asyncio.wait_for(per_call.result(), 60) == "hi"
    async with Worker(client, task_queue=task_queue, workflows=[FanOutWorkflow], activities=[echo],
                      disable_eager_activity_execution=True) as worker:
        await asyncio.wait_for(worker.ready.wait(), 30)
        per_worker = await client.start_workflow(FanOutWorkflow.run, args=[task_queue, 2], id=f"not-eager-{uuid.uuid4()}",
                                                 task_queue=task_queue)
        assert await asyncio.wait_for(per_worker.result(), 60) == 2
    assert await asyncio.to_thread(dispatched_activity_tasks, stack, task_queue, per_call.id) == 1
    assert await asyncio.to_thread(dispatched_activity_tasks, stack, task_queue, per_worker.id) == 2


def test_a_worker_pinned_to_a_command_version_without_eager_request_id_runs_no_activity_eagerly() -> None:
    """Command 51c80d57, the version before completions started their eager activities, has no
    eager_request_id: a build pinned to it (KADENCE_SCHEMA_PIN, during a roll) sends every attempt
    through the queue, where that release's history service starts it."""
    current = command_codec()
    before = build_codec(current.name, current.schema, current.versions, pinned={"51c80d57350e9cf4"})
    assert writes_field(current, "RespondWorkflowTaskCompleted", "eager_request_id")
    assert not writes_field(before, "RespondWorkflowTaskCompleted", "eager_request_id")


async def test_no_activity_runs_eagerly_while_one_scheduled_before_is_pending(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    """The held activity starts while the second workflow task runs, which would shift the ids its
    worker foresees for "b" and "c": an eager attempt would run under the wrong id, beside the one
    history dispatches, until its refusal came. With "held" pending, the completion runs nothing
    eagerly: history dispatches both, and each activity's result is its own. (A refusal's
    displacement of an eager attempt is the next test's.)"""
    other_queue = f"{task_queue}-other"
    workflow_id = f"shifted-{uuid.uuid4()}"
    HELD_STARTED.clear()
    TAKEN.clear()
    async with Worker(client, task_queue=task_queue, workflows=[ShiftedWorkflow],
                      activities=[take_a_moment, until_the_held_activity_started]) as worker:
        await asyncio.wait_for(worker.ready.wait(), 30)
        handle = await client.start_workflow(ShiftedWorkflow.run, other_queue, id=workflow_id, task_queue=task_queue)
        while "TimerFired" not in [e["attributes"][0] for e in (await handle.fetch_history()).events]:
            await asyncio.sleep(0.05)
        async with Worker(client, task_queue=other_queue, activities=[hold]) as holder:
            await asyncio.wait_for(holder.ready.wait(), 30)
            while "ActivityTaskStarted" not in [e["attributes"][0] for e in (await handle.fetch_history()).events]:
                await asyncio.sleep(0.05)
            HELD_STARTED.set()
            assert await asyncio.wait_for(handle.result(), 60) == ["b", "c"]
    assert await asyncio.to_thread(dispatched_activity_tasks, stack, task_queue, workflow_id) == 2
    assert TAKEN == {"b": 1, "c": 1}, "each ran once: no eager attempt beside the dispatched one"


@activity.defn
async def until_cancelled(value: str) -> str:
    await asyncio.Event().wait()
    return value


async def unpolled_activity_worker(client: Client, task_queue: str, activity: Callable[..., Any]) -> ActivityWorker:
    """The activity side of a worker that polls nothing, its read model started as a polling worker's is."""
    activities = Worker(client, task_queue=task_queue, activities=[activity])._activity_worker
    await client.expect_outcome("read model started")
    return activities


def activity_task(client: Client, workflow_task: Record, activity_type: str, value: str, scheduled_event_id: int) -> Record:
    """An activity task of `workflow_task`'s run, as history would dispatch it, with `value` as its input."""
    attrs = {"activity_id": value, "activity_type": activity_type, "task_queue": "",
             "input": client.data_converter.payload_converter.to_payloads([value]), "heartbeat_timeout_ms": 0,
             "start_to_close_timeout_ms": 30_000, "schedule_to_close_timeout_ms": 0, "retry_policy": None}
    return _activity_task(workflow_task, attrs, scheduled_event_id, 0)


async def test_a_task_from_the_queue_under_the_key_of_a_running_eager_attempt_stops_that_attempt(client: Client, task_queue: str) -> None:
    """The worker's side of the test above, without its race: an eager attempt runs under the id
    it foresaw, its refusal not come yet, when the queue hands this worker a task for that id (so
    another activity's). The eager attempt is cancelled before the task's start is sent and will
    report nothing; the task's attempt runs under the key, and its cancellation reaches it."""
    activities = await unpolled_activity_worker(client, task_queue, until_cancelled)
    workflow_task = {"workflow_id": f"displaced-{uuid.uuid4()}", "run_id": str(uuid.uuid4()),
                     "task": ("WorkflowTask", {"task_queue": task_queue, "workflow_type": "Shifted", "scheduled_event_id": 8})}
    eager = activity_task(client, workflow_task, "until_cancelled", "c", 13)
    assert activities._slots.try_acquire()  # the slot claim_eager_slot takes (this worker polls no partition)
    completion: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    completion.set_result(None)  # delivered
    refusal: asyncio.Future[object] = asyncio.get_running_loop().create_future()  # not come yet
    prompt = time.time() * 1000 + 60_000  # delivered in time: it runs at once
    activities.run_eagerly(EagerStarts([eager], "eager-request", refusal), completion, accepted_first=False, run_by=prompt)  # type: ignore[arg-type]
    key = (eager["run_id"], 13, 1)
    displaced = activities._attempts[key]
    queued = activity_task(client, workflow_task, "until_cancelled", "b", 13)
    [start] = await activities._start_attempt(queued, None, accepted_first=False, run_by=prompt)
    await asyncio.wait_for(start, 10)
    assert displaced.refused and displaced.job is not None
    await asyncio.wait_for(asyncio.gather(displaced.job, return_exceptions=True), 10)
    assert activities._attempts[key] is not displaced and activities._attempts[key].job is not None
    assert not activities._attempts[key].job.done()
    activities._cancel_attempt({**queued, "task": ("ActivityCancellation", {"scheduled_event_id": 13, "attempt": 1, "task_queue": ""})})
    await asyncio.wait_for(asyncio.gather(*activities._running, return_exceptions=True), 10)


SLOW_ONCE: Counter[str] = Counter()  # how often outlast_the_task ran, by workflow id


@activity.defn
async def outlast_the_task(workflow_id: str) -> None:
    """Outlasts its workflow task's 1 s timeout the first time, so history times the task out
    before the completion that schedules the eager attempt reaches the log."""
    SLOW_ONCE[workflow_id] += 1
    if SLOW_ONCE[workflow_id] == 1:
        await asyncio.sleep(3)


@workflow.defn
class LateCompletionWorkflow:
    @workflow.run
    async def run(self, value: str) -> str:
        await workflow.execute_local_activity(outlast_the_task, workflow.info().workflow_id, start_to_close_timeout=timedelta(seconds=10))
        return await workflow.execute_activity(take_a_moment, value, start_to_close_timeout=timedelta(seconds=30))


async def test_an_eager_attempt_whose_completion_lands_after_its_task_timed_out_does_not_run(
    client: Client, task_queue: str,
) -> None:
    """A workflow task's completion that reaches the log late (here its local activity outlasts
    the task's timeout; in the soak, a broker restart held it) comes after history timed the task
    out, and is refused. Its eager attempt must not run on the completion's delivery alone: the
    retried task schedules the activity again, as attempt 1, and that would run it twice. It waits
    for history's answer, which refuses it; the activity runs once, from the retried task."""
    workflow_id = f"late-completion-{uuid.uuid4()}"
    TAKEN.clear()
    async with Worker(client, task_queue=task_queue, workflows=[LateCompletionWorkflow],
                      activities=[take_a_moment, outlast_the_task]) as worker:
        await asyncio.wait_for(worker.ready.wait(), 30)
        handle = await client.start_workflow(LateCompletionWorkflow.run, "late", id=workflow_id, task_queue=task_queue,
                                             task_timeout=timedelta(seconds=1))
        assert await asyncio.wait_for(handle.result(), 60) == "late"
    kinds = [e["attributes"][0] for e in (await handle.fetch_history()).events]
    assert "WorkflowTaskTimedOut" in kinds, kinds
    assert TAKEN == {"late": 1}, "attempt 1 ran once: not beside the one the retried task scheduled"


async def test_an_attempt_whose_start_lands_late_runs_only_once_history_accepts_it(client: Client, task_queue: str) -> None:
    """The queue's side of the test above: a start that reaches the log PROMPT_START_S after its
    task was dispatched (the broker away, a backlog) may come after history dispatched a copy that
    another worker started. Its attempt waits for history's answer; here a refusal (no such run),
    so it never runs, where a prompt start's attempt runs at once and is cancelled by the refusal."""
    activities = await unpolled_activity_worker(client, task_queue, take_a_moment)
    workflow_task = {"workflow_id": f"late-start-{uuid.uuid4()}", "run_id": str(uuid.uuid4()),
                     "task": ("WorkflowTask", {"task_queue": task_queue, "workflow_type": "Unknown", "scheduled_event_id": 2})}
    TAKEN.clear()
    now_ms = time.time() * 1000
    for scheduled_event_id, value, run_by in ((5, "late", now_ms - 1), (6, "prompt", now_ms + 60_000)):
        task = activity_task(client, workflow_task, "take_a_moment", value, scheduled_event_id)
        [start] = await activities._start_attempt(task, None, accepted_first=False, run_by=run_by)
        await asyncio.wait_for(start, 10)
        await asyncio.wait_for(asyncio.gather(*activities._running, return_exceptions=True), 30)
    assert TAKEN == {"prompt": 1}, "the late start's attempt waited for the refusal; the prompt one ran on delivery"
